"""The embedded optimizer's HTTP layer: routes, body limits, tokens, static files, connections.

``OptimizerServer`` (server.py) owns the protocol; this module turns HTTP requests into calls on
it and its answers into HTTP responses. Nothing here decides what to answer a servo. What it calls
is written here as Protocols (``ServedOptimizer``, ``ServedApplication``, ``ServedFault``), so this
module never imports server.py (which imports it); mypy checks that the server's classes fit them.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from servo_actors.protocol.json_bounds import MAX_NESTING

__all__ = [
    "DEFAULT_CANCEL_MESSAGE",
    "DEFAULT_CANCEL_REASON",
    "HttpServer",
    "IDLE_CONNECTION_TIMEOUT",
    "MAX_BODY_BYTES",
    "Reply",
    "STATIC_DIR",
    "ServedApplication",
    "ServedFault",
    "ServedOptimizer",
    "error_reply",
]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest request body read; a bigger one is answered 413 without reading it."""
IDLE_CONNECTION_TIMEOUT = 120.0
"""A keep-alive connection idle this long is closed (its thread ends)."""
DEFAULT_CANCEL_REASON = "cancelled"
DEFAULT_CANCEL_MESSAGE = "cancelled from the embedded optimizer"
STATIC_DIR = Path(__file__).parent / "static"
_STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
_APP_PATH = re.compile(r"/accounts/(?P<org>[^/]+)/applications/(?P<app>[^/]+)/servo$")
_FALLBACK_PAGE = """servo-actors embedded optimizer for {app}

POST {servo_path}   the servo protocol
GET  /admin/apps    JSON: the applications served
GET  /admin/state   JSON: the command in flight, the request history, the driver's state (?app=ORG/APP)
POST /admin/cancel  cancel the command in flight (answered to its next progress post) (?app=ORG/APP)
"""


class Reply:
    """An HTTP answer being prepared: status, JSON-able body (or raw bytes), headers."""

    def __init__(self, status: int, body: Any, *, raw: bytes | None = None, content_type: str = "") -> None:
        self.status = status
        self.body = body
        self.raw = raw
        self.content_type = content_type or "application/json"

    def payload(self) -> bytes:
        return self.raw if self.raw is not None else json.dumps(self.body).encode()


def error_reply(status: int, detail: str) -> Reply:
    return Reply(status, {"detail": detail})


class ServedFault(Protocol):
    """How to misanswer one request (``server.Fault``): stall first, then ``status`` with ``body``."""

    @property
    def stall(self) -> float: ...
    @property
    def status(self) -> int | None: ...
    @property
    def body(self) -> bytes | None: ...
    @property
    def content_type(self) -> str: ...


class ServedApplication(Protocol):
    """One application as the HTTP layer calls it (``server.Application``)."""

    def state(self) -> dict[str, Any]: ...
    def cancel(self, reason: str, message: str, cmd_uid: str | None) -> dict[str, Any]: ...
    def authorized(self, headers: Any) -> bool: ...
    def fault_for(self, event: str, param: Any) -> ServedFault | None: ...
    def answer(self, body: dict[str, Any]) -> Reply: ...
    def record(self, entry: dict[str, Any]) -> None: ...


class ServedOptimizer(Protocol):
    """The optimizer as the HTTP layer calls it (``server.OptimizerServer``)."""

    @property
    def applications(self) -> Sequence[ServedApplication]: ...
    @property
    def first(self) -> ServedApplication: ...
    @property
    def servo_path(self) -> str: ...
    def application(self, name: str | None = None) -> ServedApplication: ...
    def for_path(self, org: str, app: str) -> ServedApplication | None: ...
    def names(self) -> str: ...
    def admin_authorized(self, headers: Any) -> bool: ...
    def hold(self, seconds: float) -> bool: ...
    def overview(self) -> dict[str, Any]: ...


def _auth_form(headers: Any) -> str | None:
    """Which token header a request carried (never its value): for the history and tests."""
    if headers.get("X-SF-Token") is not None:
        return "X-SF-Token"
    auth = headers.get("Authorization")
    if auth is None:
        return None
    return "Bearer" if auth.strip().lower().startswith("bearer ") else "Authorization"


