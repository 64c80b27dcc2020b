"""An idle servo (a SLEEP) waits on events, not on a clock: ``ServoRuntime.idle_wait`` and the
signal watcher's wake pipe, with real processes and real signals."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time

import pytest

from servo_actors.actors.linux import processes
from servo_actors.signals import SignalWatcher

pytestmark = pytest.mark.timeout(60)

HANG = 30.0
"""An idle wait this long would fail the test's timeout: ending early is what is tested."""
SLOW_LIVENESS = {"interval": HANG, "idle_interval": HANG, "timeout": HANG}
"""The watchdog needs no look for HANG seconds: only the event under test can end the wait."""


def idle_wakeups(runtime, seconds: float) -> int:
    """How often an idle runtime (a SLEEP: idle_wait then poll, as the runner does) wakes in ``seconds``."""
    runtime.poll()
    wakeups, began = 0, time.monotonic()
    while time.monotonic() - began < seconds:
        runtime.idle_wait(HANG)
        runtime.poll()
        wakeups += 1
    return wakeups


def readable(fd: int, timeout: float = 0.0) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_a_signal_or_a_stop_from_another_thread_makes_the_wake_pipe_readable() -> None:
    watcher = SignalWatcher().install()
    try:
        fd = watcher.wake_fd
        assert fd is not None and not readable(fd)
        os.kill(os.getpid(), signal.SIGHUP)
        assert readable(fd, 10.0) and watcher.take_reload()
        watcher.drain_wake()
        assert not readable(fd)
        threading.Thread(target=watcher.stop.set).start()
        assert readable(fd, 10.0) and watcher.stop.is_set()
    finally:
        watcher.restore()
    assert watcher.wake_fd is None
    watcher.wake()  # after restore: nothing to write to, no error


@pytest.mark.parametrize("role", ["supervisor", "Thespian admin", "Thespian logger"])
def test_the_death_of_a_watched_process_ends_an_idle_wait_at_once(start_runtime, kit, role) -> None:
    runtime = start_runtime(kit.chaos("a"), liveness=SLOW_LIVENESS)
    runtime.poll()  # the watchdog learns the processes to watch (and sends its first ping)
    runtime.poll()
    pid = runtime.own_processes()[role]
    threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
    began = time.monotonic()
    runtime.idle_wait(HANG)
    assert time.monotonic() - began < HANG / 2  # a pidfd woke it, not the watchdog's clock
    runtime.poll()
    assert runtime.lost is not None and "died" in str(runtime.lost)


def test_an_idle_wait_wakes_on_its_own_only_when_the_watchdog_must_look(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), liveness={"interval": 1.0, "idle_interval": 1.0, "timeout": 5.0})
    wakeups = idle_wakeups(runtime, 3.0)
    # About one a second (a ping each); the 0.25 s slices this replaced would have made 12.
    assert 2 <= wakeups <= 8, wakeups
    assert runtime.lost is None


def test_an_idle_servo_pings_every_idle_interval_and_a_busy_one_every_interval(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), liveness={"interval": 0.5, "idle_interval": 2.5, "timeout": 5.0})
    wakeups = idle_wakeups(runtime, 5.0)
    # Idle: about one wake per 2.5 s (a ping each); at the busy interval it would be ten.
    assert 1 <= wakeups <= 5, wakeups
    assert runtime.lost is None
    # Anything told ends the idle mode: the next pings are half a second apart again.
    assert runtime.status().children
    assert runtime._link.watchdog.current_interval == 0.5


def test_a_signal_ends_an_idle_wait_at_once(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"), liveness=SLOW_LIVENESS)
    runtime.poll()
    runtime.poll()
    watcher = SignalWatcher().install()
    try:
        fd = watcher.wake_fd
        assert fd is not None
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGHUP)).start()
        began = time.monotonic()
        runtime.idle_wait(HANG, (fd,))
        assert time.monotonic() - began < HANG / 2 and watcher.take_reload()
    finally:
        watcher.restore()


def test_a_pidfd_wait_ends_when_the_process_ends() -> None:
    child = subprocess.Popen(["sleep", str(HANG)])
    try:
        threading.Timer(0.3, child.kill).start()
        began = time.monotonic()
        assert processes.wait_for_exit_or([child.pid], [], HANG)  # this kernel has pidfds
        assert time.monotonic() - began < HANG / 2
    finally:
        child.kill()
        child.wait()
    assert processes.wait_for_exit_or([child.pid], [], HANG)  # already gone: at once
