"""Fixtures for the protocol tests: a real embedded optimizer on loopback, and clients of it.

``scripted(script, token=...)`` starts an ``OptimizerServer`` playing a script (stopped after the
test); ``client_for(server, ...)`` builds an ``OptimizerClient`` with small, test-sized backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from servo_actors.config.optimizer_section import OptimizerConfig, Settings
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.optimizer.server import OptimizerServer
from servo_actors.protocol.client import OptimizerClient

APP = "example.com/web"


@pytest.fixture(autouse=True)
def _capture_client_logs(caplog: pytest.LogCaptureFixture) -> None:
    # Whatever another test did to the root logger's level, the client's lines reach caplog.
    caplog.set_level(logging.INFO, logger="servo_actors.protocol")


@pytest.fixture
def scripted() -> Iterator[Callable[..., OptimizerServer]]:
    servers: list[OptimizerServer] = []

    def start(
        script: list[dict[str, Any]], *, token: str | None = None, sleep: str = "0.5s"
    ) -> OptimizerServer:
        plan: dict[str, Any] = {"app": APP, "script": script, "sleep": sleep}
        if token is not None:
            plan["token"] = token
        server = OptimizerServer(ScriptedDriver.from_plan(plan), app=APP, token=token).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def client_for() -> Iterator[Callable[..., OptimizerClient]]:
    clients: list[OptimizerClient] = []

    def build(
        server: OptimizerServer | None = None,
        *,
        base_url: str | None = None,
        token: str | None = None,
        backoff: tuple[float, float, float] = (0.05, 0.2, 3.0),
        timeouts: tuple[float, float] = (2.0, 5.0),
        progress_interval: float = 2.0,
        stop: threading.Event | None = None,
        gone_wait: float = 30.0,
        servo_uid: str | None = "servo-1",
    ) -> OptimizerClient:
        url = base_url if base_url is not None else server.url  # type: ignore[union-attr]
        settings = Settings(
            progress_interval=progress_interval,
            timeouts={"connect": timeouts[0], "read": timeouts[1]},
            backoff={"min": backoff[0], "max": backoff[1], "max_time": backoff[2]},
        )
        client = OptimizerClient(
            OptimizerConfig(id=APP, base_url=url),
            settings,
            token=SecretStr(token) if token is not None else None,
            servo_uid=servo_uid,
            stop=stop,
            gone_wait=gone_wait,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def servo_requests(server: OptimizerServer, event: str | None = None) -> list[dict[str, Any]]:
    """The server's history of servo requests (of ``event``, if given), oldest first."""
    history = server.state()["history"]
    return [entry for entry in history if event is None or entry.get("event") == event]


@pytest.fixture
def history() -> Callable[..., list[dict[str, Any]]]:
    return servo_requests
