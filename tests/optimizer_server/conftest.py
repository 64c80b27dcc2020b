"""Fixtures for the embedded optimizer's tests: servers on loopback and raw HTTP requests to them.

``post(server, body, ...)`` sends bytes or JSON exactly as given (``http.client``: no client-side
checks), so malformed requests really reach the server.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servo_actors.optimizer.driver import Driver
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.optimizer.server import OptimizerServer

APP = "example.com/web"
HTTP_TIMEOUT = 10.0


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def _post(
    server: OptimizerServer,
    body: Any,
    *,
    path: str | None = None,
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> Answer:
    """One request on a fresh connection. ``body``: bytes as is, anything else as JSON."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=HTTP_TIMEOUT)
    try:
        all_headers = {"Content-Type": "application/json", "Content-Length": str(len(raw))}
        all_headers.update(headers or {})
        connection.request(method, path or server.servo_path, body=raw, headers=all_headers)
        response = connection.getresponse()
        return Answer(response.status, dict(response.getheaders()), response.read())
    finally:
        connection.close()


def _event(name: str, param: Any = None, servo_uid: str | None = None) -> dict[str, Any]:
    return {"event": name, "param": param, "servo_uid": servo_uid}


@pytest.fixture
def post() -> Callable[..., Answer]:
    """``post(server, body, path=..., headers=..., method=...)``: one raw request."""
    return _post


@pytest.fixture
def event() -> Callable[..., dict[str, Any]]:
    """``event(name, param=None, servo_uid=None)``: a request envelope."""
    return _event


@pytest.fixture
def start_server() -> Iterator[Callable[..., OptimizerServer]]:
    servers: list[OptimizerServer] = []

    def start(driver: Driver | list[dict[str, Any]], *, token: str | None = None) -> OptimizerServer:
        if isinstance(driver, list):
            driver = ScriptedDriver.from_plan({"app": APP, "script": driver, "sleep": "1s"})
        server = OptimizerServer(driver, app=APP, token=token).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
