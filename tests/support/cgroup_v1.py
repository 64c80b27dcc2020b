"""A cgroup (v1) of one controller for a test: made under the controller's root, removed after.

::

    with CgroupV1.made("cpu") as cpu:
        cpu.write("cpu.cfs_quota_us", "10000")
        ...                                   # start a process in cpu.path
        cpu.stat()                            # cpu.stat (or memory.stat) as a dict

``available(controller)`` says why it cannot be used here (no root, no such hierarchy), or None.
Removing waits until the processes in it are gone (the test stops them first).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

HIERARCHIES = Path("/sys/fs/cgroup")
EMPTY_TIMEOUT = 10.0
"""Seconds for the cgroup's last process to leave it (a reaped process leaves at once)."""
POLL = 0.05


def available(controller: str) -> str | None:
    """Why a cgroup v1 of ``controller`` cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (cgroups)"
    if not (HIERARCHIES / controller / "cgroup.procs").is_file():
        return f"no cgroup v1 hierarchy of {controller} at {HIERARCHIES / controller}"
    return None


class CgroupV1:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    @contextlib.contextmanager
    def made(cls, controller: str) -> Iterator[CgroupV1]:
        path = HIERARCHIES / controller / f"servo-actors-test-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        try:
            yield cls(path)
        finally:
            deadline = time.monotonic() + EMPTY_TIMEOUT
            while (path / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
                time.sleep(POLL)
            path.rmdir()

    def write(self, name: str, value: str) -> None:
        (self.path / name).write_text(value)

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    def stat(self, name: str) -> dict[str, int]:
        """A flat-keyed file (cpu.stat, memory.oom_control) as a dict of integers."""
        found = {}
        for line in self.read(name).splitlines():
            key, _, value = line.partition(" ")
            found[key] = int(value)
        return found
