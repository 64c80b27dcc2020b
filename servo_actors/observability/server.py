"""MetricsServer: /metrics, /healthz and /readyz over HTTP, on the one address configured.

::

    server = MetricsServer("127.0.0.1", 9464, metrics, health)   # binds now (ConfigError if it cannot)
    server.start()                                                # serves on daemon threads
    ...
    server.stop()                                                 # bounded; the port is free again

- ``GET /metrics``: ``prometheus_client``'s exposition of ``metrics.registry`` (text format, or
  OpenMetrics when asked for; gzip when accepted).
- ``GET /healthz``, ``GET /readyz``: 200 or 503 with a JSON body (``HealthState``).
- Anything else: 404 (405 for another method than GET), JSON.

The servo forks its actor system while this server runs (at start, at a microreboot, at a reload):
a forked process would inherit the listening socket and every connection being served, and keep
the port (or a scrape) open for as long as it lives. ``os.register_at_fork`` closes them in the
child at once, so only the servo's main process ever listens.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app

from servo_actors.config.listen import format_listen
from servo_actors.errors import ConfigError
from servo_actors.observability.health import AppsHealth, HealthState, Verdict
from servo_actors.observability.registry import ServoMetrics

REQUEST_TIMEOUT = 10.0
"""Seconds a connection may take to send its request: a stuck client cannot hold a thread longer."""
POLL_INTERVAL = 0.1
"""How often the accept loop looks for ``stop()``."""
STOP_TIMEOUT = 5.0
"""Seconds ``stop()`` waits for the accept loop's thread."""
PATHS = ("/metrics", "/healthz", "/readyz")

_live_servers: weakref.WeakSet[_Server] = weakref.WeakSet()


class _Handler(WSGIRequestHandler):
    """Quiet (a scrape every few seconds is not news) and bounded in time."""

    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow client never holds up the servo's exit

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily) -> None:
        self.address_family = family
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_inherited(self) -> None:
        """In a forked child: close this process's copies of the sockets, leave the parent's alone."""
        for sock in [self.socket, *self.connections]:
            with contextlib.suppress(OSError):
                os.close(sock.detach())


def _close_in_child() -> None:
    for server in list(_live_servers):
        server.close_inherited()


os.register_at_fork(after_in_child=_close_in_child)


def _json(
    start_response: Callable[..., Any], code: str, body: dict[str, Any], extra: Iterable[Any] = ()
) -> list[bytes]:
    data = json.dumps(body).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *extra]
    start_response(code, headers)
    return [data]


class MetricsServer:
    """Serves ``metrics`` and ``health`` on ``host:port`` (see module docstring)."""

    def __init__(self, host: str, port: int, metrics: ServoMetrics, health: HealthState | AppsHealth) -> None:
        self.metrics = metrics
        self.health = health
        self._exposition = make_wsgi_app(metrics.registry)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._server = _Server((host, port), family)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {format_listen(host, port)}: {exc.strerror or exc}",
                key="settings.metrics.listen",
            ) from None
        self._server.set_app(self._app)
        _live_servers.add(self._server)
        self.host, self.port = host, self._server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return format_listen(self.host, self.port)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_INTERVAL,), name="metrics-server", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, close the socket; requests being served finish on their own threads."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(STOP_TIMEOUT)
            self._thread = None
        _live_servers.discard(self._server)
        self._server.server_close()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        if path not in PATHS:
            return _json(
                start_response, "404 Not Found", {"error": f"no such path {path!r}", "paths": list(PATHS)}
            )
        if method != "GET":
            allow = [("Allow", "GET")]
            return _json(
                start_response, "405 Method Not Allowed", {"error": f"{method} is not allowed"}, allow
            )
        if path == "/metrics":
            return self._exposition(environ, start_response)
        verdict = self.health.liveness() if path == "/healthz" else self.health.readiness()
        return _verdict(start_response, verdict)


def _verdict(start_response: Callable[..., Any], verdict: Verdict) -> list[bytes]:
    code = "200 OK" if verdict.ok else "503 Service Unavailable"
    return _json(start_response, code, verdict.body, [("Cache-Control", "no-store")])


__all__ = ["MetricsServer"]
