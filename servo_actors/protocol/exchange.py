"""One POST to the optimizer, on a worker thread, and what it came to (an ``Outcome``).

``OptimizerClient`` holds one ``HttpExchange`` and sees only its ``Outcome``s; this is the one
module of the protocol that speaks HTTP (``requests``), bounds a reply's size and time,
and sorts HTTP statuses into retry, refused, rejected and gone (docs/protocol.md,
"Errors and retries").

Every request runs on a short-lived worker thread while the caller waits on ``stop``: setting
``stop`` (or a signal handler raising in the caller) ends an in-flight request at once; an
abandoned request finishes in the background on a session that is then discarded. One exchange
takes at most ``timeouts.connect + timeouts.read`` in all, however slowly a reply drips.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import requests
from pydantic import SecretStr

from servo_actors import USER_AGENT
from servo_actors.config.optimizer_section import Settings
from servo_actors.errors import ProtocolError
from servo_actors.logs import redact
from servo_actors.observability import events
from servo_actors.protocol.auth import auth_headers
from servo_actors.protocol.backoff import MIN_DELAY
from servo_actors.protocol.json_bounds import decode_reply
from servo_actors.protocol.unreachable import UnreachableNotice, connection_problem
from servo_actors.protocol.writing import request_body

__all__ = [
    "AUTH_STATUSES",
    "LOGGED_BODY_CHARS",
    "MAX_REPLY_BYTES",
    "READ_CHUNK_BYTES",
    "RETRY_STATUSES",
    "STOP_CHECK_INTERVAL",
    "HttpExchange",
    "Outcome",
    "OutcomeKind",
    "new_session",
]

log = logging.getLogger(__name__)

STOP_CHECK_INTERVAL = 0.05
"""How often a caller waiting on an in-flight request looks at the stop event."""
LOGGED_BODY_CHARS = 200
"""How much of an unexpected reply body goes into a log line."""
RETRY_STATUSES = frozenset({404, 408, 429})
"""Besides every 5xx, the HTTP statuses retried with backoff (docs/protocol.md, "Errors and retries")."""
AUTH_STATUSES = frozenset({401, 403})
"""Refusals that a fixed token or permission may lift: retried, at least ``backoff.max`` apart."""
MAX_REPLY_BYTES = 4 * 1024 * 1024
"""Largest reply body read; a longer one is a bad reply (a command or a status is a few KB)."""
READ_CHUNK_BYTES = 64 * 1024
"""How much of a reply body is read at a time."""

# refused: 401/403, retried slowly; rejected: another 4xx, which no retry will change;
# unsendable: the body itself cannot be JSON (a bug upstream), never sent.
OutcomeKind = Literal["ok", "retry", "refused", "rejected", "gone", "bad-reply", "unsendable", "stopped"]


@dataclass(frozen=True)
class Outcome:
    """What one POST came to. ``problem`` is a phrase for a log line (never holds the token)."""

    kind: OutcomeKind
    status: int | None = None
    body: Any = None
    problem: str = ""
    sent_bytes: int = 0
    unreachable: bool = False  # nothing answered at the address (refused, no such host...)


def new_session() -> requests.Session:
    """A fresh HTTP session (its connection pool is thread-safe); ``HttpExchange`` posts on it.

    It takes proxies from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY`` and
    ``NO_PROXY``, upper or lower case), as requests does by default: ``trust_env`` stays on.
    """
    session = requests.Session()
    session.trust_env = True
    return session


class HttpExchange:
    """Posts protocol messages to the optimizer at ``url``, each on a worker thread; ``OptimizerClient``
    holds one and decides, from each ``Outcome``, what to retry.

    ``token`` goes out in the auth header (``auth.auth_headers``) and is masked in every problem
    phrase; ``stop`` ends an interruptible post at once; ``notice`` is told when the optimizer
    answers (any HTTP status).
    """

    def __init__(
        self,
        url: str,
        settings: Settings,
        *,
        token: SecretStr | None,
        servo_uid: str | None,
        stop: threading.Event,
        notice: UnreachableNotice,
    ) -> None:
        self.url = url
        self.servo_uid = servo_uid
        self.settings = settings
        self._stop = stop
        self._notice = notice
        self._secret = token.get_secret_value().strip() if token is not None else None
        self._headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **auth_headers(token)}
        self._session_lock = threading.Lock()
        self._session = new_session()

    def __repr__(self) -> str:
        return f"HttpExchange(url={self.url!r}, servo_uid={self.servo_uid!r})"

    def close(self) -> None:
        """Close the current session's connections (an abandoned request's session closes itself)."""
        with self._session_lock:
            self._session.close()

    def redact(self, text: str) -> str:
        """``text`` with the token masked, for a log line or an error."""
        return redact(text, self._secret)

    def post(
        self, event: str, param: dict[str, Any] | None, *, deadline: float | None, interruptible: bool
    ) -> Outcome:
        """One POST of ``event`` (see ``_post``), and what it came to told to the servo's metrics
        and health state."""
        events.exchange_began()
        try:
            outcome = self._post(event, param, deadline=deadline, interruptible=interruptible)
        finally:
            events.exchange_ended()
        if outcome.kind not in ("stopped", "unsendable"):  # neither reached the optimizer
            events.exchange(event, outcome.status, outcome.problem)
        if outcome.status is not None:
            self._notice.answered()
        return outcome

    def _post(
        self, event: str, param: dict[str, Any] | None, *, deadline: float | None, interruptible: bool
    ) -> Outcome:
        """One POST on a worker thread, abandoned when ``stop`` is set or ``deadline`` passes.

        Without a ``deadline`` the exchange still ends after ``timeouts.connect + timeouts.read``:
        requests' read timeout is per socket read, and a reply dripping a byte at a time never
        trips it.
        """
        try:
            body = request_body(event, param, self.servo_uid)
        except ProtocolError as exc:
            return Outcome("unsendable", problem=f"the {event} body is not JSON: {exc}")
        if deadline is None:
            deadline = time.monotonic() + self.settings.timeouts.connect + self.settings.timeouts.read
        with self._session_lock:
            session = self._session
        timeout = self._timeouts(deadline)
        box: dict[str, Any] = {}
        done = threading.Event()

        def send() -> None:
            try:
                # verify per request: a session's verify loses to REQUESTS_CA_BUNDLE from the
                # environment (requests merges the environment's over the session's).
                response = session.post(
                    self.url,
                    data=body,
                    headers=self._headers,
                    timeout=timeout,
                    stream=True,
                    verify=self.settings.tls_verify,
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
                    return Outcome("stopped", problem="stopped")
                if deadline is not None and time.monotonic() >= deadline:
                    return Outcome("retry", problem="no reply in the time allowed")
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
                self._session = new_session()

    def _failed(self, exc: Exception) -> Outcome:
        if isinstance(exc, requests.Timeout):
            problem = f"timed out ({type(exc).__name__})"
        elif isinstance(exc, requests.ConnectionError):
            problem = f"cannot connect: {connection_problem(exc)}"
            return Outcome("retry", problem=problem, unreachable=True)
        else:
            problem = f"{type(exc).__name__}: {self.redact(str(exc))[:LOGGED_BODY_CHARS]}"
        return Outcome("retry", problem=problem)

    def _classify(self, response: requests.Response, content: bytes | None) -> Outcome:
        code = response.status_code
        if 200 <= code < 300:
            try:
                return Outcome("ok", code, decode_reply(content, MAX_REPLY_BYTES))
            except ValueError as exc:
                shown = f": {self._snippet(content)!r}" if content is not None else ""
                return Outcome("bad-reply", code, None, f"{exc}{shown}")
        problem = f"HTTP {code} {response.reason or ''}".rstrip()
        snippet = self._snippet(content)
        if snippet:
            problem += f": {snippet}"
        if code == 410:
            return Outcome("gone", code, None, problem)
        if code >= 500 or code in RETRY_STATUSES:
            return Outcome("retry", code, None, problem)
        if code in AUTH_STATUSES or code < 400:
            return Outcome("refused", code, None, problem)
        return Outcome("rejected", code, None, problem)

    def _snippet(self, content: bytes | None) -> str:
        text = (content or b"")[:LOGGED_BODY_CHARS].decode("utf-8", errors="replace")
        return self.redact(" ".join(text.split()))


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
