"""The sandbox image's process (kube/images/pause): exits 0 on SIGTERM and SIGINT, and as PID 1
of a PID namespace reaps the orphans re-parented to it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from waiting import wait_until

pytestmark = pytest.mark.timeout(600)  # the session's first build of the images may download modules

EXIT_TIMEOUT = 10.0
STARTED_TIMEOUT = 10.0
ORPHAN_TIMEOUT = 10.0
"""Seconds for the orphan to reach pause, and then to exit (it sleeps ORPHAN_SLEEP) and be reaped."""
ORPHAN_SLEEP = "1"


def threads_children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a zombie stays listed until it is reaped)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


def signal_handlers_installed(pid: int, number: signal.Signals) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (number - 1)))
    return False


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_pause_exits_0_on_a_stop_signal(pause_binary: Path, number: signal.Signals) -> None:
    process = subprocess.Popen([str(pause_binary)], stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_until(
            lambda: signal_handlers_installed(process.pid, number), STARTED_TIMEOUT, what="pause ready"
        )
        process.send_signal(number)
        assert process.wait(EXIT_TIMEOUT) == 0
        assert process.stderr is not None and b"exiting" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(EXIT_TIMEOUT)


@pytest.mark.root
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"),
    reason="needs root, unshare and nsenter (a PID namespace)",
)
def test_pause_as_pid_1_reaps_orphans(pause_binary: Path) -> None:
    # unshare forks pause as PID 1 of a new PID namespace and exits with its status; --kill-child
    # takes pause down with unshare if the test dies.
    namespace = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", str(pause_binary)], start_new_session=True
    )
    try:
        [pause] = wait_until(
            lambda: threads_children(namespace.pid), STARTED_TIMEOUT, what="pause started by unshare"
        )
        wait_until(
            lambda: signal_handlers_installed(pause, signal.SIGCHLD), STARTED_TIMEOUT, what="pause ready"
        )
        # A shell in the namespace starts a sleep and exits: the sleep is re-parented to PID 1.
        subprocess.run(
            ["nsenter", "--target", str(pause), "--pid", "--", "sh", "-c", f"sleep {ORPHAN_SLEEP} & exit 0"],
            check=True,
            timeout=EXIT_TIMEOUT,
        )
        [orphan] = wait_until(lambda: threads_children(pause), ORPHAN_TIMEOUT, what="the orphan re-parented")
        wait_until(lambda: not threads_children(pause), ORPHAN_TIMEOUT, what="the orphan reaped")
        assert not Path(f"/proc/{orphan}").exists(), "no zombie left"
        os.kill(pause, signal.SIGTERM)
        assert namespace.wait(EXIT_TIMEOUT) == 0
    finally:
        if namespace.poll() is None:
            namespace.kill()
            namespace.wait(EXIT_TIMEOUT)
