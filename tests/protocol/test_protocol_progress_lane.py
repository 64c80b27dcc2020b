"""ProgressLane: one progress post in flight at most, no backlog, every reply read, the first
answer other than ``ok`` ends the operation.

Deterministic: the lane's worker is injected, so a test decides when each post "reaches the
optimizer" and what it answers; no thread, no sleep. One test runs the real daemon worker, with an
event in place of a slow optimizer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servo_actors.protocol.commands import OptimizerStatus
from servo_actors.protocol.progress_lane import ProgressLane, in_background

WORKER_TIMEOUT = 10.0
"""Generous bound on a worker thread answering once released: only a hang breaks it."""


def status(name: str, reason: str | None = None) -> OptimizerStatus:
    return OptimizerStatus(status=name, reason=reason)


@dataclass
class FakeOptimizer:
    """Answers progress posts in the order the test says; its posts run only when the test says."""

    answers: list[OptimizerStatus | None | Exception] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    pending: list[Callable[[], None]] = field(default_factory=list)

    def post(self, param: dict[str, Any]) -> OptimizerStatus | None:
        self.received.append(param)
        answer = self.answers.pop(0) if self.answers else status("ok")
        if isinstance(answer, Exception):
            raise answer
        return answer

    def spawn(self, work: Callable[[], None]) -> None:
        self.pending.append(work)

    def deliver(self) -> None:
        """The open post reaches the optimizer and its answer comes back."""
        self.pending.pop(0)()

    def lane(self) -> ProgressLane:
        return ProgressLane(self.post, spawn=self.spawn)


def test_one_post_in_flight_and_a_due_heartbeat_is_skipped_not_queued() -> None:
    optimizer = FakeOptimizer()
    lane = optimizer.lane()
    first = lane.offer({"progress": 10})
    assert first is not None and lane.busy and lane.open_post is first
    assert lane.offer({"progress": 20}) is None
    assert lane.offer({"progress": 30}) is None
    assert (lane.posted, lane.skipped, len(optimizer.pending)) == (1, 2, 1)
    optimizer.deliver()
    assert first.result(0).status == "ok"
    # Nothing was queued behind it: the skipped heartbeats never go out.
    assert not lane.busy and optimizer.pending == [] and optimizer.received == [{"progress": 10}]
    second = lane.offer({"progress": 40})
    assert second is not None and second is not first
    optimizer.deliver()
    assert [p["progress"] for p in optimizer.received] == [10, 40]
    assert lane.verdict() is None


@pytest.mark.parametrize(
    "answer",
    [status("cancel", "user-abort"), status("unexpected-event"), status("invalid", "unexpected cmd_uid")],
    ids=["cancel", "unexpected-event", "invalid"],
)
def test_an_answer_other_than_ok_is_the_verdict_and_ends_the_lane(answer: OptimizerStatus) -> None:
    optimizer = FakeOptimizer(answers=[status("ok"), answer])
    lane = optimizer.lane()
    lane.offer({"progress": 1})
    optimizer.deliver()
    assert lane.verdict() is None
    lane.offer({"progress": 2})
    assert lane.verdict() is None  # not answered yet
    optimizer.deliver()
    assert lane.verdict() == answer
    # The operation is over: nothing more is posted for it.
    assert lane.offer({"progress": 3}) is None
    assert optimizer.pending == [] and len(optimizer.received) == 2


def test_the_reply_to_the_open_post_is_read_when_it_comes_however_late() -> None:
    # The operation finishes while its last progress post is open; the caller waits for that post
    # (open_post) before the result goes out, and its `cancel` is the command's outcome.
    optimizer = FakeOptimizer(answers=[status("cancel", "abort")])
    lane = optimizer.lane()
    lane.offer({"progress": 99})
    post = lane.open_post
    assert post is not None and not post.done() and lane.verdict() is None
    optimizer.deliver()
    assert post.done() and lane.open_post is None
    assert lane.verdict() == status("cancel", "abort")


def test_an_undelivered_post_or_a_failing_one_is_no_verdict_and_the_next_one_goes_out() -> None:
    optimizer = FakeOptimizer(answers=[None, RuntimeError("the client broke"), status("ok")])
    lane = optimizer.lane()
    for percent in (1, 2, 3):
        assert lane.offer({"progress": percent}) is not None
        optimizer.deliver()
        assert lane.verdict() is None and not lane.busy
    assert lane.posted == 3


def test_a_worker_that_answers_at_once_is_read_at_once() -> None:
    lane = ProgressLane(lambda param: status("cancel"), spawn=lambda work: work())
    post = lane.offer({"progress": 5})
    assert post is not None and post.done()
    assert not lane.busy and lane.verdict() == status("cancel")


@pytest.mark.timeout(30)
def test_the_real_worker_posts_off_the_callers_thread() -> None:
    released = threading.Event()
    threads: list[str] = []

    def slow_post(param: dict[str, Any]) -> OptimizerStatus:
        threads.append(threading.current_thread().name)
        assert released.wait(WORKER_TIMEOUT)
        return status("cancel")

    lane = ProgressLane(slow_post)
    post = lane.offer({"progress": 50})
    # offer returned while the optimizer has not answered: the operation goes on meanwhile.
    assert post is not None and lane.busy and lane.offer({"progress": 60}) is None
    released.set()
    assert post.result(WORKER_TIMEOUT) == status("cancel")
    assert lane.verdict() == status("cancel")
    assert threads == ["optimizer-progress"]


def test_in_background_hands_back_the_exception() -> None:
    future = in_background(lambda: 1 / 0, spawn=lambda work: work())
    with pytest.raises(ZeroDivisionError):
        future.result(0)


answers = st.sampled_from([None, "ok", "cancel", "unexpected-event", "invalid"])
steps = st.lists(st.one_of(st.just("offer"), answers.map(lambda a: ("deliver", a))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_any_interleaving_keeps_one_post_in_flight_and_the_first_refusal(script: list[Any]) -> None:
    """Offers (the progress schedule) and deliveries (the optimizer answering) in any order."""
    optimizer = FakeOptimizer()
    lane = optimizer.lane()
    expected_verdict: OptimizerStatus | None = None
    for step in script:
        if step == "offer":
            was_busy, ended = lane.busy, lane.verdict() is not None
            post = lane.offer({"progress": len(optimizer.received)})
            assert (post is None) == (was_busy or ended)
        elif optimizer.pending:
            answer = None if step[1] is None else status(step[1])
            optimizer.answers.append(answer)
            optimizer.deliver()
            if expected_verdict is None and answer is not None and answer.status != "ok":
                expected_verdict = answer
        assert len(optimizer.pending) <= 1  # never two posts in flight
        assert lane.busy == bool(optimizer.pending)
        assert lane.verdict() == expected_verdict
    assert lane.posted == len(optimizer.received) + len(optimizer.pending)
