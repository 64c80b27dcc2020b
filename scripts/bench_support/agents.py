"""How to start each agent against the benchmark's optimizer, with the same connectors.

Two connector sets, the same for both agents:

- ``noop``: four connectors that do nothing (servo-actors: the base ``Connector``, each in its
  own actor process; servox: four instances of its built-in ``wait`` connector, whose describe
  is empty and, with ``measure_enabled: false``, whose measure returns at once);
- ``cancel``: three of those and one that never finishes a measurement. In servo-actors it is
  ``chaos`` blocked in a socket read (a truly hung connector). servox runs every connector in one
  asyncio loop, so a blocking hang would stop its loop and no progress post (the only way a
  cancel reaches a servo) would ever go out; its never-finishing connector is
  ``servox_bench_connector.BenchConnector``, which awaits for the whole measurement.

Both post MEASURE progress every ``PROGRESS_INTERVAL`` seconds, so a cancel reaches them quickly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from bench_support.optimizer import APP, TOKEN, BenchOptimizer
from bench_support.processes import AgentProcess, launch

ROOT = Path(__file__).resolve().parent.parent.parent
SERVOX_CONNECTOR_DIR = ROOT / "scripts" / "interop_servox"
PROGRESS_INTERVAL = 0.1
"""Seconds between MEASURE progress posts, both agents."""
NOOP_CONNECTORS = 4
NOOP_TYPE = "servo_actors.connectors.base:Connector"
CONNECTOR_SETS = ("noop", "cancel")

SERVO_ACTORS = "servo-actors"
SERVOX = "servox"


def clean_env() -> dict[str, str]:
    """The environment minus anything that would point an agent elsewhere (or through a proxy)."""
    drop = ("OPSANI_", "SERVO_")
    proxies = {"http_proxy", "https_proxy", "all_proxy"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k.lower() not in proxies}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", PYTHONUNBUFFERED="1")
    return env


def servo_actors_config(connectors: str, optimizer: BenchOptimizer) -> dict[str, Any]:
    noop = [{"name": f"noop{i + 1}", "type": NOOP_TYPE} for i in range(NOOP_CONNECTORS)]
    if connectors == "cancel":
        hung = {"name": "hung", "type": "chaos", "config": {"faults": {"measure": {"action": "socket_read"}}}}
        chosen = [*noop[: NOOP_CONNECTORS - 1], hung]
    else:
        chosen = noop
    return {
        "optimizer": {"id": APP, "base_url": optimizer.url, "token": TOKEN},
        "settings": {
            "progress_interval": PROGRESS_INTERVAL,
            "timeouts": {"connect": "2s", "read": "10s"},
            "backoff": {"min": "50ms", "max": "1s", "max_time": "30s"},
        },
        "connectors": chosen,
    }


def servox_config(connectors: str) -> dict[str, Any]:
    # servox connector names need at least 3 characters; `wait` insists on measure_enabled.
    names = [f"noop{i + 1}" for i in range(NOOP_CONNECTORS)]
    config: dict[str, Any] = {"connectors": {name: "wait" for name in names}}
    config.update({name: {"measure_enabled": False} for name in names})
    if connectors == "cancel":
        last = names[-1]
        del config[last]
        del config["connectors"][last]
        config["connectors"]["hung"] = "servox_bench_connector.BenchConnector"
        config["hung"] = {"progress_every": PROGRESS_INTERVAL}
    return config


class ServoActorsAgent:
    """``python -m servo_actors -l LEVEL -c CONFIG run``, a real subprocess; with ``metrics``, it
    serves /metrics on a free loopback port (``settings.metrics.listen``)."""

    name = SERVO_ACTORS

    def __init__(self, workdir: Path, log_level: str, *, metrics: bool = False) -> None:
        self.workdir = workdir
        self.log_level = log_level.lower()
        self.metrics = metrics
        self.metrics_address: str | None = None

    def start(self, connectors: str, optimizer: BenchOptimizer) -> AgentProcess:
        config = self.workdir / f"servo-actors-{connectors}.yaml"
        settings = servo_actors_config(connectors, optimizer)
        if self.metrics:
            from servo_actors.actors.transport.ports import free_loopback_port

            self.metrics_address = f"127.0.0.1:{free_loopback_port()}"
            settings["settings"]["metrics"] = {"listen": self.metrics_address}
        config.write_text(yaml.safe_dump(settings))
        env = clean_env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "servo_actors", "-l", self.log_level, "-c", str(config), "run"]
        return launch(self.name, command, env, self.workdir, self.workdir / "servo-actors.log")


class ServoxAgent:
    """``servo --no-color -l LEVEL -c CONFIG run`` from a venv holding servox."""

    name = SERVOX

    def __init__(self, workdir: Path, log_level: str, venv: Path) -> None:
        self.workdir = workdir
        self.log_level = log_level.upper()
        self.venv = venv

    def start(self, connectors: str, optimizer: BenchOptimizer) -> AgentProcess:
        config = self.workdir / f"servox-{connectors}.yaml"
        config.write_text(yaml.safe_dump(servox_config(connectors)))
        env = clean_env()
        env.update(
            OPSANI_OPTIMIZER=APP,
            OPSANI_TOKEN=TOKEN,
            OPSANI_BASE_URL=optimizer.url,
            PYTHONPATH=str(SERVOX_CONNECTOR_DIR),
            # authlib warns about httpx at import; harmless, and it would fill the log.
            PYTHONWARNINGS="ignore",
        )
        command = [
            str(self.venv / "bin" / "servo"),
            "--no-color",
            "-l",
            self.log_level,
            "-c",
            str(config),
            "run",
        ]
        return launch(self.name, command, env, self.workdir, self.workdir / "servox.log")
