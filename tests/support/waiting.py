"""Polling with a bound, for tests that wait on real processes and servers."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.02, what: str = "condition"
) -> Any:
    """Poll ``predicate`` until it is truthy (returned) or ``timeout`` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM ``proc`` (a process the test started) and wait; SIGKILL it if it outlives ``timeout``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)
