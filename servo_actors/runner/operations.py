"""One command of the optimizer performed through the operation path, and its result posted.

Progress posts go out on the way (``_ProgressPosts``, on a ``ProgressLane``: one in flight, every
reply read); the optimizer's answer to one of them cancels the operation, and the result goes out
only after the open post is answered, so a ``cancel`` there wins (the command gets exactly one
result, ``cancelled``). Apart from the loop, which only says which operation a command is.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from servo_actors.actors import Operation
from servo_actors.actors.operation_path import WAIT_SLICE, InFlight, OperationPath, Reporter
from servo_actors.actors.system_link import LOST_REASON, SupervisorLost
from servo_actors.connectors import Control
from servo_actors.progress import ProgressSchedule
from servo_actors.protocol.commands import Command, OptimizerStatus
from servo_actors.protocol.progress_lane import ProgressLane
from servo_actors.protocol.writing import failure_result, progress_param
from servo_actors.runner.params import cancel_reason, result_param
from servo_actors.runner.recovery import Recovery
from servo_actors.runner.state import RunnerState
from servo_actors.signals import StopRequested
from servo_actors.vocabulary import OPERATION_EVENT

__all__ = ["REPLY_CHECK_FIRST", "Operations"]

log = logging.getLogger(__name__)

REPLY_CHECK_FIRST = 0.002
"""While a progress post is open, the loop looks for its reply after this long, then twice as long
each time up to ``WAIT_SLICE``: a ``cancel`` from a prompt optimizer is acted on within a few ms,
and a slow one costs a handful of wakeups (the operation's wait cannot be woken by the reply)."""

_RESULT_EVENTS = OPERATION_EVENT


class Operations:
    """The runner's operations: a command performed, its progress posted, its result posted."""

    def __init__(self, state: RunnerState, recovery: Recovery) -> None:
        self._state = state
        self._recovery = recovery

    def path(self) -> OperationPath[Operation]:
        """The operation path on the current runtime (a SIGHUP reload replaces the runtime)."""
        state = self._state
        assert state.runtime is not None
        return OperationPath(state.runtime, stop=state.signals.stop, stop_name=state.stop_name)

    def operate(
        self, command: Command, operation: str, params: dict[str, Any], *, progress: bool = True
    ) -> None:
        """``command`` as ``operation`` through the operation path, its result (or its cancellation)
        posted: progress posts go out on the way (``_ProgressPosts``), and the optimizer's answer
        to one of them cancels the operation (``OperationPath.cancel``)."""
        state = self._state
        assert state.client is not None and state.runtime is not None
        event = _RESULT_EVENTS[operation]
        control: Control | None = params.get("control")
        expected = control.expected_seconds if control else 0.0
        client = state.client
        reporter: Reporter | None = None
        if progress:
            lane = ProgressLane(lambda param: client.post_progress(event, param))
            schedule = ProgressSchedule(time.monotonic(), expected, state.config.settings.progress_interval)
            reporter = _ProgressPosts(self, command, event, lane, schedule)
        # A system lost since the last look (while the optimizer answered WHATS_NEXT) is replaced
        # first: a command that arrives after the loss runs on fresh connectors, it does not fail.
        self._recovery.heal()
        try:
            outcome = self.path().perform(operation, reporter=reporter, **params)
        except SupervisorLost as exc:
            # Lost in the instant since that look: this command fails; the loop heals next.
            self.post_result(
                event,
                failure_result(event, command.cmd_uid, status="failed", reason=LOST_REASON, message=str(exc)),
            )
            return
        result = outcome.result
        if outcome.cancelled_by is not None or result is None:
            return  # the cancellation was reported (``_ProgressPosts.cancelled``); fresh connectors answer
        described = None
        if operation == "describe" and result.ok:
            state.described_metrics = dict(result.data.get("metrics") or {})
        elif operation == "adjust" and result.ok:
            described = self.measurement_metrics()
        reply = self.post_result(
            event, result_param(event, command, result, params.get("metrics"), described)
        )
        if reply is not None and reply.status == "cancel":
            # Abort pressed as the result went out: the command counts as cancelled; start fresh.
            self.path().cancel()
        state.notify(
            "result",
            {
                "cmd": command.cmd,
                "cmd_uid": command.cmd_uid,
                "operation": operation,
                "status": result.status,
                "reason": result.reason,
                "data": result.data,
            },
        )

    def measurement_metrics(self) -> dict[str, Any]:
        """The metrics the connectors describe (an ADJUSTMENT's ``state.measurement``): from the
        last DESCRIBE, else from a describe now (once; its failure leaves the metrics empty)."""
        state = self._state
        if state.described_metrics is None:
            try:
                result = self.path().result("describe")
            except SupervisorLost:
                return {}
            if not result.ok:
                log.warning("no metrics for the ADJUSTMENT's state: describe failed (%s)", result.message)
                return {}
            state.described_metrics = dict(result.data.get("metrics") or {})
        return state.described_metrics

    def cancelled(self, command: Command, event: str, reply: OptimizerStatus) -> None:
        """The optimizer's answer to a progress post cancelled the operation and its kills are
        confirmed: tell the observer, and post ``cancelled`` if the answer was a cancel."""
        self._state.notify(
            "cancelled", {"cmd": command.cmd, "cmd_uid": command.cmd_uid, "status": reply.status}
        )
        if reply.status == "cancel":
            reason, message = cancel_reason(reply)
            self.post_result(
                event,
                failure_result(event, command.cmd_uid, status="cancelled", reason=reason, message=message),
            )
        # unexpected-event / invalid: the servo and optimizer lost sync; no result is owed.
        # Either way the next command is taken only by fresh connectors (the path waits for them).

    def settle(self, lane: ProgressLane) -> OptimizerStatus | None:
        """Before a result goes out, the progress post still open is answered (within the client's
        ``timeouts.connect + timeouts.read``): a ``cancel`` in that answer is the command's outcome."""
        post = lane.open_post
        if post is not None:
            self._recovery.wait_ticking(post, heal=False)
        if self._state.signals.stop.is_set():
            raise StopRequested(self._state.stop_name())
        return lane.verdict()

    def post_result(self, event: str, param: dict[str, Any]) -> OptimizerStatus | None:
        client = self._state.client
        assert client is not None
        return self._recovery.await_optimizer(lambda: client.post_result(event, param), heal=False)


class _ProgressPosts(Reporter):
    """The runner's part of the operation path: progress posts to the optimizer on the schedule of
    ``ProgressSchedule``, through a ``ProgressLane`` (one post in flight, every reply read), whose
    replies are the verdicts that cancel the operation."""

    def __init__(
        self,
        operations: Operations,
        command: Command,
        event: str,
        lane: ProgressLane,
        schedule: ProgressSchedule,
    ) -> None:
        self._operations, self._command, self._event = operations, command, event
        self._lane, self._schedule = lane, schedule
        self._reply_check = REPLY_CHECK_FIRST

    def next_wait(self, op: InFlight, now: float) -> float:
        if self._lane.busy:
            wait, self._reply_check = self._reply_check, min(2 * self._reply_check, WAIT_SLICE)
            return wait
        return min(WAIT_SLICE, max(0.0, self._schedule.next_due - now))

    def verdict(self) -> OptimizerStatus | None:
        return self._lane.verdict()

    def report(self, op: InFlight, now: float) -> None:
        if self._schedule.due(now) and not self._lane.busy:
            # One post in flight at most: a heartbeat due meanwhile goes out once it is answered.
            self._lane.offer(
                progress_param(
                    self._command.cmd_uid,
                    progress=self._schedule.percent(now, op.progress),
                    runtime=self._schedule.runtime(now),
                    message=op.message or None,
                )
            )
            self._schedule.sent(now)
            self._reply_check = REPLY_CHECK_FIRST

    def settle(self) -> OptimizerStatus | None:
        return self._operations.settle(self._lane)

    def cancelled(self, op: InFlight, verdict: OptimizerStatus) -> None:
        self._operations.cancelled(self._command, self._event, verdict)
