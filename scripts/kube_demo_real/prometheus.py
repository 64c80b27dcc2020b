"""The real demo's Prometheus: Debian's `prometheus` binary as a process on the host, on a free
loopback port, scraping the app's pods by pod IP with their labels, from the targets file that
pods.FileTargets keeps (Debian's build has no Kubernetes discovery: pods.py says why)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from servo_actors.actors.linux.processes import set_parent_death_signal

READY_TIMEOUT = 60.0
"""Seconds for Prometheus to answer /-/ready (about 1-2 s)."""
STOP_TIMEOUT = 15.0
HTTP_TIMEOUT = 10.0
POLL = 0.25


class PrometheusFailed(Exception):
    """Prometheus did not start, or a query failed; the message says why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape_config(targets: Path, interval: float) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": f"{interval:g}s", "evaluation_interval": f"{interval:g}s"},
        "scrape_configs": [{"job_name": "app", "scrape_timeout": f"{interval:g}s",
                            "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "5s"}]}],
    }  # fmt: skip


class HostPrometheus:
    """One Prometheus process; ``start`` then ``stop`` (by its PID, always)."""

    def __init__(self, directory: Path, interval: float) -> None:
        self.directory = directory
        self.interval = interval
        self.targets = directory / "targets.json"
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise PrometheusFailed("the `prometheus` program is not installed (Debian package prometheus)")
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.targets.exists():
            self.targets.write_text("[]")
        config = self.directory / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(self.targets, self.interval)))
        self.port = free_port()
        log = open(self.directory / "prometheus.log", "wb")  # noqa: SIM115 (the child keeps it)
        with log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={self.directory / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                # a demo killed outright (SIGKILL) takes its Prometheus with it
                preexec_fn=lambda: set_parent_death_signal(signal.SIGTERM),
            )  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PrometheusFailed(f"prometheus exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=HTTP_TIMEOUT) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(POLL)
        raise PrometheusFailed(f"prometheus not ready within {READY_TIMEOUT:g} s: {self.log_tail()}")

    def log_tail(self, lines: int = 10) -> str:
        path = self.directory / "prometheus.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def query(self, expression: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (PrometheusFailed on an error)."""
        params = {"query": expression, **({"time": f"{at:.3f}"} if at is not None else {})}
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT) as answer:
                body = json.loads(answer.read())
        except OSError as exc:
            raise PrometheusFailed(f"query {expression!r}: {exc}") from exc
        if body.get("status") != "success":
            raise PrometheusFailed(f"query {expression!r}: {body.get('error')}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)
