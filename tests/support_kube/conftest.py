"""Fixtures for the emulated cluster's own tests: the cluster and a plain HTTP client for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kube_cluster import KubeCluster

HTTP_TIMEOUT = 10.0


class Api:
    """requests against the emulated API server with the kubeconfig's token (what any client sends)."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.base = cluster.url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {cluster.token}"

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", HTTP_TIMEOUT)
        return self.session.request(method, self.base + path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def patch(
        self,
        path: str,
        body: Any,
        content_type: str = "application/strategic-merge-patch+json",
        **kwargs: Any,
    ) -> requests.Response:
        return self.request("PATCH", path, json=body, headers={"Content-Type": content_type}, **kwargs)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KubeCluster]:
    started = KubeCluster.start(tmp_path)
    try:
        yield started
    finally:
        started.stop()
    assert started.controller_errors == [], started.controller_errors


@pytest.fixture
def api(cluster: KubeCluster) -> Iterator[Api]:
    client = Api(cluster)
    yield client
    client.session.close()
