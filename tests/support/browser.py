"""A headless Chromium driven over the DevTools protocol on a pipe (no WebSocket library needed).

``--remote-debugging-pipe`` makes Chromium read commands from fd 3 and write answers to fd 4, each
message a JSON text ended by a NUL byte. A small ``sh`` wrapper maps our stdin/stdout pipes onto
those descriptors. Only the handful of calls the console test needs are here.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

CALL_TIMEOUT = 10.0  # seconds for one DevTools call
CLOSE_TIMEOUT = 5.0  # seconds for Chromium to exit after Browser.close, before it is killed
POLL_INTERVAL = 0.1  # seconds between two looks at the page in wait_for


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, binary: str, profile: Path) -> None:
        args = [
            binary,
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",  # the tests may run as root, where the sandbox refuses to start
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-breakpad",
            "--disable-crash-reporter",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        self.process = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null', *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the renderers go with it on a kill
        )
        self._ids = 0
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session: str | None = None

    def _read(self) -> None:
        buffer = b""
        assert self.process.stdout is not None
        while chunk := self.process.stdout.read1(65536):
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                data = json.loads(message)
                if "id" in data:
                    self._answers.put(data)

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        self._ids += 1
        message: dict[str, Any] = {"id": self._ids, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\0")
        self.process.stdin.flush()
        deadline = time.monotonic() + CALL_TIMEOUT
        while True:
            answer = self._answers.get(timeout=max(0.0, deadline - time.monotonic()))
            if answer["id"] == self._ids:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=self.session
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> Any:
        """The first truthy value of ``expression``; AssertionError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        # The page may still be loading (no such element yet): that counts as false, not an error.
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (error) {{ return false; }} }})()"
        while True:
            value = self.evaluate(guarded)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"still false after {timeout}s: {expression}")
            time.sleep(POLL_INTERVAL)

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) in the middle of the element."""
        x, y = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
                session=self.session,
            )

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass  # it may be gone already; the kill below makes sure
        try:
            self.process.wait(CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(CLOSE_TIMEOUT)
        try:
            # Helpers (zygote, renderers) that outlive the browser process: they are in its group.
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def require_chromium() -> str:
    """The Chromium binary; the browser tests skip only when SERVO_TEST_BROWSER=0 says so, else a
    missing browser fails them (scripts/test installs Debian's chromium)."""
    binary = chromium_binary()
    if binary is None:
        import pytest

        if os.environ.get("SERVO_TEST_BROWSER", "1") == "0":
            pytest.skip("SERVO_TEST_BROWSER=0: browser tests are off")
        pytest.fail("Chromium is missing: install Debian's chromium (scripts/test does)")
    return binary
