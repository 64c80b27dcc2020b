"""OptimizerServer: the optimizer's side of the wire, embedded (demo, tests, local use).

::

    with OptimizerServer(ScriptedDriver.from_plan(plan), app="example.com/web") as server:
        print(server.servo_url)      # http://127.0.0.1:PORT/accounts/example.com/applications/web/servo
        ...                          # a servo talks to it; GET server.url + "/admin/state" shows it all

It owns HTTP, the envelope, the token, cmd_uids, the command in flight, ``/admin/cancel`` and the
request history; a ``Driver`` (driver.py) chooses the commands and judges their results.

Routes:

- ``POST {prefix}/accounts/{ORG}/applications/{APP}/servo`` (and any path ending in ``/servo``, for
  servos configured with an explicit ``url``): the protocol (protocol.md).
- ``GET /admin/state``: the command in flight, every request and reply with timestamps, and the
  driver's ``state()``.
- ``POST /admin/cancel`` (optional JSON body ``{"reason", "message"}``): the next progress post of
  the command in flight is answered ``cancel``; if no progress post comes, its result post is.
  The admin routes need no token: keep the server on loopback.
- ``GET /``: ``static/index.html`` when it exists (the console), else a short text page; files in
  ``static/`` are served under ``/static/``.

How the server answers the servo:

- HELLO and GOODBYE: ``ok`` (the command in flight, if any, is dropped: no result is coming).
- WHATS_NEXT: ``driver.next_command()`` with a fresh ``cmd_uid`` (none for SLEEP). A command still
  in flight is dropped: the servo moved on (after a cancel, ``unexpected-event``, a restart...).
- Progress (a param without ``status``): ``cancel`` when armed by ``/admin/cancel``, else
  ``driver.progress_reply``. A ``cancel`` answer calls ``driver.on_cancelled``; the servo then posts
  a ``cancelled`` result, which goes to ``driver.on_result`` like any other.
- A result: ``driver.on_result``; or ``cancel`` when armed (then the command counts as cancelled and
  ``on_result`` is not called). A result that does not have the protocol's shape: ``invalid``.
- A cmd_uid other than the one in flight: ``invalid`` with reason ``unexpected cmd_uid``; an event
  that does not fit the command in flight (or none in flight): ``unexpected-event``.
- A driver that also has ``fault_for(event, param) -> Fault | None`` (the scripted driver) may
  stall a request or answer it with any status and body instead.

Malformed requests (not JSON, not the 3-key envelope, an unknown event) get 400 JSON, a body over
``MAX_BODY_BYTES`` 413, a missing or wrong token 401; a failing driver 500. The server thread
survives all of it.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servo_actors.config.models import split_optimizer_id
from servo_actors.errors import ConfigError, ProtocolError
from servo_actors.optimizer.driver import Driver
from servo_actors.protocol.models import (
    RESULT_EVENT,
    Command,
    CommandName,
    Event,
    OptimizerStatus,
    parse_envelope,
    parse_param,
    parse_reply,
    to_wire,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body read; a bigger one is answered 413 without reading it."""
HISTORY_LIMIT = 10_000
"""Requests kept for ``/admin/state``; older ones are dropped (and counted)."""
STOP_TIMEOUT = 5.0
"""Seconds ``stop()`` waits for the serving thread."""
SHUTDOWN_POLL_INTERVAL = 0.1
"""How often the accept loop checks for ``stop()``."""
IDLE_CONNECTION_TIMEOUT = 120.0
"""A keep-alive connection idle this long is closed (its thread ends)."""
DEFAULT_CANCEL_REASON = "cancelled"
DEFAULT_CANCEL_MESSAGE = "cancelled from the embedded optimizer"
STATIC_DIR = Path(__file__).parent / "static"
_STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
_APP_PATH = re.compile(r"/accounts/(?P<org>[^/]+)/applications/(?P<app>[^/]+)/servo$")
_FALLBACK_PAGE = """servo-actors embedded optimizer for {app}

POST {servo_path}   the servo protocol
GET  /admin/state   JSON: the command in flight, the request history, the driver's state
POST /admin/cancel  cancel the command in flight (answered to its next progress post)
"""


