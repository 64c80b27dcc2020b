"""The front the load goes through: the local cluster's real node has no kube-proxy (no Service
VIPs), and every rollout gives the pods new IPs, so the demo sends its load to this round-robin HTTP
forwarder on loopback, which spreads requests over the ready pods' IPs (pods.ReadyPods; read again at once
when a pod does not answer). The
latency that counts is the app's own histogram (server side): the forwarder's adds nothing to it."""

from __future__ import annotations

import http.client
import itertools
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kube_demo_real.pods import Pod, ReadyPods

UPSTREAM_TIMEOUT = 4.0
"""Seconds for a pod to answer (under the load's 5 s, so the load sees the 502, not its timeout)."""
ATTEMPTS = 2
"""Pods tried for one request: a pod gone in a rollout, before the next read of the pods, costs
one more try on the next one, not an error."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away (the load stopping) is no error worth a traceback."""


class Balancer:
    """A ThreadingHTTPServer on 127.0.0.1 forwarding each GET to the next ready pod."""

    def __init__(self, pods: ReadyPods) -> None:
        self.pods = pods
        self.lock = threading.Lock()
        self.cycle: Iterator[str] = iter(())
        self.addresses: list[str] = []
        pods.listeners.append(self._pods_changed)
        balancer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                balancer.forward(self)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="balancer", daemon=True)
        self.local = threading.local()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _pods_changed(self, pods: list[Pod]) -> None:
        with self.lock:
            self.addresses = [pod.address for pod in pods]
            self.cycle = itertools.cycle(self.addresses)

    def _next(self) -> str | None:
        with self.lock:
            return next(self.cycle) if self.addresses else None

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        problem = "no ready pod"
        for _ in range(ATTEMPTS):
            address = self._next()
            if not address:
                break
            answer = self._send(address, handler.path)
            if isinstance(answer, str):
                problem = answer
                self.pods.stale()
                continue
            self._answer(handler, *answer)
            return
        self._answer(handler, 502 if problem != "no ready pod" else 503, f"{problem}\n".encode())

    def _send(self, address: str, path: str) -> tuple[int, bytes] | str:
        """The pod's status and body, or what went wrong."""
        connections: dict[str, http.client.HTTPConnection] = self.local.__dict__.setdefault("connections", {})
        connection = connections.get(address)
        if connection is None:
            host, port = address.rsplit(":", 1)
            connection = connections[address] = http.client.HTTPConnection(
                host, int(port), timeout=UPSTREAM_TIMEOUT
            )
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            connections.pop(address, None)
            return f"pod {address}: {exc}"

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except OSError:  # the client went away
            handler.close_connection = True
