"""The project's test application (kube/app) as a plain process on a free loopback port.

::

    app = AppProcess(binary, tmp_path, {"WORK_MS": "20"})
    app.wait_serving()
    app.get("/work")                  # a requests.Response
    app.cpu_seconds()                 # user + system CPU of the whole process, from /proc
    assert app.stop() == 0            # SIGTERM, then its exit code

Every process is stopped by PID (SIGTERM, then SIGKILL after a bound) and reaped.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import requests

SERVING_TIMEOUT = 20.0
"""Seconds from the start until /healthz answers (a busy shared machine; the app needs ~10 ms)."""
STOP_TIMEOUT = 30.0
"""Seconds for the process to exit after SIGTERM before it is SIGKILLed."""
KILL_TIMEOUT = 5.0
REQUEST_TIMEOUT = 30.0
"""Seconds for one request (a /work of a few hundred ms on a contended machine)."""
POLL = 0.02
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
JOIN_AND_EXEC = (
    'binary=$1; shift; for group; do echo $$ > "$group/cgroup.procs" || exit 125; done; exec "$binary"'
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AppProcess:
    """The application binary started with ``env`` (over PORT and LISTEN=127.0.0.1); its log (the
    start and stop lines) goes to ``workdir``/app-PORT.log. ``cgroups``: cgroup (v1) folders it
    starts in (a shell joins them, then execs the binary, so the binary runs there from its first
    instruction)."""

    def __init__(
        self, binary: Path, workdir: Path, env: dict[str, str] | None = None, cgroups: Sequence[Path] = ()
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"app-{self.port}.log"
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(self.port)}
        environment["LISTEN"] = "127.0.0.1"
        environment.update(env or {})
        self.session = requests.Session()
        self.session.trust_env = False  # loopback only: never through a proxy
        command = [str(binary)]
        if cgroups:
            command = ["sh", "-c", JOIN_AND_EXEC, "sh", str(binary), *map(str, cgroups)]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C on pytest is not its business; stopped by PID
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def wait_serving(self) -> None:
        deadline = time.monotonic() + SERVING_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the app exited with {self.process.returncode}: {self.log_lines()}")
            try:
                if self.session.get(f"{self.base_url}/healthz", timeout=REQUEST_TIMEOUT).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(POLL)
        raise AssertionError(f"the app did not serve within {SERVING_TIMEOUT} s: {self.log_lines()}")

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.session.get(f"{self.base_url}{path}", timeout=REQUEST_TIMEOUT, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.session.post(f"{self.base_url}{path}", timeout=REQUEST_TIMEOUT, **kwargs)

    def cpu_seconds(self) -> float:
        """User plus system CPU time of every thread of the process (/proc/PID/stat)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        return (utime + stime) / CLOCK_TICKS

    def rss_bytes(self) -> int:
        """Resident memory (/proc/PID/statm)."""
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * PAGE_BYTES

    def signal(self, number: signal.Signals) -> None:
        if self.process.poll() is None:
            self.process.send_signal(number)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        return self.process.wait(timeout)

    def stop(self) -> int:
        """SIGTERM by PID, SIGKILL if it lingers; always reaped. Returns the exit code."""
        self.session.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(KILL_TIMEOUT)
        return self.process.returncode
