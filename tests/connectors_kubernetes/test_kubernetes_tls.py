"""TLS as kubeconfigs describe it: CA data, client certificate data (handed over in memory), and
insecure-skip-tls-verify, against a real https server on loopback with certificates made by openssl."""

from __future__ import annotations

import base64
import http.server
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from k8s_objects import WEB_CONTAINER, connector_config
from kube_cluster import FailureMode, KubeCluster

from servo_actors.connectors.base import Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.connectors.kubernetes.client import VERSION_PATH, KubeClient, KubeUnreachable
from servo_actors.connectors.kubernetes.kubeconfig import from_kubeconfig

OPENSSL_TIMEOUT = 30.0

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=OPENSSL_TIMEOUT)


def _issue(directory: Path, name: str, subject: str, extension: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)  # fmt: skip
    (directory / f"{name}.ext").write_text(extension + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext", cwd=directory)  # fmt: skip


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=test-ca", cwd=tmp_path)  # fmt: skip
    _issue(tmp_path, "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1")
    _issue(tmp_path, "named", "/CN=kube.internal", "subjectAltName=DNS:kube.internal")
    _issue(tmp_path, "client", "/CN=servo", "extendedKeyUsage=clientAuth")
    return tmp_path


class _Version(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        peer = self.connection.getpeercert()
        body = json.dumps(
            {"gitVersion": "v1.30.0", "client": dict(x[0] for x in peer["subject"])["commonName"]}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def _serve(pki: Path, certificate: str) -> Iterator[str]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / f"{certificate}.crt", pki / f"{certificate}.key")
    context.load_verify_locations(pki / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Version)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def https_server(pki: Path) -> Iterator[str]:
    """An https server that requires a client certificate signed by the test CA."""
    yield from _serve(pki, "server")


@pytest.fixture
def named_server(pki: Path) -> Iterator[str]:
    """The same, with a certificate for kube.internal only (not for its address)."""
    yield from _serve(pki, "named")


def _kubeconfig(path: Path, server: str, cluster: dict, user: dict) -> Path:
    data = {
        "current-context": "tls",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "tls", "context": {"cluster": "c", "user": "u"}}],
    }
    path.write_text(yaml.safe_dump(data))
    return path


def _data(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_ca_and_client_certificate_data(pki: Path, https_server: str) -> None:
    config = _kubeconfig(
        pki / "kubeconfig", https_server,
        {"certificate-authority-data": _data(pki / "ca.crt")},
        {"client-certificate-data": _data(pki / "client.crt"), "client-key-data": _data(pki / "client.key")},
    )  # fmt: skip
    client = KubeClient(from_kubeconfig([config], None), request_timeout=5)
    try:
        assert client.get(VERSION_PATH) == {"gitVersion": "v1.30.0", "client": "servo"}
    finally:
        client.close()


def test_certificate_files_relative_to_the_kubeconfig(pki: Path, https_server: str) -> None:
    config = _kubeconfig(pki / "kubeconfig", https_server, {"certificate-authority": "ca.crt"},
                         {"client-certificate": "client.crt", "client-key": "client.key"})  # fmt: skip
    client = KubeClient(from_kubeconfig([config], None), request_timeout=5)
    try:
        assert client.get(VERSION_PATH)["client"] == "servo"
    finally:
        client.close()


def test_an_unknown_server_certificate_is_refused_unless_told_to_skip(pki: Path, https_server: str) -> None:
    client_cert = {"client-certificate": "client.crt", "client-key": "client.key"}
    strict = KubeClient(from_kubeconfig([_kubeconfig(pki / "a", https_server, {}, client_cert)], None), 5)
    try:
        with pytest.raises(KubeUnreachable, match="TLS|certificate|SSL"):
            strict.get(VERSION_PATH)
    finally:
        strict.close()
    skipping = _kubeconfig(pki / "b", https_server, {"insecure-skip-tls-verify": True}, client_cert)
    lax = KubeClient(from_kubeconfig([skipping], None), 5)
    try:
        assert lax.get(VERSION_PATH)["gitVersion"] == "v1.30.0"
    finally:
        lax.close()


def test_tls_server_name_checks_the_certificate_against_that_name(pki: Path, named_server: str) -> None:
    client_cert = {"client-certificate": "client.crt", "client-key": "client.key"}
    cluster = {"certificate-authority": "ca.crt"}
    by_address = KubeClient(
        from_kubeconfig([_kubeconfig(pki / "a", named_server, cluster, client_cert)], None), 5
    )
    try:
        with pytest.raises(KubeUnreachable, match="TLS|certificate|SSL"):
            by_address.get(VERSION_PATH)
    finally:
        by_address.close()
    named = {**cluster, "tls-server-name": "kube.internal"}
    by_name = KubeClient(from_kubeconfig([_kubeconfig(pki / "b", named_server, named, client_cert)], None), 5)
    try:
        assert by_name.get(VERSION_PATH)["client"] == "servo"
    finally:
        by_name.close()


@pytest.mark.parametrize("client_cert", [False, True], ids=["token", "client-certificate"])
def test_check_describe_and_adjust_over_https(tmp_path: Path, progress, client_cert: bool) -> None:
    """The whole connector (watches included) against the emulated cluster served over https."""
    cluster = KubeCluster.start(tmp_path / "cluster", tls=True, client_cert=client_cert)
    try:
        cluster.add_deployment("web", containers=[WEB_CONTAINER], replicas=2)
        cluster.controller(FailureMode.HEALTHY, rollout_seconds=0.2)
        assert cluster.url.startswith("https://")
        connector = KubernetesConnector("k8s", connector_config(cluster, settlement="1s"))
        results = connector.check()
        assert all(r["success"] for r in results), results
        assert connector.describe()["components"]["web"]["settings"]["cpu"]["value"] == 0.5
        result = connector.adjust({"web": {"settings": {"cpu": {"value": 1.5}}}}, Control(), progress)
        assert result["web"]["settings"]["cpu"]["value"] == 1.5
    finally:
        cluster.stop()
