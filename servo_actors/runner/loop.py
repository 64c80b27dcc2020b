"""The control loop: HELLO, then WHATS_NEXT and the command it brings, until a signal ends the run.

::

    runner = Runner(config, config_path="servo.yaml")
    exit_code = runner.run()      # blocks until SIGTERM/SIGINT (0) or a terminal failure (1)

The loop itself is small; the pieces it leans on live elsewhere: ``OptimizerClient`` (HTTP and
retries), ``ServoRuntime`` (the supervised connectors) and ``OperationPath`` (the one way an
operation is performed and cancelled on them), ``ProgressSchedule`` (when to post
progress, what percentage), ``ProgressLane`` (progress posts off the loop, one in flight, every
reply read), ``SignalWatcher`` (SIGTERM/SIGINT/SIGHUP) and ``results`` below (an operation's result
as a wire event).

Every request to the optimizer runs on a worker while the loop ticks the watchdog every
``TICK_INTERVAL`` (``runtime.poll``): a supervisor that dies while the optimizer is slow to answer
WHATS_NEXT (or HELLO) is noticed and microrebooted within the watchdog's bound, not once the request
returns. Progress replies are never dropped: an operation's result goes out only after its open
progress post is answered, so a ``cancel`` answered to that post wins and the command gets exactly
one result (``cancelled``).

Cancellation is crash-only: whatever the optimizer answers that ends a running operation
(``cancel``, ``unexpected-event``, ``invalid``) makes the supervisor kill every connector and start
fresh ones; the loop never waits on a connector to tidy up.

Recovery of the servo's own processes is crash-only too: when the runtime finds its actor system
lost (the supervisor, Thespian's admin or logger dead, stopped or not answering), it kills all of
it; the command in flight is answered ``failed`` (reason ``supervisor-lost``) and the loop starts a
fresh actor system (a microreboot) before it polls again, also in the middle of a SLEEP. More than
``supervisor.microreboots.max`` of them within ``period`` end the run (GOODBYE ``failure``, exit 1).
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_future
from typing import Any, TypeVar

from servo_actors import USER_AGENT, __version__, observability
from servo_actors.actors import Operation, OperationResult, ServoRuntime
from servo_actors.actors.operation_path import WAIT_SLICE, InFlight, OperationPath, Reporter
from servo_actors.actors.rules.restart_policy import RestartIntensity
from servo_actors.actors.rules.results import NOT_UP_REASONS
from servo_actors.actors.runtime import LOST_REASON, SupervisorLost
from servo_actors.config import ServoConfig
from servo_actors.connectors import Control
from servo_actors.errors import ConfigError, ProtocolError, ServoError, SupervisorError
from servo_actors.identity import IdentityGuard
from servo_actors.observability import events
from servo_actors.progress import ProgressSchedule
from servo_actors.protocol.client import OptimizerClient
from servo_actors.protocol.models import (
    AdjustCommand,
    Command,
    DescribeCommand,
    MeasureCommand,
    OptimizerStatus,
    SleepCommand,
    adjustment_result,
    description_result,
    failure_result,
    measurement_result,
    progress_param,
)
from servo_actors.protocol.progress_lane import ProgressLane, in_background
from servo_actors.protocol.statuses import reason_word
from servo_actors.signals import SignalWatcher, StopRequested
from servo_actors.vocabulary import ADJUSTMENT, DESCRIPTION, MEASUREMENT, OPERATION_EVENT

__all__ = [
    "Observer",
    "REPLY_CHECK_FIRST",
    "Runner",
    "SLEEP_SLICE",
    "TICK_INTERVAL",
    "result_param",
    "telemetry",
]

log = logging.getLogger(__name__)

REPLY_CHECK_FIRST = 0.002
"""While a progress post is open, the loop looks for its reply after this long, then twice as long
each time up to ``WAIT_SLICE``: a ``cancel`` from a prompt optimizer is acted on within a few ms,
and a slow one costs a handful of wakeups (the operation's wait cannot be woken by the reply)."""
SLEEP_SLICE = 5.0
"""Longest a SLEEP waits in one go. It wakes sooner: at once for a signal (a stop, a SIGHUP reload)
or the death of a process of the actor system, and whenever the watchdog must look again (about
every ``supervisor.liveness.interval``): see ``ServoRuntime.idle_wait``."""
TICK_INTERVAL = 0.25
"""Longest the loop waits on a request to the optimizer (HELLO, WHATS_NEXT, a result, the open
progress post) before it ticks the watchdog again: a lost actor system is noticed within this plus
the watchdog's own bound (``supervisor.liveness``), however long the optimizer takes."""

_T = TypeVar("_T")

Observer = Callable[[str, dict[str, Any]], None]
"""``observer(what, detail)``: told of each command and result, for ``demo`` and tests."""

_RESULT_EVENTS = OPERATION_EVENT


class Runner:
    """Runs the servo against the optimizer named in ``config`` until told to stop.

    ``config_path`` is re-read on SIGHUP; a broken new file is refused and the old one kept.
    """

    def __init__(
        self,
        config: ServoConfig,
        *,
        config_path: str | None = None,
        observer: Observer | None = None,
        signals: SignalWatcher | None = None,
    ) -> None:
        from servo_actors.config.loading import require_optimizer

        require_optimizer(config)
        self.config = config
        self.config_path = config_path
        self.signals = signals or SignalWatcher()
        self._observer = observer
        self._stop_reason: str | None = None
        self.runtime: ServoRuntime | None = None
        self.client: OptimizerClient | None = None
        self.identity: IdentityGuard | None = None
        reboots = config.supervisor.microreboots
        self._microreboots = RestartIntensity(reboots.max, reboots.period)
        self._described_metrics: dict[str, Any] | None = None

    # --- public -------------------------------------------------------------------------------

    def run(self) -> int:
        """The exit code: 0 after SIGTERM/SIGINT or ``request_stop``; 1 after a terminal failure.

        With ``settings.metrics.listen``, /metrics, /healthz and /readyz are served meanwhile.
        """
        metrics = self.config.settings.metrics
        with observability.serving(metrics, (spec.name for spec in self.config.connectors)) as server:
            try:
                code = self._run()
            except SupervisorError as exc:  # the connectors could not start at all
                events.run_ended(str(exc))
                self._linger(server)
                raise
            if code:
                self._linger(server)
            return code

    def _linger(self, server: observability.MetricsServer | None) -> None:
        """A terminal failure is in the counters: let a scrape see it (SIGTERM/SIGINT end the wait)."""
        if server is None:
            return
        self.signals.install()
        try:
            observability.linger(self.config.settings.metrics, server, self.signals.stop)
        finally:
            self.signals.restore()

    def _run(self) -> int:
        self.signals.install()
        try:
            # The actor system forks its processes: start it before the HTTP client makes threads.
            self.runtime = ServoRuntime(self.config)
            try:
                started = self.runtime.start(stop=self.signals.stop, patient=True)
            except SupervisorLost as exc:
                started = self._recover(exc)
            if not started:
                log.info("stopped (%s) while the connectors were starting", self._stop_name())
                return 0
            self._connectors_started()
            self.client = self._new_client(self.config)
            return self._serve()
        finally:
            if self.runtime is not None:
                self.runtime.stop()
            if self.client is not None:
                self.client.close()
            if self.identity is not None:
                self.identity.release()
            self.signals.restore()

    def request_stop(self, reason: str = "shutdown") -> None:
        """End the run as a signal would, with GOODBYE ``reason`` (safe from any thread)."""
        self._stop_reason = reason
        self.signals.stop.set()  # wakes a SLEEP too

    # --- the loop ------------------------------------------------------------------------------

    def _serve(self) -> int:
        assert self.client is not None and self.runtime is not None
        client = self.client
        self._await_optimizer(lambda: client.hello(telemetry(self.config)), heal=True)
        try:
            while not self.signals.stop.is_set():
                try:
                    if self.signals.take_reload():
                        self._reload()
                    self._heal()
                    failure = self.runtime.failure
                    if failure is not None:
                        raise failure
                    command = self._await_optimizer(self.client.whats_next, heal=True)
                    if command is None:  # stopped while polling
                        break
                    self._dispatch(command)
                except SupervisorLost:
                    # Lost at any point of the turn (even between _heal and here): not terminal,
                    # the next turn's _heal microreboots it (or stops past the intensity).
                    continue
        except StopRequested:
            pass
        except SupervisorError as exc:
            # The servo's own actor system keeps getting lost (microreboot intensity): no hot loop,
            # stop. (A connector past its restart intensity is marked failed; the loop goes on.)
            log.error("stopping: %s", exc)
            events.run_ended(str(exc))
            self.runtime.stop()
            self._goodbye("failure")
            return 1
        # An operation may still run: kill it first (crash-only), then say goodbye.
        self.runtime.stop()
        self._goodbye(self._stop_name())
        return 0

    def _connectors_started(self) -> None:
        """The connectors answered or are known not to be up: the probes and metrics say which."""
        assert self.runtime is not None
        names = [spec.name for spec in self.config.connectors]
        events.connectors_ready(names)
        not_up = self.runtime.not_up_why
        if not_up:
            listed = "; ".join(f"{name} ({why})" for name, why in sorted(not_up.items()))
            log.warning(
                "serving the optimizer without connectors that are not up: %s; their parts of each "
                "command fail naming them while the supervisor keeps restarting them",
                listed,
            )
            events.connectors_not_up(names, self.runtime.not_up)

    def _stop_name(self) -> str:
        return self._stop_reason or self.signals.stop_signal or "shutdown"

    def _heal(self) -> None:
        """A lost actor system (already killed by the runtime) is replaced by a fresh one here."""
        assert self.runtime is not None
        self.runtime.poll()
        lost = self.runtime.lost
        if lost is not None and not self._recover(lost):
            raise StopRequested(self._stop_name())

    def _recover(self, lost: SupervisorLost) -> bool:
        """Microreboots until one holds; SupervisorError past the intensity, False when stopped."""
        assert self.runtime is not None
        while True:
            reboots = self.config.supervisor.microreboots
            if self._microreboots.record(time.monotonic()):
                raise SupervisorError(
                    f"{lost}; more than {reboots.max} microreboots within {reboots.period:g}s "
                    "(supervisor.microreboots): giving up"
                )
            events.microreboot(str(lost))
            started = time.monotonic()
            try:
                if not self.runtime.reboot(stop=self.signals.stop):
                    return False
            except SupervisorLost as again:
                lost = again
                continue
            log.info("microreboot done in %.2fs: fresh connectors answer", time.monotonic() - started)
            self._connectors_started()
            return True

    def _dispatch(self, command: Command) -> None:
        events.command_received(command.cmd, command.cmd_uid)
        self._notify(
            "command", {"cmd": command.cmd, "cmd_uid": command.cmd_uid, "param": _dump(command.param)}
        )
        if isinstance(command, SleepCommand):
            self._sleep(command.param.duration)
        elif isinstance(command, DescribeCommand):
            self._operate(command, "describe", {}, progress=False)
        elif isinstance(command, MeasureCommand):
            control = _control(command.param.control)
            self._operate(command, "measure", {"metrics": list(command.param.metrics), "control": control})
        elif isinstance(command, AdjustCommand):
            control = _control(command.param.control)
            components = command.param.state.model_dump(mode="json")["application"]["components"]
            self._operate(command, "adjust", {"components": _settings_only(components), "control": control})

    def _path(self) -> OperationPath[Operation]:
        """The operation path on the current runtime (a SIGHUP reload replaces the runtime)."""
        assert self.runtime is not None
        return OperationPath(self.runtime, stop=self.signals.stop, stop_name=self._stop_name)

    def _operate(
        self, command: Command, operation: str, params: dict[str, Any], *, progress: bool = True
    ) -> None:
        """``command`` as ``operation`` through the operation path, its result (or its cancellation)
        posted: progress posts go out on the way (``_ProgressPosts``), and the optimizer's answer
        to one of them cancels the operation (``OperationPath.cancel``)."""
        assert self.client is not None and self.runtime is not None
        event = _RESULT_EVENTS[operation]
        control: Control | None = params.get("control")
        expected = control.expected_seconds if control else 0.0
        client = self.client
        reporter: Reporter | None = None
        if progress:
            lane = ProgressLane(lambda param: client.post_progress(event, param))
            schedule = ProgressSchedule(time.monotonic(), expected, self.config.settings.progress_interval)
            reporter = _ProgressPosts(self, command, event, lane, schedule)
        try:
            outcome = self._path().perform(operation, reporter=reporter, **params)
        except SupervisorLost as exc:
            # Lost between commands and not yet rebooted: this command fails; the loop heals next.
            self._post_result(
                event,
                failure_result(event, command.cmd_uid, status="failed", reason=LOST_REASON, message=str(exc)),
            )
            return
        result = outcome.result
        if outcome.cancelled_by is not None or result is None:
            return  # the cancellation was reported (``_ProgressPosts.cancelled``); fresh connectors answer
        described = None
        if operation == "describe" and result.ok:
            self._described_metrics = dict(result.data.get("metrics") or {})
        elif operation == "adjust" and result.ok:
            described = self._measurement_metrics()
        reply = self._post_result(
            event, result_param(event, command, result, params.get("metrics"), described)
        )
        if reply is not None and reply.status == "cancel":
            # Abort pressed as the result went out: the command counts as cancelled; start fresh.
            self._path().cancel()
        self._notify(
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

    def _measurement_metrics(self) -> dict[str, Any]:
        """The metrics the connectors describe (an ADJUSTMENT's ``state.measurement``): from the
        last DESCRIBE, else from a describe now (once; its failure leaves the metrics empty)."""
        if self._described_metrics is None:
            try:
                result = self._path().result("describe")
            except SupervisorLost:
                return {}
            if not result.ok:
                log.warning("no metrics for the ADJUSTMENT's state: describe failed (%s)", result.message)
                return {}
            self._described_metrics = dict(result.data.get("metrics") or {})
        return self._described_metrics

    def _cancelled(self, command: Command, event: str, reply: OptimizerStatus) -> None:
        """The optimizer's answer to a progress post cancelled the operation and its kills are
        confirmed: tell the observer, and post ``cancelled`` if the answer was a cancel."""
        self._notify("cancelled", {"cmd": command.cmd, "cmd_uid": command.cmd_uid, "status": reply.status})
        if reply.status == "cancel":
            reason, message = _cancel_reason(reply)
            self._post_result(
                event,
                failure_result(event, command.cmd_uid, status="cancelled", reason=reason, message=message),
            )
        # unexpected-event / invalid: the servo and optimizer lost sync; no result is owed.
        # Either way the next command is taken only by fresh connectors (the path waits for them).

    def _settle(self, lane: ProgressLane) -> OptimizerStatus | None:
        """Before a result goes out, the progress post still open is answered (within the client's
        ``timeouts.connect + timeouts.read``): a ``cancel`` in that answer is the command's outcome."""
        post = lane.open_post
        if post is not None:
            self._wait_ticking(post, heal=False)
        if self.signals.stop.is_set():
            raise StopRequested(self._stop_name())
        return lane.verdict()

    def _post_result(self, event: str, param: dict[str, Any]) -> OptimizerStatus | None:
        assert self.client is not None
        client = self.client
        return self._await_optimizer(lambda: client.post_result(event, param), heal=False)

    def _await_optimizer(self, call: Callable[[], _T], *, heal: bool) -> _T:
        """``call()``, a request to the optimizer, on a worker while the watchdog ticks (see
        ``_wait_ticking``); its return value, or the exception it raised."""
        future = in_background(call)
        self._wait_ticking(future, heal=heal)
        return future.result()

    def _wait_ticking(self, future: Future[Any], *, heal: bool) -> None:
        """Wait until ``future`` is done, ticking the watchdog every ``TICK_INTERVAL``.

        With ``heal`` (between commands) a lost actor system is replaced at once (a microreboot);
        without (a command in flight) it is only noticed: the operation resolves ``failed`` and the
        loop heals before its next poll. A stop ends the request (the client watches the same
        event). If anything ends the wait early (a stop while healing, microreboots past their
        intensity), the run is ending: the request is stopped with it, never left polling.
        """
        assert self.runtime is not None
        try:
            while not wait_for_future([future], timeout=TICK_INTERVAL).done:
                if heal:
                    self._heal()
                else:
                    self.runtime.poll()
        except BaseException:
            if not future.done():
                self.signals.stop.set()
            raise

    def _sleep(self, seconds: float) -> None:
        assert self.runtime is not None
        deadline = time.monotonic() + seconds
        while not self.signals.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            wake = self.signals.wake_fd
            self.runtime.idle_wait(min(remaining, SLEEP_SLICE), () if wake is None else (wake,))
            self.signals.drain_wake()
            if self.signals.stop.is_set():
                return
            if self.signals.take_reload():
                self._reload()
            # A death during a long SLEEP is healed now, not when the SLEEP ends; a supervisor that
            # gave up (restart intensity) ends the run now too.
            self._heal()
            if self.runtime.failure is not None:
                raise self.runtime.failure

    def _reload(self) -> None:
        """SIGHUP: load the file again; a good one replaces the connectors, a broken one is refused.

        The new connectors start in a second actor system beside the running one, which is stopped
        only once they all answer: a file that is valid but whose connectors cannot start (restart
        intensity exceeded, or not ready within their startup budget) leaves the running ones
        serving, untouched. (Stopping the old set first and restoring it on failure would leave a
        window with no connectors, and a second start that may fail too.) The cost: for a moment
        both sets run, so a connector that needs an exclusive resource at startup (a fixed port)
        cannot be reloaded this way; that reload fails and says why.
        """
        assert self.runtime is not None
        from servo_actors.config.loading import require_optimizer
        from servo_actors.connectors.registry import load_config

        source = self.config_path or "servo.yaml"
        try:
            new = load_config(self.config_path)
            require_optimizer(new)
            runtime = ServoRuntime(new)
        except ConfigError as exc:
            log.error("configuration reload refused, keeping the running one: %s", exc)
            return
        convention = self.config.supervisor.convention
        if convention is not None:
            # The running actor system holds the leader's address, which agents join: a second one
            # cannot start beside it (README, "Connectors on other hosts").
            log.error(
                "configuration reload from %s refused, keeping the running connectors: a servo with "
                "supervisor.convention holds %s and cannot start new connectors beside it; restart "
                "the servo to apply the file (agents join the new one by themselves)",
                source,
                convention.listen,
            )
            return
        log.info("configuration reload from %s: starting the new connectors beside the running ones", source)
        try:
            started = runtime.start(stop=self.signals.stop)
        except SupervisorError as exc:
            log.error("configuration reload from %s failed, keeping the running connectors: %s", source, exc)
            return
        if not started:
            raise StopRequested(self._stop_name())
        not_up = runtime.not_up_why
        if not_up:
            listed = "; ".join(f"{name} ({why})" for name, why in sorted(not_up.items()))
            log.error(
                "configuration reload from %s failed, keeping the running connectors: not up: %s",
                source,
                listed,
            )
            runtime.stop()
            return
        old, self.runtime = self.runtime, runtime
        old.stop()
        events.reloaded(spec.name for spec in new.connectors)
        self._described_metrics = None
        log.info(
            "configuration reloaded from %s: the new connectors answer, the old ones are stopped", source
        )
        if new.optimizer != self.config.optimizer or new.settings != self.config.settings:
            assert self.client is not None
            self.client.close()
            self.client = self._new_client(new)
        if new.supervisor.microreboots != self.config.supervisor.microreboots:
            reboots = new.supervisor.microreboots
            self._microreboots = RestartIntensity(reboots.max, reboots.period)
        self.config = new

    def _goodbye(self, reason: str) -> None:
        if self.client is not None:
            self.client.goodbye(reason)

    def _new_client(self, config: ServoConfig) -> OptimizerClient:
        assert config.optimizer is not None
        # Two servos of one identity livelock: the guard notices, says so and slows the polls.
        self.identity = IdentityGuard.for_config(config, previous=self.identity)
        return OptimizerClient(
            config.optimizer,
            config.settings,
            servo_uid=config.servo_uid,
            stop=self.signals.stop,
            watcher=events.AnswerRecorder(self.identity),  # the guard, and the servo's metrics
        )

    def _notify(self, what: str, detail: dict[str, Any]) -> None:
        if self._observer is not None:
            self._observer(what, detail)


class _ProgressPosts(Reporter):
    """The runner's part of the operation path: progress posts to the optimizer on the schedule of
    ``ProgressSchedule``, through a ``ProgressLane`` (one post in flight, every reply read), whose
    replies are the verdicts that cancel the operation."""

    def __init__(
        self, runner: Runner, command: Command, event: str, lane: ProgressLane, schedule: ProgressSchedule
    ) -> None:
        self._runner, self._command, self._event = runner, command, event
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
        return self._runner._settle(self._lane)

    def cancelled(self, op: InFlight, verdict: OptimizerStatus) -> None:
        self._runner._cancelled(self._command, self._event, verdict)


# --- an operation's result as a wire event ------------------------------------------------------


def result_param(
    event: str,
    command: Command,
    result: OperationResult,
    requested: list[str] | None,
    described_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The param of the result event for ``result``: always a valid result, whatever the connectors
    returned. One that breaks the protocol becomes a ``failed`` result naming what is wrong; values
    that cannot be JSON (NaN, infinity) are dropped and said so (``measurement_result``)."""
    cmd_uid = command.cmd_uid
    failure = None
    if result.status != "ok":
        # failure_result makes any status and reason valid, keeping the original words.
        failure = failure_result(
            event, cmd_uid, status=result.status, reason=result.reason, message=result.message
        )
        if result.reason not in NOT_UP_REASONS or event == ADJUSTMENT or not result.data:
            return failure
    param = _data_param(event, command, result, requested, described_metrics)
    if failure is not None and param.get("status") == "ok":
        # Partial: what the connectors that are up have, under the failure naming those that are not.
        param.update(failure)
    return param


def _data_param(
    event: str,
    command: Command,
    result: OperationResult,
    requested: list[str] | None,
    described_metrics: dict[str, Any] | None,
) -> dict[str, Any]:
    cmd_uid = command.cmd_uid
    try:
        data = result.data if isinstance(result.data, dict) else {}
        if event == DESCRIPTION:
            return description_result(
                cmd_uid, components=data.get("components", {}), metrics=data.get("metrics", {})
            )
        if event == MEASUREMENT:
            metrics = data.get("metrics", {})
            if requested and isinstance(metrics, dict):
                # Only requested metrics reach the optimizer (interface.md).
                metrics = {name: value for name, value in metrics.items() if name in requested}
            param = measurement_result(cmd_uid, metrics=metrics, annotations=data.get("annotations", {}))
            if param.get("message"):
                log.warning("%s %s: %s", command.cmd, cmd_uid, param["message"])
            return param
        return adjustment_result(cmd_uid, components=data.get("components", {}), metrics=described_metrics)
    except (ProtocolError, ServoError, AttributeError, TypeError, ValueError, RecursionError) as exc:
        message = f"connector results do not fit the protocol: {exc}"
        log.error("%s %s: %s", command.cmd, cmd_uid, message)
        return failure_result(event, cmd_uid, status="failed", reason="invalid-result", message=message)


def telemetry(config: ServoConfig) -> dict[str, Any]:
    """What HELLO tells the optimizer about this servo."""
    return {
        "servo_actors.version": __version__,
        "agent": USER_AGENT,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "connectors": [{"name": spec.name, "type": spec.type} for spec in config.connectors],
    }


def _control(wire: Any) -> Control:
    return Control(
        duration=wire.duration,
        warmup=wire.warmup,
        delay=wire.delay,
        settlement=wire.settlement,
        userdata=dict(wire.userdata),
        load=dict(wire.load),
        environment=dict(wire.environment),
    )


def _settings_only(components: dict[str, Any]) -> dict[str, Any]:
    """``{component: {"settings": {setting: {"value": v}}}}``, the shape ``adjust`` receives."""
    return {
        name: {
            "settings": {
                key: {"value": setting.get("value")} for key, setting in (body.get("settings") or {}).items()
            }
        }
        for name, body in components.items()
    }


def _cancel_reason(reply: OptimizerStatus) -> tuple[str, str]:
    """A reason word and a message from the optimizer's ``cancel``: its reason may be any text
    (``user/abort``, a sentence); the word is made from it and the text kept in the message."""
    text = (reply.reason or "").strip()
    word = reason_word(text, fallback="cancelled")
    message = reply.message or "cancelled by the optimizer"
    if text and text != word:
        message = f"{message} (reason: {text!r})"
    return word, message


def _dump(param: Any) -> Any:
    return param.model_dump(mode="json") if hasattr(param, "model_dump") else param