@dataclass(frozen=True)
class Fault:
    """How to misanswer one request: stall first, then answer ``status`` with ``body``.

    With neither ``status`` nor ``body``, the request is answered normally after the stall.
    ``body`` is sent as is (bytes); with a status but no body, a JSON ``{"detail": ...}`` goes out.
    """

    stall: float = 0.0
    status: int | None = None
    body: bytes | None = None
    content_type: str = "application/json"


class _Reply:
    """An HTTP answer being prepared: status, JSON-able body (or raw bytes), headers."""

    def __init__(self, status: int, body: Any, *, raw: bytes | None = None, content_type: str = "") -> None:
        self.status = status
        self.body = body
        self.raw = raw
        self.content_type = content_type or "application/json"

    def payload(self) -> bytes:
        return self.raw if self.raw is not None else json.dumps(self.body).encode()


def _error(status: int, detail: str) -> _Reply:
    return _Reply(status, {"detail": detail})


def _status(name: str, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = {"status": name}
    if reason is not None:
        reply["reason"] = reason
    if message is not None:
        reply["message"] = message
    return reply


def _auth_form(headers: Any) -> str | None:
    """Which token header a request carried (never its value): for the history and tests."""
    if headers.get("X-SF-Token") is not None:
        return "X-SF-Token"
    auth = headers.get("Authorization")
    if auth is None:
        return None
    return "Bearer" if auth.strip().lower().startswith("bearer ") else "Authorization"


def _token_value(token: str) -> str:
    # The plan may hold the token in any of the forms a servo config may (protocol.md).
    token = token.strip()
    for prefix in ("X-SF-Token ", "Bearer "):
        if token.startswith(prefix):
            return token.removeprefix(prefix).strip()
    return token


class OptimizerServer:
    """The embedded optimizer on a ThreadingHTTPServer. Bound at construction; ``start()`` serves."""

    def __init__(
        self,
        driver: Driver,
        *,
        app: str,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        try:
            self.org, self.app_name = split_optimizer_id(app)
        except ValueError as exc:
            raise ConfigError(str(exc), key="app") from None
        self.app = app
        self.driver = driver
        self._token = _token_value(token) if token else None
        self._lock = threading.Lock()  # guards the protocol state and every driver call
        self._stopping = threading.Event()
        self._current: dict[str, Any] | None = None
        self._cancel: dict[str, Any] | None = None  # armed: {"cmd_uid", "reason", "message"}
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY_LIMIT)
        self._requests_seen = 0
        self._uids = 0
        self._thread: threading.Thread | None = None
        self._httpd = _HTTPServer((host, port), _Handler, self)

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://HOST:PORT``: use it as a servo's ``base_url``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def servo_path(self) -> str:
        return f"/accounts/{self.org}/applications/{self.app_name}/servo"

    @property
    def servo_url(self) -> str:
        return self.url + self.servo_path

    def start(self) -> OptimizerServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": SHUTDOWN_POLL_INTERVAL},
                name="optimizer-server",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end stalled requests, close every connection. Bounded by ``STOP_TIMEOUT``."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()  # returns once serve_forever has seen the request
            self._thread.join(STOP_TIMEOUT)
        self._httpd.close_connections()
        self._httpd.server_close()

    def __enter__(self) -> OptimizerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- admin -----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What ``GET /admin/state`` answers."""
        with self._lock:
            return {
                "app": self.app,
                "servo_path": self.servo_path,
                "current": self._current,
                "cancel_armed": self._cancel is not None,
                "requests": self._requests_seen,
                "history_dropped": self._requests_seen - len(self._history),
                "history": list(self._history),
                "driver": self.driver.state(),
            }

    def cancel(
        self, reason: str = DEFAULT_CANCEL_REASON, message: str = DEFAULT_CANCEL_MESSAGE
    ) -> dict[str, Any]:
        """Arm a cancel of the command in flight; what ``POST /admin/cancel`` answers."""
        with self._lock:
            current = self._current
            if current is None:
                return {
                    "in_flight": False,
                    "armed": False,
                    "message": "no command in flight: nothing to cancel",
                }
            self._cancel = {"cmd_uid": current["cmd_uid"], "reason": reason, "message": message}
            return {
                "in_flight": True,
                "armed": True,
                "cmd": current["cmd"],
                "cmd_uid": current["cmd_uid"],
                "message": f"{current['cmd']} {current['cmd_uid']} will be answered cancel at its next post",
            }

    # --- the protocol ----------------------------------------------------------------------------

    def authorized(self, headers: Any) -> bool:
        if self._token is None:
            return True
        offered = []
        if headers.get("X-SF-Token"):
            offered.append(headers["X-SF-Token"].strip())
        auth = (headers.get("Authorization") or "").strip()
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            offered.append(value.strip())
        return any(hmac.compare_digest(v.encode(), self._token.encode()) for v in offered)

    def hold(self, seconds: float) -> bool:
        """Wait ``seconds`` (a stalled reply); True if the server is stopping meanwhile."""
        return self._stopping.wait(seconds)

    def fault_for(self, event: str, param: Any) -> Fault | None:
        hook = getattr(self.driver, "fault_for", None)
        if hook is None:
            return None
        with self._lock:
            return hook(event, param)

    def answer(self, body: dict[str, Any]) -> _Reply:
        """The reply to one servo request whose JSON body is ``body`` (any JSON object)."""
        try:
            request = parse_envelope(body)
        except ProtocolError as exc:
            return _error(400, f"not a protocol envelope: {exc}")
        event, param = request.event, request.param
        with self._lock:
            if event in (Event.HELLO, Event.GOODBYE):
                return self._hello_goodbye(event, param)
            if event == Event.WHATS_NEXT:
                return self._whats_next()
            return self._result_or_progress(event, param or {})

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._requests_seen += 1
            self._history.append(entry)

    def _hello_goodbye(self, event: str, param: Any) -> _Reply:
        try:
            parse_param(event, param)
        except ProtocolError as exc:
            return _error(400, str(exc))
        self._drop_current()
        return _Reply(200, _status("ok"))

    def _whats_next(self) -> _Reply:
        self._drop_current()
        command = dict(self.driver.next_command())
        try:
            if not isinstance(parse_reply(command), Command):
                raise ProtocolError("the driver answered a status, not a command")
        except ProtocolError as exc:
            log.error("driver %s gave a bad command: %s", type(self.driver).__name__, exc)
            return _error(500, f"the optimizer's driver gave a bad command: {exc}")
        if command["cmd"] != CommandName.SLEEP:
            self._uids += 1
            command["cmd_uid"] = f"c{self._uids}"
            self._current = command
        return _Reply(200, command)

    def _result_or_progress(self, event: str, param: dict[str, Any]) -> _Reply:
        current, uid = self._current, param.get("cmd_uid")
        if current is None or (uid is not None and uid != current["cmd_uid"]):
            if uid is not None:
                return _Reply(200, _status("invalid", "unexpected cmd_uid", f"{uid!r} is not in flight"))
            return _Reply(200, _status("unexpected-event", message=f"{event} but no command is in flight"))
        expected = RESULT_EVENT[current["cmd"]]
        if event != expected:
            message = f"{current['cmd']} {current['cmd_uid']} is in flight: expected {expected}, not {event}"
            return _Reply(200, _status("unexpected-event", message=message))
        cancel = self._cancel if self._cancel and self._cancel["cmd_uid"] == current["cmd_uid"] else None
        if "status" not in param:
            return self._progress(current, param, cancel)
        return self._result(current, event, param, cancel)

    def _progress(
        self, current: dict[str, Any], param: dict[str, Any], cancel: dict[str, Any] | None
    ) -> _Reply:
        # Progress is read leniently: servox adds fields of its own (runtime as text, connector...).
        if cancel is not None:
            self._cancel = None
            self.driver.on_cancelled(current, cancel["reason"])
            return _Reply(200, _status("cancel", cancel["reason"], cancel["message"]))
        reply = self._checked(self.driver.progress_reply(current, param))
        if reply["status"] == "cancel":
            self.driver.on_cancelled(current, reply.get("reason") or DEFAULT_CANCEL_REASON)
        elif reply["status"] in ("invalid", "unexpected-event"):
            self._current = None  # no result is owed after these (protocol.md)
        return _Reply(200, reply)

    def _result(
        self, current: dict[str, Any], event: str, param: dict[str, Any], cancel: dict[str, Any] | None
    ) -> _Reply:
        try:
            parse_param(event, param)
        except ProtocolError as exc:
            return _Reply(
                200, _status("invalid", "malformed", f"{event} does not have the protocol's shape: {exc}")
            )
        self._current = None
        if cancel is not None:
            self._cancel = None
            self.driver.on_cancelled(current, cancel["reason"])
            return _Reply(200, _status("cancel", cancel["reason"], cancel["message"]))
        return _Reply(200, self._checked(self.driver.on_result(current, event, param)))

    def _checked(self, reply: dict[str, Any] | None) -> dict[str, Any]:
        if reply is None:
            return _status("ok")
        try:
            return to_wire(OptimizerStatus.model_validate(reply))
        except Exception as exc:
            raise RuntimeError(f"the driver answered {reply!r}, not an optimizer status") from exc

    def _drop_current(self) -> None:
        self._current = None
        self._cancel = None


class _HTTPServer(ThreadingHTTPServer):
    """Tracks its connections (so ``stop`` can close them) and sets TCP_NODELAY on each."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, optimizer: OptimizerServer) -> None:
        self.optimizer = optimizer
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        # Small JSON replies on a kept-alive connection: do not let Nagle hold them back.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._connections_lock:
            self._connections.add(sock)
        return sock, address

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the peer

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a servo polls on one connection
    timeout = IDLE_CONNECTION_TIMEOUT
    server: _HTTPServer
    server_version = "servo-actors-optimizer"

    @property
    def optimizer(self) -> OptimizerServer:
        return self.server.optimizer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("%s %s", self.address_string(), format % args)

    # --- dispatch --------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._safely(self._get)

    def do_POST(self) -> None:  # noqa: N802
        self._safely(self._post)

    def _safely(self, handle: Any) -> None:
        try:
            reply = handle()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        except Exception as exc:
            log.exception("embedded optimizer: %s %s failed", self.command, self.path)
            self.close_connection = True
            reply = _error(500, f"internal error: {type(exc).__name__}: {exc}")
        if reply is not None:
            self._send(reply)

    def _send(self, reply: _Reply) -> None:
        payload = reply.payload()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(payload)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the servo gave up waiting (a stalled reply): nothing to do

    def _get(self) -> _Reply:
        path = urlsplit(self.path).path
        if path == "/admin/state":
            return _Reply(200, self.optimizer.state())
        if path in ("/", "/index.html"):
            page = STATIC_DIR / "index.html"
            if page.is_file():
                return _Reply(200, None, raw=page.read_bytes(), content_type="text/html; charset=utf-8")
            text = _FALLBACK_PAGE.format(app=self.optimizer.app, servo_path=self.optimizer.servo_path)
            return _Reply(200, None, raw=text.encode(), content_type="text/plain; charset=utf-8")
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        return _error(404, f"no such page: {path}")

    def _static(self, name: str) -> _Reply:
        # Only plain file names directly in static/: no "..", no subdirectories.
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
            return _error(404, "no such file")
        file = STATIC_DIR / name
        if not file.is_file():
            return _error(404, "no such file")
        content_type = _STATIC_TYPES.get(file.suffix, "application/octet-stream")
        return _Reply(200, None, raw=file.read_bytes(), content_type=content_type)

    def _post(self) -> _Reply | None:
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/admin/cancel":
            return self._admin_cancel()
        match = _APP_PATH.search(path)
        if match and (match["org"], match["app"]) != (self.optimizer.org, self.optimizer.app_name):
            self._discard_body()
            return _error(
                404, f"no application {match['org']}/{match['app']} here (this is {self.optimizer.app})"
            )
        if not path.endswith("/servo") and path != "/servo":
            self._discard_body()
            return _error(404, f"no such endpoint: {path}")
        return self._servo()

    def _admin_cancel(self) -> _Reply:
        body, problem = self._read_json()
        if problem is not None:
            return problem
        options = body if isinstance(body, dict) else {}
        reason = options.get("reason") if isinstance(options.get("reason"), str) else DEFAULT_CANCEL_REASON
        message = (
            options.get("message") if isinstance(options.get("message"), str) else DEFAULT_CANCEL_MESSAGE
        )
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", reason):
            return _error(400, f"reason must be one word, not {reason!r}")
        return _Reply(200, self.optimizer.cancel(reason, message))

    def _servo(self) -> _Reply | None:
        started = time.time()
        if not self.optimizer.authorized(self.headers):
            self._discard_body()
            reply = _error(401, "missing or wrong token")
            self._remember(started, None, reply)
            return reply
        body, problem = self._read_json()
        if problem is not None:
            self._remember(started, None, problem)
            return problem
        if not isinstance(body, dict):
            reply = _error(400, f"the request body must be a JSON object, not {type(body).__name__}")
            self._remember(started, body, reply)
            return reply
        event = body.get("event")
        fault = self.optimizer.fault_for(event, body.get("param")) if isinstance(event, str) else None
        if fault is not None:
            if fault.stall and self.optimizer.hold(fault.stall):
                self.close_connection = True
                return None  # stopping: drop the stalled request
            if fault.status is not None or fault.body is not None:
                status = fault.status or 200
                raw = fault.body
                if raw is None:
                    raw = json.dumps(
                        {"detail": f"scripted fault: HTTP {status} {HTTPStatus(status).phrase}"}
                    ).encode()
                reply = _Reply(status, None, raw=raw, content_type=fault.content_type)
                self._remember(started, body, reply, fault=True)
                return reply
        reply = self.optimizer.answer(body)
        self._remember(started, body, reply)
        return reply

    # --- helpers ---------------------------------------------------------------------------------

    def _read_json(self) -> tuple[Any, _Reply | None]:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            self.close_connection = True
            return None, _error(400, "Content-Length is required")
        try:
            length = int(length_header)
        except ValueError:
            self.close_connection = True
            return None, _error(400, f"bad Content-Length {length_header[:40]!r}")
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True  # the body stays unread: the connection cannot be reused
            return None, _error(413, f"the body must be at most {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None, None
        try:
            return json.loads(raw), None
        except ValueError as exc:
            return None, _error(400, f"the body is not JSON: {exc}")

    def _discard_body(self) -> None:
        self.close_connection = True  # simplest way not to misread an unread body as the next request

    def _remember(self, started: float, body: Any, reply: _Reply, *, fault: bool = False) -> None:
        entry: dict[str, Any] = {
            "at": started,
            "replied_at": time.time(),
            "http_status": reply.status,
            "auth": _auth_form(self.headers),
            "user_agent": self.headers.get("User-Agent"),
        }
        if isinstance(body, dict):
            entry["event"] = body.get("event")
            entry["param"] = body.get("param")
        else:
            entry["request"] = body
        if reply.raw is not None:
            entry["reply_text"] = reply.raw[:2000].decode("utf-8", errors="replace")
        else:
            entry["reply"] = reply.body
        if fault:
            entry["fault"] = True
        self.optimizer.record(entry)
