"""OptimizerClient: the servo's side of the wire, over HTTP, with the retry rules of protocol.md.

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
its own short line; once the optimizer answers, one line says so.

Every request runs on a short-lived worker thread while the caller waits on ``stop``: setting
``stop`` (or a signal handler raising in the caller) ends a backoff sleep or an in-flight request at
once; an abandoned request finishes in the background on a session that is then discarded. The
client may be used from several threads (requests' connection pool is thread-safe).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import requests
from pydantic import SecretStr

from servo_actors import USER_AGENT
from servo_actors.config.models import OptimizerConfig, Settings
from servo_actors.config.secrets import read_token
from servo_actors.errors import ConfigError, ProtocolError
from servo_actors.observability import events
from servo_actors.protocol.backoff import MIN_DELAY, BackoffPolicy, RetrySchedule, refusal_delay
from servo_actors.protocol.commands import Command, OptimizerStatus
from servo_actors.protocol.json_bounds import decode_reply
from servo_actors.protocol.reading import parse_reply
from servo_actors.protocol.wire_types import Event
from servo_actors.protocol.writing import goodbye_param, hello_param, request_body

log = logging.getLogger(__name__)

GOODBYE_TIMEOUT = 5.0
"""Seconds GOODBYE may take in all: it is sent on the way out, best effort."""
GONE_WAIT = 600.0
"""Seconds to wait after 410 ("unexpected servo_uid"): the servo was replaced or deprovisioned."""
STOP_CHECK_INTERVAL = 0.05
"""How often a caller waiting on an in-flight request looks at the stop event."""
LOGGED_BODY_CHARS = 200
"""How much of an unexpected reply body goes into a log line."""
RETRY_STATUSES = frozenset({404, 408, 429})
"""Besides every 5xx, the HTTP statuses retried with backoff (protocol.md)."""
AUTH_STATUSES = frozenset({401, 403})
"""Refusals that a fixed token or permission may lift: retried, at least ``backoff.max`` apart."""
MAX_REPLY_BYTES = 4 * 1024 * 1024
"""Largest reply body read; a longer one is a bad reply (a command or a status is a few KB)."""
READ_CHUNK_BYTES = 64 * 1024
"""How much of a reply body is read at a time."""
MASK = "**********"

# refused: 401/403, retried slowly; rejected: another 4xx, which no retry will change;
# unsendable: the body itself cannot be JSON (a bug upstream), never sent.
_Kind = Literal["ok", "retry", "refused", "rejected", "gone", "bad-reply", "unsendable", "stopped"]


@dataclass(frozen=True)
class _Outcome:
    """What one POST came to. ``problem`` is a phrase for a log line (never holds the token)."""

    kind: _Kind
    status: int | None = None
    body: Any = None
    problem: str = ""
    sent_bytes: int = 0
    unreachable: bool = False  # nothing answered at the address (refused, no such host...)


class AnswerWatcher(Protocol):
    """Told of the optimizer's answers to progress and result posts; asked before each poll.

    ``identity.IdentityGuard`` is one: a streak of ``unexpected cmd_uid`` answers means another
    servo has this one's identity, and polls then wait ``poll_delay()`` seconds.
    """

    def observe(self, event: str, param: dict[str, Any] | None, reply: OptimizerStatus | None) -> None: ...

    def poll_delay(self) -> float: ...


def auth_headers(token: SecretStr | None) -> dict[str, str]:
    """The token header in its three forms (protocol.md). ConfigError (without the token) if unusable.

    ``X-SF-Token abc`` -> ``X-SF-Token: abc``; ``Bearer abc`` -> ``Authorization: Bearer abc``;
    ``abc`` -> ``Authorization: Bearer abc``.
    """
    if token is None:
        return {}
    value = token.get_secret_value().strip()
    if not value:
        raise ConfigError("is empty", key="optimizer.token")
    if value.startswith("X-SF-Token "):
        name, header = "X-SF-Token", value.removeprefix("X-SF-Token ").strip()
    elif "Bearer" in value:
        name, header = "Authorization", value
    else:
        name, header = "Authorization", f"Bearer {value}"
    # requests would quote a bad header value in its exception: refuse it here, without the value.
    if not header or header.startswith(" ") or any(not (" " <= ch <= "~") for ch in header):
        raise ConfigError(
            "is empty or has characters an HTTP header cannot carry (control or non-ASCII)",
            key="optimizer.token",
        )
    return {name: header}


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
        self._secret = token.get_secret_value().strip() if token is not None else None
        self._headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **auth_headers(token)}
        self._session_lock = threading.Lock()
        self._session = requests.Session()
        self._app = optimizer.id
        self._unreachable_told = False  # the plain "cannot reach" message goes out once
        self._answered_told = False  # and, after it, one line once the optimizer answers

    def __repr__(self) -> str:
        return f"OptimizerClient(url={self.url!r}, servo_uid={self.servo_uid!r})"

    def __enter__(self) -> OptimizerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._session_lock:
            self._session.close()

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
        return None if isinstance(reply, OptimizerStatus) else reply

    def post_result(self, event: str, param: dict[str, Any]) -> OptimizerStatus | None:
        """Post a result (DESCRIPTION, MEASUREMENT, ADJUSTMENT) and return the optimizer's status.

        None when the answer is unknown: dropped after ``backoff.max_time`` (logged as an error),
        stopped, or an unreadable reply. Treat None like ``ok``: poll again.
        """
        reply = self._post_until_answered(event, param, gives_up=True)
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
            outcome = self._exchange(event, progress, deadline=deadline, interruptible=True)
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
        outcome = self._exchange(Event.GOODBYE, goodbye_param(reason), deadline=deadline, interruptible=False)
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
    ) -> Command | OptimizerStatus | None:
        # WHATS_NEXT wants a command; everything else wants a status.
        expect = (Command if event == Event.WHATS_NEXT else OptimizerStatus,)
        schedule = self._schedule(gives_up=gives_up)
        while not self._stop.is_set():
            outcome = self._exchange(event, param, deadline=None, interruptible=True)
            if outcome.kind == "stopped":
                return None
            if outcome.kind == "ok":
                outcome = self._read_reply(outcome, expect=expect)
                if outcome.kind == "ok":
                    return outcome.body
            if outcome.kind == "bad-reply" and gives_up:
                # The post arrived (HTTP 2xx): posting it again could deliver a result twice.
                self._log_failure(event, outcome, None)
                return None
            if outcome.kind == "unsendable" or (outcome.kind == "rejected" and gives_up):
                # The same bytes would get the same answer: drop them now, not after max_time.
                self._log_failure(event, outcome, None)
                return None
            delay = self._delay_after(outcome, schedule)
            self._log_failure(event, outcome, delay)
            if delay is None:
                log.error(
                    "dropped %s to %s: not delivered within backoff.max_time (%.1fs)",
                    event,
                    self.url,
                    self.policy.max_time,
                )
                return None
            events.backoff(event, delay)
            if self._stop.wait(delay):
                return None
        return None

    def _delay_after(self, outcome: _Outcome, schedule: RetrySchedule) -> float | None:
        if outcome.kind in ("refused", "rejected"):
            return schedule.next_delay(at_least=refusal_delay(self.policy, self._rng))
        if outcome.kind == "gone":
            return schedule.next_delay(at_least=self.gone_wait)
        return schedule.next_delay()

    def _log_failure(self, event: str, outcome: _Outcome, delay: float | None) -> None:
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
            if outcome.unreachable and not self._unreachable_told:
                self._unreachable_told = True
                log.warning("%s", unreachable_message(self.url, self._app, outcome.problem))
            log.warning("%s failed: %s%s", where, outcome.problem, then)

    def _read_reply(self, outcome: _Outcome, *, expect: Any) -> _Outcome:
        try:
            reply = parse_reply(outcome.body)
        except ProtocolError as exc:
            problem = f"the reply has the wrong shape: {self._redact(str(exc))}"
            return _Outcome("bad-reply", outcome.status, None, problem)
        if not isinstance(reply, expect):
            if isinstance(reply, OptimizerStatus):
                what = f"status {reply.status!r}"
            else:
                what = f"command {reply.cmd!r}"
            return _Outcome("bad-reply", outcome.status, None, f"unexpected reply: {what}")
        return _Outcome("ok", outcome.status, reply)

    # --- one POST --------------------------------------------------------------------------------

    def _exchange(
        self, event: str, param: dict[str, Any] | None, *, deadline: float | None, interruptible: bool
    ) -> _Outcome:
        """``_post``, and what it came to told to the servo's metrics and health state."""
        events.exchange_began()
        try:
            outcome = self._post(event, param, deadline=deadline, interruptible=interruptible)
        finally:
            events.exchange_ended()
        if outcome.kind not in ("stopped", "unsendable"):  # neither reached the optimizer
            events.exchange(event, outcome.status, outcome.problem)
        if outcome.status is not None and self._unreachable_told and not self._answered_told:
            self._answered_told = True
            log.info("the optimizer at %s answers now", self.url)
        return outcome

    def _post(
        self, event: str, param: dict[str, Any] | None, *, deadline: float | None, interruptible: bool
    ) -> _Outcome:
        """One POST on a worker thread, abandoned when ``stop`` is set or ``deadline`` passes.

        Without a ``deadline`` the exchange still ends after ``timeouts.connect + timeouts.read``:
        requests' read timeout is per socket read, and a reply dripping a byte at a time never
        trips it.
        """
        try:
            body = request_body(event, param, self.servo_uid)
        except ProtocolError as exc:
            return _Outcome("unsendable", problem=f"the {event} body is not JSON: {exc}")
        if deadline is None:
            deadline = time.monotonic() + self.settings.timeouts.connect + self.settings.timeouts.read
        with self._session_lock:
            session = self._session
        timeout = self._timeouts(deadline)
        box: dict[str, Any] = {}
        done = threading.Event()

        def send() -> None:
            try:
                response = session.post(
                    self.url, data=body, headers=self._headers, timeout=timeout, stream=True
                )
                box["stream"] = response  # so an abandoning caller can cut the read short
                with response:
                    box["content"] = _read_bounded(response)
                box["response"] = response
            except Exception as exc:  # any failure of the worker is reported, never lost
                box["error"] = exc
            finally:
                done.set()

        finished = False
        try:
            threading.Thread(target=send, name=f"optimizer-{event}", daemon=True).start()
            while not done.wait(STOP_CHECK_INTERVAL):
                if interruptible and self._stop.is_set():
                    return _Outcome("stopped", problem="stopped")
                if deadline is not None and time.monotonic() >= deadline:
                    return _Outcome("retry", problem="no reply in the time allowed")
            finished = True
        finally:
            if not finished:
                self._abandon(session)
                _cut(box.get("stream"))
        if "error" in box:
            return self._failed(box["error"])
        outcome = self._classify(box["response"], box["content"])
        return dataclasses.replace(outcome, sent_bytes=len(body))

    def _timeouts(self, deadline: float | None) -> tuple[float, float]:
        connect, read = self.settings.timeouts.connect, self.settings.timeouts.read
        if deadline is None:
            return connect, read
        left = max(deadline - time.monotonic(), MIN_DELAY)
        return min(connect, left), min(read, left)

    def _abandon(self, session: requests.Session) -> None:
        # The abandoned request still owns that session's connection; later calls get a fresh one.
        with self._session_lock:
            if self._session is session:
                self._session = requests.Session()

    def _failed(self, exc: Exception) -> _Outcome:
        if isinstance(exc, requests.Timeout):
            problem = f"timed out ({type(exc).__name__})"
        elif isinstance(exc, requests.ConnectionError):
            problem = f"cannot connect: {_connection_problem(exc)}"
            return _Outcome("retry", problem=problem, unreachable=True)
        else:
            problem = f"{type(exc).__name__}: {self._redact(str(exc))[:LOGGED_BODY_CHARS]}"
        return _Outcome("retry", problem=problem)

    def _classify(self, response: requests.Response, content: bytes | None) -> _Outcome:
        code = response.status_code
        if 200 <= code < 300:
            try:
                return _Outcome("ok", code, decode_reply(content, MAX_REPLY_BYTES))
            except ValueError as exc:
                shown = f": {self._snippet(content)!r}" if content is not None else ""
                return _Outcome("bad-reply", code, None, f"{exc}{shown}")
        problem = f"HTTP {code} {response.reason or ''}".rstrip()
        snippet = self._snippet(content)
        if snippet:
            problem += f": {snippet}"
        if code == 410:
            return _Outcome("gone", code, None, problem)
        if code >= 500 or code in RETRY_STATUSES:
            return _Outcome("retry", code, None, problem)
        if code in AUTH_STATUSES or code < 400:
            return _Outcome("refused", code, None, problem)
        return _Outcome("rejected", code, None, problem)

    def _snippet(self, content: bytes | None) -> str:
        text = (content or b"")[:LOGGED_BODY_CHARS].decode("utf-8", errors="replace")
        return self._redact(" ".join(text.split()))

    def _redact(self, text: str) -> str:
        # A server might echo what we sent; the token must not reach a log line through it.
        return text.replace(self._secret, MASK) if self._secret else text


