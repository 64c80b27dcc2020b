"""An answer that arrives while the runtime waits for something else is kept until asked for.

Thespian does not keep the order of messages, so the supervisor's ``Cancelled`` can come in while
the runtime waits for the cancelled operation's ``Done`` (under load it did, and the servo then
waited 32 s for an answer it had thrown away, and exited). Here the runtime is made to wait for
something else (status requests) while the ``Cancelled`` arrives, deterministically.
"""

from __future__ import annotations

import time

import pytest

from servo_actors.connectors.base import Control

SETTLE_TIMEOUT = 20.0
"""Generous bound on the fresh connectors answering after a cancel: only a hang breaks it."""


@pytest.mark.timeout(60)
def test_a_cancelled_that_arrives_during_another_wait_is_not_lost(start_runtime, kit) -> None:
    runtime = start_runtime(
        kit.chaos("hung", faults={"measure": {"action": "socket_read"}}),
        kit.chaos("fine"),
        kit.chaos("third"),
    )
    before = kit.pids(runtime)
    op = runtime.begin("measure", control=Control(duration=1))
    assert runtime.wait(op, 0.3) is None
    request = runtime.begin_cancel()
    # Wait for something else until the fresh connectors are up: the Cancelled comes in meanwhile.
    kit.wait_for(
        lambda: all(c.state == "ready" and c.pid != before[c.name] for c in runtime.status().children),
        timeout=SETTLE_TIMEOUT,
    )
    assert runtime.wait_cancel(request, 0.5), "the Cancelled that arrived early was dropped"
    assert op.result is not None and op.result.status == "cancelled"
    assert runtime.run("describe").ok


@pytest.mark.timeout(60)
def test_a_liveness_answer_waiting_after_a_long_gap_is_counted_before_the_check(start_runtime, kit) -> None:
    # The servo's main thread may be away longer than the liveness timeout (a long request, a
    # pause): the supervisor's answer to the ping is then waiting, and must count as answered.
    runtime = start_runtime(kit.chaos("fine"), liveness={"interval": 0.1, "timeout": 0.5})
    runtime.poll()  # the first ping goes out
    time.sleep(1.0)  # nobody listens meanwhile; the answer waits in the socket
    assert runtime.status().children[0].state == "ready"
    assert runtime.lost is None
    assert runtime.run("describe").ok
