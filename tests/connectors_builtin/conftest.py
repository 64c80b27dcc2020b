"""Fixtures for the built-in connector tests: a progress recorder, a real local HTTP server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

SERVER_STOP_TIMEOUT = 10.0
SERVER_POLL_INTERVAL = 0.05  # how quickly serve_forever notices shutdown()


@dataclass
class ProgressLog:
    """A ``progress`` callback that remembers every call, with the monotonic time it came."""

    calls: list[tuple[float, float, str]] = field(default_factory=list)

    def __call__(self, percent: float, message: str = "") -> None:
        self.calls.append((time.monotonic(), percent, message))

    @property
    def percents(self) -> list[float]:
        return [percent for _, percent, _ in self.calls]


@pytest.fixture
def progress() -> ProgressLog:
    return ProgressLog()


@dataclass
class LocalServer:
    """A ThreadingHTTPServer on 127.0.0.1 whose answers come from ``respond(handler) -> (status, body)``."""

    url: str
    server: ThreadingHTTPServer
    requests: list[dict[str, Any]]
    release: threading.Event  # set at teardown so handlers blocked on it return


@pytest.fixture
def http_server() -> Iterator[Callable[..., LocalServer]]:
    started: list[tuple[ThreadingHTTPServer, threading.Thread, threading.Event]] = []

    def start(
        respond: Callable[[BaseHTTPRequestHandler, int, threading.Event], tuple[int, bytes]],
    ) -> LocalServer:
        seen: list[dict[str, Any]] = []
        lock = threading.Lock()
        release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Without it, headers and body go out in two segments and delayed ACKs add ~40 ms.
            disable_nagle_algorithm = True

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with lock:
                    seen.append({"method": self.command, "headers": dict(self.headers), "body": body})
                    number = len(seen)
                status, payload = respond(self, number, release)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    self.close_connection = True  # the client gave up (a timeout test): expected

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(
            target=server.serve_forever, args=(SERVER_POLL_INTERVAL,), name="test-http-server", daemon=True
        )
        thread.start()
        started.append((server, thread, release))
        host, port = server.server_address[:2]
        return LocalServer(f"http://{host}:{port}/", server, seen, release)

    yield start
    for server, thread, release in started:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(SERVER_STOP_TIMEOUT)
        assert not thread.is_alive(), "test HTTP server did not stop"
