"""The one way signals are taken (signals.py): the handler records, never raises, never waits on itself.

Each case runs in a process of its own: signal handlers and the process's watcher are global.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "servo_actors"
CASE_TIMEOUT = 30.0
"""Generous: each case takes well under a second; a deadlock breaks it."""

pytestmark = pytest.mark.timeout(60)


def _default_dispositions() -> None:
    # As a terminal starts a program: a suite started in the background by a shell without job
    # control inherits SIGINT (and SIGQUIT) ignored, and give_back_process rightly gives that back.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def run_case(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=CASE_TIMEOUT,
        preexec_fn=_default_dispositions,
    )


def test_a_signal_while_the_main_thread_holds_the_stop_events_lock_is_recorded_not_a_deadlock() -> None:
    # The handler runs on the main thread between two bytecodes: possibly while that thread is
    # inside the stop event's set() or wait(), holding its lock (the demo sets it on SLEEP, the
    # runner when a request is abandoned). A plain lock there made the handler wait for itself.
    done = run_case(
        """
        import os, signal
        from servo_actors.signals import SignalWatcher
        watcher = SignalWatcher().install()
        with watcher.stop._cond:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass  # the handler runs in here
        print(watcher.stop.is_set(), watcher.stop_signal, watcher.stop_signum)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "SIGTERM", "15"]


def test_an_inner_user_neither_loses_a_signal_nor_hands_the_signals_back_early() -> None:
    done = run_case(
        """
        import os, signal
        from servo_actors import signals
        outer = signals.take_over_process()
        os.kill(os.getpid(), signal.SIGINT)            # during start-up: recorded
        with signals.watching(reload=True) as inner:   # the command (run takes SIGHUP too)
            assert inner is outer and inner.stop.is_set()
            os.kill(os.getpid(), signal.SIGHUP)
            assert inner.take_reload()
            assert inner.sleep(5.0) is True            # stopped already: no wait
        # The block is over, the process watcher still holds SIGINT/SIGTERM, SIGHUP is given back.
        print(signal.getsignal(signal.SIGINT) == outer._handle, signal.getsignal(signal.SIGHUP) is signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)           # still only recorded
        print(outer.stop_signal)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "SIGINT"]


def test_a_command_that_does_not_watch_gets_the_default_back_with_what_came_meanwhile() -> None:
    done = run_case(
        """
        import os, signal
        from servo_actors import signals
        signals.take_over_process()
        os.kill(os.getpid(), signal.SIGINT)
        try:
            signals.give_back_process()
        except KeyboardInterrupt:
            print("KeyboardInterrupt", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["KeyboardInterrupt", "True"]


def test_a_wait_ends_at_once_on_a_signal_and_a_reload_wake_never_makes_it_spin() -> None:
    done = run_case(
        """
        import os, signal, threading, time
        from servo_actors.signals import SignalWatcher
        watcher = SignalWatcher().install()
        os.kill(os.getpid(), signal.SIGHUP)       # a byte in the wake pipe that is not a stop
        began = time.monotonic()
        print(watcher.sleep(0.3), time.monotonic() - began >= 0.25)
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        began = time.monotonic()
        print(watcher.sleep(20.0), time.monotonic() - began < 10.0)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True", "True"]


def test_signal_handlers_are_installed_in_one_place() -> None:
    # signals.py is the one installer; a connector's host only resets fatal signals to SIG_DFL.
    found = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for line in path.read_text().splitlines()
        if re.search(r"\bsignal\.signal\(", line.split("#", 1)[0])
    }
    assert found == {"signals.py", "actors/host/actor.py"}, found
    host = (PACKAGE / "actors" / "host" / "actor.py").read_text()
    assert re.findall(r"signal\.signal\([^)]*\)", host) == ["signal.signal(number, signal.SIG_DFL)"]
