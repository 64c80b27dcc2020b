"""OptimizerClient: the servo's side of the wire, over HTTP, with the retry rules of docs/protocol.md
("Errors and retries").

::

    stop = threading.Event()                      # set it from a SIGTERM handler
    client = OptimizerClient(config.optimizer, config.settings, servo_uid=config.servo_uid, stop=stop)
    client.hello({"connectors": 3})
    command = client.whats_next()                 # a Command, or None once stop is set
    client.post_progress("MEASUREMENT", progress_param(command.cmd_uid, progress=50, runtime=2.5))
    status = client.post_result("MEASUREMENT", measurement_result(command.cmd_uid, metrics={...}))
    client.goodbye("SIGTERM")

What each call does when the optimizer misbehaves:

============  ==========================================================================
whats_next    never gives up: retries (backoff) until a command comes or ``stop`` is set
hello,        retried until ``backoff.max_time``, then dropped with an error (None);
post_result   a 2xx reply that cannot be read is not reposted (the post arrived)
post_progress bounded by ``timeouts.connect + timeouts.read`` in all (attempts and retries); the
              reply is always read when it comes within that bound (it may be ``cancel``).
              Run it off the loop's thread (``progress_lane.ProgressLane``): the operation
              goes on meanwhile; an undelivered post is None, the next one follows
goodbye       one attempt, at most ``GOODBYE_TIMEOUT`` seconds, not interrupted by ``stop``
============  ==========================================================================

Connection errors, timeouts, 5xx, 404, 408 and 429 are retried with exponential backoff (see
``backoff.py``); 401 and 403 are logged as errors naming the URL and the status, then wait at
least ``backoff.max``; 410 ("unexpected servo_uid": this servo was replaced) waits ``gone_wait``.
Any other 4xx (400, 413, 422...) will not change on retry: a HELLO or a result is dropped at once
(logged with the status and the body's size); polling waits at least ``backoff.max``. A reply that
is not JSON, not of a protocol shape, nested deeper than ``MAX_NESTING`` or larger than
``MAX_REPLY_BYTES`` is a bad reply: logged and, when polling, polled again after a backoff. One
exchange takes at most ``timeouts.connect + timeouts.read`` in all, however slowly a reply drips.
The token never appears in a log line, an exception or a repr.

When nothing answers at the optimizer's address (connection refused, a name that does not
resolve), the client says so once, plainly: which URL, and what to do (on this machine: how to
start the embedded optimizer; elsewhere: which setting holds the address). Each retry still logs
its own short line; once the optimizer answers, one line says so (``unreachable``).

Every request runs on a short-lived worker thread while the caller waits on ``stop``: setting
``stop`` (or a signal handler raising in the caller) ends a backoff sleep or an in-flight request at
once; an abandoned request finishes in the background on a session that is then discarded. The
client may be used from several threads (requests' connection pool is thread-safe).

This module holds the protocol calls and their retry loops; the client holds an
``exchange.HttpExchange``, which makes one POST and says what it came to (an ``Outcome``); the
token header is ``auth``'s.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import SecretStr

from servo_actors import USER_AGENT
from servo_actors.config.optimizer_section import OptimizerConfig, Settings
from servo_actors.config.secrets import read_token
from servo_actors.errors import ProtocolError
from servo_actors.observability import events
from servo_actors.protocol.backoff import BackoffPolicy, RetrySchedule, refusal_delay
from servo_actors.protocol.commands import Command, OptimizerStatus
from servo_actors.protocol.exchange import HttpExchange, Outcome
from servo_actors.protocol.reading import parse_reply
from servo_actors.protocol.unreachable import UnreachableNotice
from servo_actors.protocol.wire_types import Event
from servo_actors.protocol.writing import goodbye_param, hello_param

log = logging.getLogger(__name__)

GOODBYE_TIMEOUT = 5.0
"""Seconds GOODBYE may take in all: it is sent on the way out, best effort."""
GONE_WAIT = 600.0
"""Seconds to wait after 410 ("unexpected servo_uid"): the servo was replaced or deprovisioned."""


class AnswerWatcher(Protocol):
    """Told of the optimizer's answers to progress and result posts; asked before each poll.

    ``identity.IdentityGuard`` is one: a streak of ``unexpected cmd_uid`` answers means another
    servo has this one's identity, and polls then wait ``poll_delay()`` seconds.
    """

    def observe(self, event: str, param: dict[str, Any] | None, reply: OptimizerStatus | None) -> None: ...

    def poll_delay(self) -> float: ...


@dataclass(frozen=True)
class Undelivered:
    """A post that never reached the optimizer, or that it refused: ``why``, for a log line."""

    why: str


class OptimizerClient:
    """Talks to the optimizer at ``optimizer.servo_url``. See the module docstring for the rules.

    ``token``: the token as a SecretStr; when None, ``read_token(optimizer)`` resolves it (the
    config's ``token`` or ``token_file``). ``stop``: set it to end every wait at once.
    ``watcher``: told of answers, asked before each poll (``AnswerWatcher``).
    """

    def __init__(
        self,
        optimizer: OptimizerConfig,
        settings: Settings,
        *,
        token: SecretStr | None = None,
        servo_uid: str | None = None,
        stop: threading.Event | None = None,
        gone_wait: float = GONE_WAIT,
        rng: random.Random | None = None,
        watcher: AnswerWatcher | None = None,
    ) -> None:
        if token is None:
            token = read_token(optimizer)
        self.url = optimizer.servo_url
        self.servo_uid = servo_uid
        self.settings = settings
        self.policy = BackoffPolicy.from_config(settings.backoff)
        self.gone_wait = gone_wait
        self.watcher = watcher
        self._stop = stop if stop is not None else threading.Event()
        self._rng = rng if rng is not None else random.Random()
        self._notice = UnreachableNotice(self.url, optimizer.id)
        self._http = HttpExchange(
            self.url, settings, token=token, servo_uid=servo_uid, stop=self._stop, notice=self._notice
        )
        if not settings.ssl_verify:
            log.warning(
                "settings.ssl_verify is false: the optimizer's TLS certificate at %s is not checked, "
                "so the token can be read by anyone on the path (use settings.ca_bundle instead)",
                self.url,
            )

    def __repr__(self) -> str:
        return f"OptimizerClient(url={self.url!r}, servo_uid={self.servo_uid!r})"

    def __enter__(self) -> OptimizerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- the protocol ---------------------------------------------------------------------------

    def hello(self, telemetry: dict[str, Any] | None = None) -> OptimizerStatus | None:
        """HELLO; the optimizer's status, or None if not delivered by ``backoff.max_time`` (or stopped)."""
        reply = self._post_until_answered(Event.HELLO, hello_param(USER_AGENT, telemetry), gives_up=True)
        return reply if isinstance(reply, OptimizerStatus) else None

    def whats_next(self) -> Command | None:
        """Poll until the optimizer gives a command. Never gives up; None only once ``stop`` is set."""
        delay = self.watcher.poll_delay() if self.watcher is not None else 0.0
        if delay > 0 and self._stop.wait(delay):
            return None
        reply = self._post_until_answered(Event.WHATS_NEXT, None, gives_up=False)
        return reply if isinstance(reply, Command) else None

    def post_result(self, event: str, param: dict[str, Any]) -> OptimizerStatus | None:
        """Post a result (DESCRIPTION, MEASUREMENT, ADJUSTMENT) and return the optimizer's status.

        None when the answer is unknown: dropped after ``backoff.max_time`` (logged as an error),
        stopped, or an unreadable reply. Treat None like ``ok``: poll again.
        """
        reply = self._post_until_answered(event, param, gives_up=True)
        if isinstance(reply, Undelivered):
            # Not "result ... ok": the optimizer never took it. The runner goes on (the next poll).
            events.result_undelivered(event, param, reply.why)
            return None
        status = reply if isinstance(reply, OptimizerStatus) else None
        self._observed(event, param, status)
        return status

    def post_progress(self, event: str, progress: dict[str, Any]) -> OptimizerStatus | None:
        """Post progress; the status (``ok``, ``cancel``...), or None if not delivered in time.

        Bounded by ``timeouts.connect + timeouts.read`` in all (attempts and retries), and never
        abandoned sooner: the optimizer's answer may be ``cancel``, and a reply nobody reads is a
        cancel lost. This call blocks for as long as the optimizer takes to answer; the runner
        makes it on a ``ProgressLane`` worker, so the operation it reports on is never held up.
        """
        timeouts = self.settings.timeouts
        deadline = time.monotonic() + timeouts.connect + timeouts.read
        schedule = self._schedule(gives_up=False)
        while True:
            outcome = self._http.post(event, progress, deadline=deadline, interruptible=True)
            if outcome.kind == "stopped":
                return None
            if outcome.kind == "ok":
                outcome = self._read_reply(outcome, expect=OptimizerStatus)
                if outcome.kind == "ok":
                    self._observed(event, progress, outcome.body)
                    return outcome.body
            if outcome.kind != "retry":
                self._log_failure(event, outcome, None)
                return None
            delay = schedule.next_delay()
            if delay is None or time.monotonic() + delay >= deadline:
                log.warning(
                    "progress (%s) to %s not delivered within timeouts.connect + timeouts.read (%s); skipped",
                    event,
                    self.url,
                    outcome.problem,
                )
                return None
            events.backoff(event, delay)
            if self._stop.wait(delay):
                return None

    def goodbye(self, reason: str, *, timeout: float = GOODBYE_TIMEOUT) -> OptimizerStatus | None:
        """GOODBYE, best effort: one attempt of at most ``timeout`` seconds, even after ``stop``."""
        deadline = time.monotonic() + timeout
        outcome = self._http.post(
            Event.GOODBYE, goodbye_param(reason), deadline=deadline, interruptible=False
        )
        if outcome.kind == "ok":
            outcome = self._read_reply(outcome, expect=OptimizerStatus)
            if outcome.kind == "ok":
                return outcome.body
        log.warning("GOODBYE to %s not delivered: %s", self.url, outcome.problem)
        return None

    def _observed(self, event: str, param: dict[str, Any] | None, reply: OptimizerStatus | None) -> None:
        if self.watcher is not None:
            self.watcher.observe(event, param, reply)

    # --- retries ---------------------------------------------------------------------------------

    def _schedule(self, *, gives_up: bool) -> RetrySchedule:
        return RetrySchedule(self.policy, gives_up=gives_up, clock=time.monotonic, rng=self._rng)

    def _post_until_answered(
        self, event: str, param: dict[str, Any] | None, *, gives_up: bool
    ) -> Command | OptimizerStatus | Undelivered | None:
        """The optimizer's reply; None when it took the post but its reply could not be read;
        ``Undelivered`` saying why when the post never reached it, or was refused."""
        # WHATS_NEXT wants a command; everything else wants a status.
        expect = (Command if event == Event.WHATS_NEXT else OptimizerStatus,)
        schedule = self._schedule(gives_up=gives_up)
        while not self._stop.is_set():
            outcome = self._http.post(event, param, deadline=None, interruptible=True)
            if outcome.kind == "stopped":
                return Undelivered("the servo was stopping")
            if outcome.kind == "ok":
                outcome = self._read_reply(outcome, expect=expect)
                if outcome.kind == "ok":
                    return outcome.body
            if outcome.kind == "bad-reply" and gives_up:
                # The post arrived (HTTP 2xx): posting it again could deliver a result twice.
                self._log_failure(event, outcome, None)
                return None
            if outcome.kind == "unsendable":
                self._log_failure(event, outcome, None)
                return Undelivered(f"not sent: {outcome.problem}")
            if outcome.kind == "rejected" and gives_up:
                # The same bytes would get the same answer: drop them now, not after max_time.
                self._log_failure(event, outcome, None)
                return Undelivered(
                    f"refused by the optimizer ({outcome.problem}; request body {outcome.sent_bytes} bytes)"
                    " and dropped, as the same body would be refused again"
                )
            delay = self._delay_after(outcome, schedule)
            self._log_failure(event, outcome, delay)
            if delay is None:
                log.error(
                    "dropped %s to %s: not delivered within backoff.max_time (%.1fs)",
                    event,
                    self.url,
                    self.policy.max_time,
                )
                return Undelivered(
                    f"dropped after backoff.max_time ({self.policy.max_time:.1f}s): {outcome.problem}"
                )
            events.backoff(event, delay)
            if self._stop.wait(delay):
                return Undelivered("the servo was stopping")
        return Undelivered("the servo was stopping")

    def _delay_after(self, outcome: Outcome, schedule: RetrySchedule) -> float | None:
        if outcome.kind in ("refused", "rejected"):
            return schedule.next_delay(at_least=refusal_delay(self.policy, self._rng))
        if outcome.kind == "gone":
            return schedule.next_delay(at_least=self.gone_wait)
        return schedule.next_delay()

    def _log_failure(self, event: str, outcome: Outcome, delay: float | None) -> None:
        then = f"; next attempt in {delay:.2f}s" if delay is not None else ""
        where = f"POST {event} to {self.url}"
        if outcome.kind == "refused":
            hint = " (check the token)" if outcome.status in (401, 403) else ""
            log.error("%s refused: %s%s%s", where, outcome.problem, hint, then)
        elif outcome.kind == "gone":
            log.error(
                "%s: %s: this servo was replaced or deprovisioned (unexpected servo_uid)%s",
                where,
                outcome.problem,
                then,
            )
        elif outcome.kind == "rejected":
            dropped = "" if then else "; dropped: the same body would be refused again"
            log.error(
                "%s refused: %s (request body %d bytes)%s%s",
                where,
                outcome.problem,
                outcome.sent_bytes,
                dropped,
                then,
            )
        elif outcome.kind == "unsendable":
            log.error("%s not sent: %s", where, outcome.problem)
        elif outcome.kind == "bad-reply":
            log.error("%s: %s%s", where, outcome.problem, then)
        else:
            if outcome.unreachable:
                self._notice.unreachable(outcome.problem)
            log.warning("%s failed: %s%s", where, outcome.problem, then)

    def _read_reply(self, outcome: Outcome, *, expect: Any) -> Outcome:
        try:
            reply = parse_reply(outcome.body)
        except ProtocolError as exc:
            problem = f"the reply has the wrong shape: {self._http.redact(str(exc))}"
            return Outcome("bad-reply", outcome.status, None, problem)
        if not isinstance(reply, expect):
            if isinstance(reply, OptimizerStatus):
                what = f"status {reply.status!r}"
            else:
                what = f"command {reply.cmd!r}"
            return Outcome("bad-reply", outcome.status, None, f"unexpected reply: {what}")
        return Outcome("ok", outcome.status, reply)


__all__ = ["GONE_WAIT", "GOODBYE_TIMEOUT", "AnswerWatcher", "OptimizerClient", "Undelivered"]
