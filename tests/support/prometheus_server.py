"""A real Prometheus server for tests: a free loopback port, temporary storage, stopped by PID.

::

    server = PrometheusServer(tmp_path, ["127.0.0.1:9464"], job="servo")
    server.wait_ready()
    server.wait_for_scrape("servo")
    server.query('servo_commands_received_total')      # the API's result list
    server.stop()

The binary comes from the Debian package ``prometheus``; without it the test fails (it does not
skip): CI installs it (``scripts/test``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

READY_TIMEOUT = 30.0  # seconds for /-/ready after start
FIRST_SCRAPE_TIMEOUT = 30.0  # seconds until the exporter target has been scraped
STOP_TIMEOUT = 10.0  # seconds for Prometheus to exit on SIGTERM before SIGKILL
POLL = 0.1  # seconds between readiness probes
PROBE_TIMEOUT = 2.0  # seconds for one readiness probe
SCRAPE_INTERVAL = "1s"
QUERY_TIMEOUT = 5.0  # seconds for one API query


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prometheus_binary() -> str:
    """The path of the prometheus binary; fails the test (never skips) when it is missing."""
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if not found:
        pytest.fail(
            "the prometheus binary is missing: install the Debian package "
            "(apt-get install prometheus); these tests need a real Prometheus server"
        )
    return found


class PrometheusServer:
    """A real Prometheus process on a free loopback port, with its own temporary storage."""

    def __init__(
        self,
        workdir: Path,
        targets: list[str],
        job: str = "exporter",
        scrape_interval: str = SCRAPE_INTERVAL,
        scrape_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        """Scrapes ``targets`` as ``job``; ``scrape_configs`` (Prometheus's own section, as dicts)
        replaces them where a test needs discovery, labels or TLS."""
        self.workdir = workdir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        lines = ["global:", f"  scrape_interval: {scrape_interval}", f"  scrape_timeout: {scrape_interval}"]
        if scrape_configs is not None:
            lines += yaml.safe_dump({"scrape_configs": scrape_configs}).splitlines()
        elif targets:
            lines += [
                "scrape_configs:",
                f"  - job_name: {job}",
                "    static_configs:",
                f"      - targets: {targets!r}",
            ]
        config.write_text("\n".join(lines) + "\n")
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C on pytest is not its business; we stop it by PID
            )

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.base_url}/-/ready", timeout=PROBE_TIMEOUT).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(POLL)
        pytest.fail(f"prometheus at {self.base_url} not ready within {READY_TIMEOUT}s:\n{self.log_tail()}")

    def wait_for_scrape(self, job: str = "exporter", health: str = "up") -> None:
        """Until every target of ``job`` has been scraped with ``health`` (and, if up, data is queryable)."""
        deadline = time.monotonic() + FIRST_SCRAPE_TIMEOUT
        while time.monotonic() < deadline:
            targets = requests.get(f"{self.base_url}/api/v1/targets", timeout=PROBE_TIMEOUT).json()["data"]
            mine = [t for t in targets["activeTargets"] if t["labels"].get("job") == job]
            if mine and all(t["health"] == health for t in mine):
                if health != "up" or self._has_samples(job):
                    return
            time.sleep(POLL)
        pytest.fail(f"{job} target never became {health} within {FIRST_SCRAPE_TIMEOUT}s:\n{self.log_tail()}")

    def _has_samples(self, job: str) -> bool:
        answer = requests.get(
            f"{self.base_url}/api/v1/query", params={"query": f'up{{job="{job}"}}'}, timeout=PROBE_TIMEOUT
        ).json()
        return bool(answer["data"]["result"])

    def query(self, expression: str, at: float | None = None) -> list[dict[str, Any]]:
        """The result list of an instant query (``at``: a Unix time; default now)."""
        params: dict[str, Any] = {"query": expression}
        if at is not None:
            params["time"] = at
        answer = requests.get(f"{self.base_url}/api/v1/query", params=params, timeout=QUERY_TIMEOUT).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def stop(self) -> None:
        """SIGTERM by PID, SIGKILL if it lingers; always reaped."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
