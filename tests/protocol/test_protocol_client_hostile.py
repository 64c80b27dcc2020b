"""OptimizerClient against hostile optimizers: refusals that will not change, huge or dripping
replies, bodies that cannot be JSON, and answers that show another servo has this identity.

The embedded optimizer plays what it can; a raw socket server plays what no HTTP server would
(a reply without an end, a byte at a time). Timing assertions are lower bounds, or generous upper
bounds that only a hang would break.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from waiting import wait_until

from servo_actors.identity import CONFLICT_STREAK, IdentityGuard
from servo_actors.protocol.exchange import MAX_REPLY_BYTES
from servo_actors.protocol.writing import description_result

COMPONENTS = {"web": {"settings": {"r": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 1}}}}
HANG_BOUND = 20.0
"""Only a hang (or a retry until an old, long max_time) takes this long."""
DRIP_INTERVAL = 0.2
"""Seconds between two bytes of a dripping reply: shorter than any read timeout used here."""


class RawServer:
    """A loopback TCP server answering each connection with ``respond(sock)`` on its own thread."""

    def __init__(self, respond: Callable[[socket.socket, threading.Event], None]) -> None:
        self._respond = respond
        self.stop = threading.Event()
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5.0)
            try:
                conn.recv(65536)  # the request: small enough to come in one read on loopback
                self._respond(conn, self.stop)
            except OSError:
                pass  # the client gave up on us: that is the point

    def close(self) -> None:
        self.stop.set()
        self._thread.join(5.0)
        self._sock.close()


@pytest.fixture
def raw_server() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(respond: Callable[[socket.socket, threading.Event], None]) -> RawServer:
        server = RawServer(respond)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def _readers(event: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"optimizer-{event}" and t.is_alive()]


def _drip(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    while not stop.wait(DRIP_INTERVAL):
        conn.sendall(b" ")


def _endless(conn: socket.socket, stop: threading.Event) -> None:
    # No length, no chunking: the body ends when the connection does, which is never.
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[")
    block = b"1," * 32768
    while not stop.is_set():
        conn.sendall(block)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("status", [413, 400, 422])
def test_a_result_refused_for_good_is_dropped_at_once(scripted, client_for, history, caplog, status) -> None:
    server = scripted(
        [{"cmd": "DESCRIBE"}, {"fault": {"status": status, "events": ["DESCRIPTION"], "times": 5}}]
    )
    client = client_for(server, backoff=(0.05, 0.2, 600.0))  # the old rule: retried for 10 minutes
    command = client.whats_next()
    started = time.monotonic()
    param = description_result(command.cmd_uid, components=COMPONENTS, metrics={})
    assert client.post_result("DESCRIPTION", param) is None
    assert time.monotonic() - started < HANG_BOUND
    assert [e["http_status"] for e in history(server, "DESCRIPTION")] == [status]
    line = next(r.getMessage() for r in caplog.records if f"HTTP {status}" in r.getMessage())
    assert "request body" in line and "bytes" in line and "dropped" in line


@pytest.mark.timeout(60)
def test_polling_refused_with_400_waits_at_least_backoff_max(scripted, client_for, history) -> None:
    server = scripted([{"fault": {"status": 400, "for": "1s", "events": ["WHATS_NEXT"]}}])
    client = client_for(server, backoff=(0.05, 0.4, 3.0))
    assert client.whats_next() is not None  # SLEEP, once the fault is over
    refused = [e for e in history(server, "WHATS_NEXT") if e["http_status"] == 400]
    assert refused and all(b["at"] - a["at"] >= 0.4 for a, b in zip(refused, refused[1:], strict=False))


@pytest.mark.timeout(60)
def test_a_dripping_reply_ends_within_connect_plus_read(raw_server, client_for, caplog) -> None:
    server = raw_server(_drip)
    client = client_for(base_url=server.url, timeouts=(0.5, 1.0), backoff=(0.05, 0.2, 2.0))
    started = time.monotonic()
    param = description_result("c1", components=COMPONENTS, metrics={})
    assert client.post_result("DESCRIPTION", param) is None  # dropped after max_time, not hung
    assert time.monotonic() - started < HANG_BOUND
    assert server.connections >= 2  # each attempt was cut, then retried
    assert any("no reply in the time allowed" in r.getMessage() for r in caplog.records)
    # The abandoned reads end too: no thread stays behind reading the drip.
    wait_until(lambda: not _readers("DESCRIPTION"), HANG_BOUND, what="the abandoned reads ended")
    assert _readers("DESCRIPTION") == []


@pytest.mark.timeout(60)
def test_an_endless_reply_is_read_no_further_than_the_bound(raw_server, client_for, caplog) -> None:
    server = raw_server(_endless)
    stop = threading.Event()
    client = client_for(base_url=server.url, backoff=(0.05, 0.2, 2.0), stop=stop)
    poller = threading.Thread(target=client.whats_next, daemon=True)
    poller.start()
    try:
        wait_until(lambda: server.connections >= 3, HANG_BOUND, what="three connections, each a bad reply")
    finally:
        stop.set()
    poller.join(HANG_BOUND)
    assert not poller.is_alive()
    assert server.connections >= 3  # a bad reply each time, polled again
    assert any(f"larger than {MAX_REPLY_BYTES} bytes" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(30)
def test_a_body_that_cannot_be_json_is_never_sent(scripted, client_for, history, caplog) -> None:
    server = scripted([])
    client = client_for(server)
    param = {"status": "ok", "reason": "success", "cmd_uid": "c1", "metrics": {}, "x": float("nan")}
    assert client.post_result("MEASUREMENT", param) is None
    assert history(server, "MEASUREMENT") == []
    assert any("not sent" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


@pytest.mark.timeout(60)
def test_a_streak_of_unexpected_cmd_uid_slows_polling_until_a_result_is_taken(
    scripted, client_for, history, caplog
) -> None:
    script = [{"cmd": "DESCRIBE", "result_reply": "invalid"} for _ in range(CONFLICT_STREAK)]
    server = scripted([*script, {"cmd": "DESCRIBE"}, {"cmd": "DESCRIBE"}])
    guard = IdentityGuard("key", "the test identity", backoff_max=0.4, path=None)
    client = client_for(server, backoff=(0.05, 0.4, 3.0))
    client.watcher = guard
    for n in range(CONFLICT_STREAK + 2):
        command = client.whats_next()
        status = client.post_result(
            "DESCRIPTION", description_result(command.cmd_uid, components={}, metrics={})
        )
        expected = "invalid" if n < CONFLICT_STREAK else "ok"
        assert status is not None and status.status == expected
        if n == CONFLICT_STREAK - 1:
            assert guard.conflict is not None and "3 commands in a row" in guard.conflict
    assert guard.conflict is None  # the first result taken ended it
    entries = [e for e in history(server) if e["event"] in ("WHATS_NEXT", "DESCRIPTION")]
    gaps = [b["at"] - a["at"] for a, b in zip(entries, entries[1:], strict=False)]
    # The poll after the streak waited backoff.max; the one after the taken result did not have to.
    conflicted_poll = 2 * CONFLICT_STREAK - 1
    assert gaps[conflicted_poll] >= 0.4
    assert any("identity conflict" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
