"""One application's link to the actor system a servo of several applications shares (issue 36):
its supervisor is watched from its creation, before it has answered anything, so one that dies
while it starts is lost (and its subtree killed) at once, while the shared system goes on."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from servo_actors.actors.linux import processes
from servo_actors.actors.runtime.system_link import SystemLink, actor_pid
from servo_actors.actors.supervisor.actor import Supervisor
from servo_actors.actors.transport.system import ActorSystemHandle

pytestmark = pytest.mark.timeout(60)

LOSS_BOUND = 10.0
"""Generous bound on noticing a dead supervisor (the link looks every fraction of a second)."""


def test_a_supervisor_is_watched_from_its_creation_before_it_first_answers(tmp_path: Path) -> None:
    owner = ActorSystemHandle(tmp_path)
    owner.start()
    lost: list[str] = []
    link = SystemLink(0.2, 1.0, handle=lambda message: False, on_lost=lost.append, subtree_only=True)
    try:
        link.connect(ActorSystemHandle.joining(owner), Supervisor)  # nothing told: it never answers
        supervisor = actor_pid(owner, link.supervisor)
        assert supervisor is not None and supervisor in owner.members()
        link.poll()
        assert link.own_processes()["supervisor"] == supervisor
        admin = processes.proc_stat(supervisor).ppid
        os.kill(supervisor, signal.SIGKILL)
        deadline = time.monotonic() + LOSS_BOUND
        while link.lost is None and time.monotonic() < deadline:
            link.poll()
            time.sleep(0.05)
        assert link.lost is not None and lost and f"pid {supervisor}" in lost[0], lost
        assert not processes.is_running(supervisor)
        assert processes.is_running(admin), "the shared system goes on"
    finally:
        link.kill()
        survivors = owner.kill()
    assert survivors == []