class HttpServer(ThreadingHTTPServer):
    """Tracks its connections (so ``stop`` can close them) and sets TCP_NODELAY on each."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], optimizer: ServedOptimizer) -> None:
        self.optimizer = optimizer
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

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

    def handleerror_reply(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a servo polls on one connection
    timeout = IDLE_CONNECTION_TIMEOUT
    server: HttpServer
    server_version = "servo-actors-optimizer"

    @property
    def optimizer(self) -> ServedOptimizer:
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
            reply = error_reply(500, f"internal error: {type(exc).__name__}: {exc}")
        if reply is not None:
            self._send(reply)

    def _send(self, reply: Reply) -> None:
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

    def _get(self) -> Reply:
        path = urlsplit(self.path).path
        if path == "/admin/apps":
            return Reply(200, self.optimizer.overview())
        if path == "/admin/state":
            application, problem = self._application(None)
            return problem or Reply(200, application.state())  # type: ignore[union-attr]  # no problem: an application
        if path in ("/", "/index.html"):
            page = STATIC_DIR / "index.html"
            if page.is_file():
                return Reply(200, None, raw=page.read_bytes(), content_type="text/html; charset=utf-8")
            text = _FALLBACK_PAGE.format(app=self.optimizer.names(), servo_path=self.optimizer.servo_path)
            return Reply(200, None, raw=text.encode(), content_type="text/plain; charset=utf-8")
        if path.startswith("/static/"):
            return self._static(path.removeprefix("/static/"))
        return error_reply(404, f"no such page: {path}")

    def _static(self, name: str) -> Reply:
        # Only plain file names directly in static/: no "..", no subdirectories.
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
            return error_reply(404, "no such file")
        file = STATIC_DIR / name
        if not file.is_file():
            return error_reply(404, "no such file")
        content_type = _STATIC_TYPES.get(file.suffix, "application/octet-stream")
        return Reply(200, None, raw=file.read_bytes(), content_type=content_type)

    def _post(self) -> Reply | None:
        path = urlsplit(self.path).path.rstrip("/")
        if path.startswith("/admin/"):
            if not self.optimizer.admin_authorized(self.headers):
                self._discard_body()
                return error_reply(401, "POST /admin/* needs the admin token (Authorization: Bearer ...)")
            if path == "/admin/cancel":
                return self._admin_cancel()
            self._discard_body()
            return error_reply(404, f"no such endpoint: {path}")
        match = _APP_PATH.search(path)
        if match:
            application = self.optimizer.for_path(match["org"], match["app"])
            if application is None:
                self._discard_body()
                return error_reply(
                    404,
                    f"no application {match['org']}/{match['app']} here (served: {self.optimizer.names()})",
                )
            return self._servo(application)
        if not path.endswith("/servo") and path != "/servo":
            self._discard_body()
            return error_reply(404, f"no such endpoint: {path}")
        if len(self.optimizer.applications) > 1:
            self._discard_body()
            return error_reply(
                404,
                f"several applications are served here ({self.optimizer.names()}): "
                "post to /accounts/ORG/applications/APP/servo",
            )
        return self._servo(self.optimizer.first)

    def _application(self, body: Any) -> tuple[ServedApplication | None, Reply | None]:
        """The application named by ``?app=`` or the body's ``app`` (else the only one), or an error reply."""
        names = parse_qs(urlsplit(self.path).query).get("app", [])
        name = names[0] if names else None
        if name is None and isinstance(body, dict) and isinstance(body.get("app"), str):
            name = body["app"]
        try:
            return self.optimizer.application(name), None
        except LookupError as exc:
            return None, error_reply(400 if name is None else 404, str(exc))

    def _admin_cancel(self) -> Reply:
        body, problem = self._read_json()
        if problem is not None:
            return problem
        application, problem = self._application(body)
        if problem is not None:
            return problem
        assert application is not None
        options = body if isinstance(body, dict) else {}
        given_reason, given_message = options.get("reason"), options.get("message")
        reason = given_reason if isinstance(given_reason, str) else DEFAULT_CANCEL_REASON
        message = given_message if isinstance(given_message, str) else DEFAULT_CANCEL_MESSAGE
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", reason):
            return error_reply(400, f"reason must be one word, not {reason!r}")
        cmd_uid = options.get("cmd_uid")
        if cmd_uid is not None and not isinstance(cmd_uid, str):
            return error_reply(400, f"cmd_uid must be a string, not {type(cmd_uid).__name__}")
        return Reply(200, application.cancel(reason, message, cmd_uid))

    def _servo(self, application: ServedApplication) -> Reply | None:
        started = time.time()
        if not application.authorized(self.headers):
            self._discard_body()
            reply = error_reply(401, "missing or wrong token")
            self._remember(application, started, None, reply)
            return reply
        body, problem = self._read_json()
        if problem is not None:
            self._remember(application, started, None, problem)
            return problem
        if not isinstance(body, dict):
            reply = error_reply(400, f"the request body must be a JSON object, not {type(body).__name__}")
            self._remember(application, started, body, reply)
            return reply
        event = body.get("event")
        fault = application.fault_for(event, body.get("param")) if isinstance(event, str) else None
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
                reply = Reply(status, None, raw=raw, content_type=fault.content_type)
                self._remember(application, started, body, reply, fault=True)
                return reply
        reply = application.answer(body)
        self._remember(application, started, body, reply)
        return reply

    # --- helpers ---------------------------------------------------------------------------------

    def _read_json(self) -> tuple[Any, Reply | None]:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            if self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                return None, error_reply(411, "send the body with a Content-Length, not chunked")
            return None, None  # HTTP/1.1: no length and no transfer coding means no body
        try:
            length = int(length_header)
        except ValueError:
            self.close_connection = True
            return None, error_reply(400, f"bad Content-Length {length_header[:40]!r}")
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True  # the body stays unread: the connection cannot be reused
            return None, error_reply(413, f"the body must be at most {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None, None
        try:
            return json.loads(raw), None
        except ValueError as exc:
            return None, error_reply(400, f"the body is not JSON: {exc}")
        except RecursionError:
            # Deeper than Python's parser goes (the protocol's own bound is far lower: json_bounds).
            return None, error_reply(400, f"the body is nested deeper than {MAX_NESTING} levels")

    def _discard_body(self) -> None:
        self.close_connection = True  # simplest way not to misread an unread body as the next request

    def _remember(
        self, application: ServedApplication, started: float, body: Any, reply: Reply, *, fault: bool = False
    ) -> None:
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
        application.record(entry)
