"""The sandbox image's process (kube/images/pause): exits 0 on SIGTERM and SIGINT, and as PID 1
of a PID namespace reaps the orphans re-parented to it."""

from __future__ import annotations

import errno
import os
import select
import shutil
import signal
import subprocess
from pathlib import Path
from typing import IO

import pytest
from waiting import wait_until

pytestmark = pytest.mark.timeout(600)  # the session's first build of the images may download modules

EXIT_TIMEOUT = 10.0
STARTED_TIMEOUT = 10.0
ORPHAN_TIMEOUT = 10.0
"""Seconds for the orphan to reach pause, to open its FIFO, and once released to be reaped."""


def threads_children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a zombie stays listed until it is reaped)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


def wait_running(stderr: IO[bytes] | None) -> None:
    """Until pause's first line: it comes once its signal handlers are installed (Go's runtime
    catches every signal from the start, so /proc's SigCgt cannot tell when they are pause's)."""
    assert stderr is not None
    ready, _, _ = select.select([stderr], [], [], STARTED_TIMEOUT)
    assert ready, f"pause said nothing within {STARTED_TIMEOUT} s"
    line = stderr.readline()
    assert line.startswith(b"pause: running"), line


def open_for_writing(fifo: Path) -> int | None:
    """A write end of ``fifo`` once a reader has it open, else None."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return None
        raise


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_pause_exits_0_on_a_stop_signal(pause_binary: Path, number: signal.Signals) -> None:
    process = subprocess.Popen([str(pause_binary)], stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_running(process.stderr)
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
def test_pause_as_pid_1_reaps_orphans(pause_binary: Path, tmp_path: Path) -> None:
    # unshare forks pause as PID 1 of a new PID namespace and exits with its status; --kill-child
    # takes pause down with unshare if the test dies.
    namespace = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", str(pause_binary)],
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_running(namespace.stderr)
        [pause] = threads_children(namespace.pid)
        # A shell in the namespace starts a `cat` of a FIFO and exits: the cat, orphaned, is
        # re-parented to PID 1, and it lives until the FIFO gets a writer (us).
        fifo = tmp_path / "release"
        os.mkfifo(fifo)
        subprocess.run(
            ["nsenter", "--target", str(pause), "--pid", "--", "sh", "-c", f"cat {fifo} >/dev/null & exit 0"],
            check=True,
            timeout=EXIT_TIMEOUT,
        )
        [orphan] = wait_until(lambda: threads_children(pause), ORPHAN_TIMEOUT, what="the orphan re-parented")
        writer = wait_until(lambda: open_for_writing(fifo), ORPHAN_TIMEOUT, what="the orphan reading")
        os.close(writer)  # the cat reads end-of-file and exits
        wait_until(lambda: not threads_children(pause), ORPHAN_TIMEOUT, what="the orphan reaped")
        assert not Path(f"/proc/{orphan}").exists(), "no zombie left"
        os.kill(pause, signal.SIGTERM)
        assert namespace.wait(EXIT_TIMEOUT) == 0
    finally:
        if namespace.poll() is None:
            namespace.kill()
            namespace.wait(EXIT_TIMEOUT)