def unreachable_message(url: str, app: str, problem: str) -> str:
    """What to tell a user whose servo finds nothing at ``url``: where, and what to do about it."""
    parts = urlsplit(url)
    said = f"cannot reach the optimizer at {url} ({problem.removeprefix('cannot connect: ')})"
    if _is_loopback(parts.hostname):
        port = f" --port {parts.port}" if parts.port not in (None, EMBEDDED_OPTIMIZER_PORT) else ""
        return (
            f"{said}: no optimizer is listening there. To run the embedded one on this machine: "
            f"servo-actors optimizer serve{port} --plan PLAN, with a plan for {app} (for the "
            f"synthetic example: config/plans/synthetic.yaml). The servo keeps trying meanwhile."
        )
    return (
        f"{said}: check optimizer.base_url (or optimizer.url) in the configuration, and that this "
        "host can reach it. The servo keeps trying meanwhile."
    )


EMBEDDED_OPTIMIZER_PORT = 8085
"""``servo-actors optimizer serve``'s default port: the hint leaves out ``--port`` for it."""


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _connection_problem(exc: BaseException) -> str:
    """A phrase for why a connection failed, from the OS error under requests' wrappers."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        error = stack.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, socket.gaierror):
            return "the host name does not resolve"
        if isinstance(error, OSError) and error.strerror:
            return error.strerror[0].lower() + error.strerror[1:]
        stack += [e for e in (error.__cause__, error.__context__) if e is not None]
        stack += [arg for arg in getattr(error, "args", ()) if isinstance(arg, BaseException)]
        reason = getattr(error, "reason", None)  # urllib3's MaxRetryError and NewConnectionError
        if isinstance(reason, BaseException):
            stack.append(reason)
    return type(exc).__name__


def _cut(response: requests.Response | None) -> None:
    """End a body read blocked on another thread (a reply dripping forever), so its thread ends."""
    raw = getattr(response, "raw", None)
    shutdown = getattr(raw, "shutdown", None)  # urllib3 >= 2.3; older ones: close, which may wait
    try:
        if shutdown is not None:
            shutdown()
        elif raw is not None:
            raw.close()
    except Exception as exc:  # the read it interrupts may be finishing at the same moment
        log.debug("could not cut an abandoned reply short: %s", exc)


def _read_bounded(response: requests.Response) -> bytes | None:
    """The reply body, or None if it is longer than ``MAX_REPLY_BYTES`` (the rest is not read)."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(READ_CHUNK_BYTES):
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


__all__ = [
    "GONE_WAIT",
    "GOODBYE_TIMEOUT",
    "MAX_REPLY_BYTES",
    "AnswerWatcher",
    "OptimizerClient",
    "auth_headers",
]
