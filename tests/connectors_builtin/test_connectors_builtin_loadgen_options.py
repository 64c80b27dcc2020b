"""``loadgen``'s options from servox's vegeta: a targets file (http and json formats), insecure TLS
against a real HTTPS server with a certificate of a throw-away CA, keep-alive off."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kube_tls import make_pki
from pydantic import ValidationError

from servo_actors.connectors.base import Control
from servo_actors.connectors.loadgen import LoadgenConfig, LoadgenConnector

STOP_TIMEOUT = 10.0


def connector(**config: Any) -> LoadgenConnector:
    return LoadgenConnector("load", {"progress_interval": "250ms", "rate": 20, "concurrency": 1, **config})


def recording(seen: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    """A ``respond`` for the http_server fixture that records each request's path and client port."""

    def respond(handler: BaseHTTPRequestHandler, number: int, release: threading.Event) -> tuple[int, bytes]:
        seen.append({"path": handler.path, "port": handler.client_address[1], "method": handler.command})
        return 200, b"ok"

    return respond


@pytest.mark.timeout(60)
def test_a_targets_file_is_sent_in_turn(http_server, progress, tmp_path: Path) -> None:
    paths: list[dict[str, Any]] = []
    server = http_server(recording(paths))
    (tmp_path / "bodies").mkdir()
    (tmp_path / "bodies" / "cart.json").write_text('{"item": 42}', encoding="utf-8")
    targets = tmp_path / "targets.txt"
    targets.write_text(
        f"# two targets\nGET {server.url}home\nX-Page: home\n\n"
        f"POST {server.url}cart\nContent-Type: application/json\n@bodies/cart.json\n",
        encoding="utf-8",
    )
    load = connector(targets_file=str(targets), headers={"X-Common": "yes", "X-Page": "default"})
    result = load.measure(["throughput"], Control(duration=0.6), progress)
    assert result["annotations"]["loadgen"].endswith(f"requests to 2 target(s) from {targets}")
    assert [p["path"] for p in paths[:4]] == ["/home", "/cart", "/home", "/cart"]
    home, cart = server.requests[0], server.requests[1]
    assert (home["method"], home["headers"]["X-Page"], home["headers"]["X-Common"]) == ("GET", "home", "yes")
    assert (cart["method"], cart["body"], cart["headers"]["X-Page"]) == ("POST", b'{"item": 42}', "default")


@pytest.mark.timeout(60)
def test_a_json_targets_file(http_server, progress, tmp_path: Path) -> None:
    paths: list[dict[str, Any]] = []
    server = http_server(recording(paths))
    targets = tmp_path / "targets.json"
    body = base64.b64encode(b"payload").decode()
    lines = [
        {"method": "PUT", "url": f"{server.url}a", "header": {"X-A": ["1", "2"]}, "body": body},
        {"method": "GET", "url": f"{server.url}b"},
    ]
    targets.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    connector(targets_file=str(targets), targets_format="json").measure(
        ["throughput"], Control(duration=0.4), progress
    )
    assert [p["path"] for p in paths[:2]] == ["/a", "/b"]
    assert server.requests[0]["body"] == b"payload" and server.requests[0]["headers"]["X-A"] == "1, 2"


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({}, "give url or targets_file"),
        ({"url": "http://127.0.0.1:9/", "targets_file": "t.txt"}, "give url or targets_file"),
        ({"targets_file": "missing.txt"}, "no such targets file"),
        ({"targets_file": "t.txt", "method": "POST"}, "leave those out"),
    ],
)
def test_url_or_targets_file_and_errors_name_the_problem(
    config: dict[str, Any], words: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("GET http://127.0.0.1:9/\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=words):
        LoadgenConfig.model_validate(config)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("X-Header: before any target\n", "line 1: a target starts with METHOD URL"),
        ("GET http://127.0.0.1:9/\nnot a header\n", "line 2: 'not a header' is not a header"),
        ("TRACE http://127.0.0.1:9/\n", "line 1: 'TRACE' is not one of"),
        ("GET http://127.0.0.1:9/\n@nowhere.json\n", "no such body file"),
        ("# nothing\n", "no target in it"),
    ],
)
def test_a_bad_targets_file_names_the_line(text: str, words: str, tmp_path: Path) -> None:
    targets = tmp_path / "targets.txt"
    targets.write_text(text, encoding="utf-8")
    with pytest.raises(ValidationError, match=words):
        LoadgenConfig.model_validate({"targets_file": str(targets)})


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """An HTTPS server on loopback whose certificate is signed by a CA no client trusts."""
    context = make_pki(tmp_path / "pki").server_context()
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}/", seen
    server.shutdown()
    server.server_close()
    thread.join(STOP_TIMEOUT)
    assert not thread.is_alive()


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_sends_to_a_server_whose_certificate_is_not_trusted(https_server, progress, caplog) -> None:
    url, seen = https_server
    checked = connector(url=url).measure(["error_rate"], Control(duration=0.4), progress)
    assert checked["metrics"]["error_rate"]["value"] == 1.0 and seen == []
    caplog.set_level(logging.WARNING, logger="servo_actors.connectors.loadgen")
    unchecked = connector(url=url, insecure=True).measure(["error_rate"], Control(duration=0.4), progress)
    assert unchecked["metrics"]["error_rate"]["value"] == 0.0 and seen
    assert any("insecure" in r.message and url in r.message for r in caplog.records)


@pytest.mark.timeout(60)
def test_keepalive_false_opens_a_connection_per_request(http_server, progress) -> None:
    kept: list[dict[str, Any]] = []
    closed: list[dict[str, Any]] = []
    kept_server, closed_server = http_server(recording(kept)), http_server(recording(closed))
    connector(url=kept_server.url).measure(["throughput"], Control(duration=0.5), progress)
    connector(url=closed_server.url, keepalive=False).measure(["throughput"], Control(duration=0.5), progress)
    assert len(kept) >= 3 and len({r["port"] for r in kept}) == 1
    assert len(closed) >= 3 and len({r["port"] for r in closed}) == len(closed)


def slow(seen: list[dict[str, Any]], delay: float):  # type: ignore[no-untyped-def]
    """A ``respond`` that takes ``delay`` seconds and records each request's client port."""

    def respond(handler: BaseHTTPRequestHandler, number: int, release: threading.Event) -> tuple[int, bytes]:
        seen.append({"port": handler.client_address[1]})
        release.wait(delay)
        return 200, b"ok"

    return respond


@pytest.mark.timeout(60)
def test_max_concurrency_adds_threads_while_the_rate_is_not_held(http_server, progress) -> None:
    # One thread answers at most 10 requests/s from a server taking 100 ms: a rate of 40 needs more.
    fixed_seen: list[dict[str, Any]] = []
    grown_seen: list[dict[str, Any]] = []
    fixed_server, grown_server = http_server(slow(fixed_seen, 0.1)), http_server(slow(grown_seen, 0.1))
    connector(url=fixed_server.url, rate=40).measure(["throughput"], Control(duration=1.0), progress)
    grown = connector(url=grown_server.url, rate=40, max_concurrency=6).measure(
        ["throughput"], Control(duration=1.0), progress
    )
    assert len({r["port"] for r in fixed_seen}) == 1  # each thread has one connection
    assert 2 <= len({r["port"] for r in grown_seen}) <= 6
    assert "threads grew to" in grown["annotations"]["loadgen"]


def test_max_concurrency_is_not_below_concurrency() -> None:
    with pytest.raises(ValidationError, match="is below concurrency"):
        LoadgenConfig.model_validate({"url": "http://127.0.0.1:9/", "concurrency": 4, "max_concurrency": 2})
