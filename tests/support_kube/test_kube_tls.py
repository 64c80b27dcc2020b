"""An emulated cluster over https: its CA in the kubeconfig, and optionally a client certificate."""

from __future__ import annotations

import base64
from pathlib import Path

import kube_tls
import pytest
import requests
import yaml
from kube_cluster import KubeCluster

HANG_BOUND = 10.0
WEB = "/apis/apps/v1/namespaces/default/deployments/web"


def user_and_ca(cluster: KubeCluster, tmp_path: Path) -> tuple[dict, Path]:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    ca = tmp_path / "ca-from-kubeconfig.crt"
    ca.write_bytes(base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]))
    return config["users"][0]["user"], ca


def test_https_with_the_kubeconfig_ca_and_token(tmp_path: Path) -> None:
    cluster = KubeCluster.start(tmp_path, tls=True)
    try:
        cluster.add_deployment("web")
        assert cluster.url.startswith("https://127.0.0.1:")
        user, ca = user_and_ca(cluster, tmp_path)
        headers = {"Authorization": f"Bearer {user['token']}"}
        answer = requests.get(cluster.url + WEB, headers=headers, verify=str(ca), timeout=HANG_BOUND)
        assert answer.status_code == 200
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(
                cluster.url + WEB, headers=headers, timeout=HANG_BOUND
            )  # the system CAs do not know it
        assert requests.get(cluster.url + WEB, verify=str(ca), timeout=HANG_BOUND).status_code == 401
    finally:
        cluster.stop()


def test_a_client_certificate_authenticates_without_a_token(tmp_path: Path) -> None:
    cluster = KubeCluster.start(tmp_path, client_cert=True)
    try:
        cluster.add_deployment("web")
        user, ca = user_and_ca(cluster, tmp_path)
        assert "token" not in user
        cert, key = tmp_path / "client.crt", tmp_path / "client.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        answer = requests.get(
            cluster.url + WEB, cert=(str(cert), str(key)), verify=str(ca), timeout=HANG_BOUND
        )
        assert answer.status_code == 200
        assert requests.get(cluster.url + WEB, verify=str(ca), timeout=HANG_BOUND).status_code == 401
        cluster.down()
        cluster.up()
        again = requests.get(
            cluster.url + WEB, cert=(str(cert), str(key)), verify=str(ca), timeout=HANG_BOUND
        )
        assert again.json()["metadata"]["name"] == "web"
        stranger = kube_tls.make_pki(tmp_path / "stranger")  # a client certificate of another CA
        # TLS 1.3 refuses it after the client's side of the handshake: a TLS error or a dropped connection.
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(
                cluster.url + WEB,
                cert=(str(stranger.client_cert), str(stranger.client_key)),
                verify=str(ca),
                timeout=HANG_BOUND,
            )
    finally:
        cluster.stop()
