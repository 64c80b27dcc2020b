"""The optimizer client over TLS and through proxies: a real embedded optimizer serving HTTPS with a
self-signed certificate made here (openssl), ``settings.ca_bundle`` / ``ssl_verify``, and a real
CONNECT proxy on loopback named by ``HTTPS_PROXY`` (``NO_PROXY`` bypassing it)."""

from __future__ import annotations

import logging
import select
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from servo_actors.config.optimizer_section import OptimizerConfig, Settings
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.optimizer.server import OptimizerServer
from servo_actors.protocol.client import OptimizerClient

APP = "example.com/web"
OPENSSL_TIMEOUT = 60.0
PROXY_JOIN_TIMEOUT = 5.0
PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
NO_PROXY_ENV = ("NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def _no_proxy_or_ca_from_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_ENV, *NO_PROXY_ENV, "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=OPENSSL_TIMEOUT,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[OptimizerServer]:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    plan = {"app": APP, "script": [{"cmd": "SLEEP", "param": {"duration": 1}}]}
    server = OptimizerServer(ScriptedDriver.from_plan(plan), app=APP, tls=context).start()
    yield server
    server.stop()


def client(server: OptimizerServer, **settings: object) -> OptimizerClient:
    config = Settings(
        timeouts={"connect": 2, "read": 5}, backoff={"min": 0.05, "max": 0.2, "max_time": 1}, **settings
    )  # type: ignore[arg-type]
    return OptimizerClient(OptimizerConfig(id=APP, base_url=server.url), config)


@pytest.mark.timeout(60)
def test_a_self_signed_certificate_is_refused_by_default(tls_server, caplog) -> None:
    assert tls_server.url.startswith("https://")
    with client(tls_server) as c:
        assert c.goodbye("test", timeout=5) is None
    assert "certificate verify failed" in caplog.text.lower() or "ssl" in caplog.text.lower()
    assert tls_server.state()["history"] == []


@pytest.mark.timeout(60)
def test_ca_bundle_trusts_the_certificate(tls_server, certificate) -> None:
    with client(tls_server, ca_bundle=str(certificate[0])) as c:
        status = c.hello()
    assert status is not None and status.status == "ok"
    assert [entry["event"] for entry in tls_server.state()["history"]] == ["HELLO"]


@pytest.mark.timeout(60)
def test_ca_bundle_wins_over_requests_ca_bundle_from_the_environment(
    tls_server, certificate, monkeypatch
) -> None:
    # requests lets REQUESTS_CA_BUNDLE override a session's verify; the client passes it per request.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/bundle.pem")
    with client(tls_server, ca_bundle=str(certificate[0])) as c:
        assert c.hello() is not None


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_ssl_verify_false_skips_the_check_with_a_warning(tls_server, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="servo_actors.protocol")
    with client(tls_server, ssl_verify=False) as c:
        status = c.hello()
    assert status is not None and status.status == "ok"
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "ssl_verify is false" in r.message
    ]
    assert len(warnings) == 1 and tls_server.url in warnings[0].message


def test_ca_bundle_must_be_a_readable_file_and_not_beside_ssl_verify_false(tmp_path, certificate) -> None:
    with pytest.raises(ValidationError, match="not a readable file"):
        Settings(ca_bundle=str(tmp_path / "missing.pem"))
    with pytest.raises(ValidationError, match="set one"):
        Settings(ca_bundle=str(certificate[0]), ssl_verify=False)
    assert Settings(ca_bundle=str(certificate[0])).tls_verify == str(certificate[0])
    assert Settings(ssl_verify=False).tls_verify is False
    assert Settings().tls_verify is True


class ConnectProxy:
    """An HTTP CONNECT proxy on loopback: tunnels each connection, records where to."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target, *args) -> None:  # type: ignore[no-untyped-def]
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self._spawn(self._tunnel, conn)

    def _tunnel(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target = head.split(b" ")[:2]
            if method != b"CONNECT":
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            self.targets.append(target.decode())
            host, port = target.decode().rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5) as upstream:
                conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                while not self._stop.is_set():
                    ready, _, _ = select.select([conn, upstream], [], [], 0.1)
                    for sock in ready:
                        data = sock.recv(65536)
                        if not data:
                            return
                        (upstream if sock is conn else conn).sendall(data)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(PROXY_JOIN_TIMEOUT)
        assert not any(thread.is_alive() for thread in self._threads)


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    running = ConnectProxy()
    yield running
    running.close()


@pytest.mark.timeout(60)
def test_https_proxy_from_the_environment_carries_the_requests(
    tls_server, certificate, proxy, monkeypatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    with client(tls_server, ca_bundle=str(certificate[0])) as c:
        assert c.hello() is not None
    port = tls_server.url.rsplit(":", 1)[1]
    assert proxy.targets and set(proxy.targets) == {f"127.0.0.1:{port}"}


@pytest.mark.timeout(60)
def test_no_proxy_lets_loopback_bypass_the_proxy(tls_server, certificate, monkeypatch) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}"  # nothing listens once closed
    monkeypatch.setenv("HTTPS_PROXY", dead)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with client(tls_server, ca_bundle=str(certificate[0])) as c:
        assert c.hello() is not None
