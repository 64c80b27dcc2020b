"""``AppRestarts`` (runner/app_restarts.py) carries out the tree's rules for the applications' loops,
each on its own thread, on a fake clock: one application waiting out its backoff never holds
another's restart, a stop ends the wait, and past its intensity an application's loop is told to
give up (issue 36). The tree's actor system is never started here: no process is involved."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from servo_actors.actors.rules.tree import AppPolicy, AppState
from servo_actors.actors.runtime.servo_tree import ServoTree
from servo_actors.errors import SupervisorError
from servo_actors.runner.app_restarts import AppRestarts

pytestmark = pytest.mark.timeout(60)

WEB, DB = "acme.com/web", "acme.com/db"
POLICY = AppPolicy(max_restarts=2, period=60.0, backoff_min=5.0, backoff_max=20.0, jitter=0.0)
HANG = 10.0
"""Generous bound on a wait that must end (a thread joined, an event set): only a hang breaks it."""


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def restarts(tmp_path: Path) -> tuple[AppRestarts, FakeClock]:
    clock = FakeClock()
    shell = AppRestarts(
        ServoTree(run_dir=tmp_path),
        {WEB: POLICY, DB: POLICY},
        root_max_restarts=1,
        root_period=60.0,
        clock=clock,
    )
    assert shell.start() == [WEB, DB]
    shell.up(WEB)
    shell.up(DB)
    return shell, clock


def waiting(shell: AppRestarts, app: str, stop: threading.Event) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(shell.lost(app, "died", stop))
        except SupervisorError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + HANG
    while shell.state(app) is not AppState.RESTARTING and not outcome and time.monotonic() < deadline:
        time.sleep(0.01)  # its loss recorded at the fake clock's present time
    return thread, outcome


def test_one_applications_backoff_never_holds_anothers_restart(tmp_path: Path) -> None:
    shell, clock = restarts(tmp_path)
    stop = threading.Event()
    assert shell.lost(WEB, "died", stop) is True  # the first loss of a streak: at once
    shell.up(WEB)
    thread, outcome = waiting(shell, WEB, stop)  # the second: 5 s of backoff (fake)
    assert shell.state(WEB) is AppState.RESTARTING and outcome == []
    assert shell.lost(DB, "died", stop) is True  # the other restarts at once meanwhile
    clock.now += 4.9
    thread.join(0.5)
    assert thread.is_alive(), "restarted before its backoff was over"
    clock.now += 0.1
    thread.join(HANG)
    assert outcome == [True]


def test_a_stop_ends_the_wait_of_a_backoff(tmp_path: Path) -> None:
    shell, _clock = restarts(tmp_path)
    stop = threading.Event()
    shell.lost(WEB, "died", stop)
    thread, outcome = waiting(shell, WEB, stop)
    stop.set()
    thread.join(HANG)
    assert outcome == [False]


def test_past_its_intensity_an_applications_loop_is_told_to_give_up_alone(tmp_path: Path) -> None:
    shell, clock = restarts(tmp_path)
    stop = threading.Event()
    assert shell.lost(WEB, "died", stop) is True  # 1 of 2 restarts within 60 s
    thread, outcome = waiting(shell, WEB, stop)  # 2 of 2, after its backoff
    clock.now += 20.0
    thread.join(HANG)
    assert outcome == [True]
    with pytest.raises(SupervisorError, match=r"acme.com/web: died; more than 2 restarts within 60s"):
        shell.lost(WEB, "died", stop)
    assert shell.lost(DB, "died", stop) is True
