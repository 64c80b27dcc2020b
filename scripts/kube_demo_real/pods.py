"""The app's ready pods, read from the API server: their IPs and labels, for the balancer (where
the load goes) and for Prometheus's targets (what it scrapes).

The demo reads them itself because the node offers no Service VIPs (no kube-proxy) and Debian's
Prometheus (2.42.0+ds) is built without Kubernetes discovery: a `kubernetes_sd_configs` section
fails with "field kubernetes_sd_configs not found in type config.ScrapeConfig". So the pods that
`kubernetes_sd_configs` (role pod) would find are listed here and handed to Prometheus through
`file_sd_configs`, labelled as its relabelling would label them (namespace, pod, the pod's labels)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REFRESH = 1.0
"""Seconds between two reads of the pods."""
KUBECTL_TIMEOUT = 10.0


@dataclass(frozen=True, order=True)
class Pod:
    address: str  # ip:port
    name: str
    labels: tuple[tuple[str, str], ...]


class ReadyPods:
    """Reads the ready pods of ``selector`` every REFRESH seconds (at once after ``stale``);
    ``addresses`` is the latest list; each listener is called with every new list."""

    def __init__(self, kubectl: Path, kubeconfig: Path, namespace: str, selector: str, port: int) -> None:
        self.argv = [str(kubectl), "--kubeconfig", str(kubeconfig), "--request-timeout", "5s", "-n", namespace,
                     "get", "pods", "-l", selector, "-o", "json"]  # fmt: skip
        self.namespace = namespace
        self.port = port
        self.pods: list[Pod] = []
        self.listeners: list[Callable[[list[Pod]], None]] = []
        self.stopped = threading.Event()
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="ready-pods", daemon=True)

    def start(self) -> None:
        self.refresh()
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        self.thread.join(KUBECTL_TIMEOUT + REFRESH)

    def stale(self) -> None:
        self.wake.set()

    def refresh(self) -> None:
        try:
            done = subprocess.run(
                self.argv, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            return
        if done.returncode != 0:
            return
        found = sorted(
            Pod(f"{pod['status']['podIP']}:{self.port}", pod["metadata"]["name"],
                tuple(sorted((pod["metadata"].get("labels") or {}).items())))
            for pod in json.loads(done.stdout).get("items", [])
            if pod.get("status", {}).get("podIP") and not pod["metadata"].get("deletionTimestamp")
            and any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in pod["status"].get("conditions") or [])
        )  # fmt: skip
        if found != self.pods:
            self.pods = found
            for listener in self.listeners:
                listener(found)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            self.wake.wait(REFRESH)
            self.wake.clear()
            if not self.stopped.is_set():
                self.refresh()


class FileTargets:
    """Writes the pods as Prometheus file_sd targets (atomically: a rename), labelled as
    kubernetes_sd's relabelling would: ``namespace``, ``pod`` and each pod label (sanitized)."""

    def __init__(self, path: Path, namespace: str) -> None:
        self.path = path
        self.namespace = namespace

    def __call__(self, pods: list[Pod]) -> None:
        targets = [
            {"targets": [pod.address],
             "labels": {**{re.sub(r"[^A-Za-z0-9_]", "_", k): v for k, v in pod.labels},
                        "namespace": self.namespace, "pod": pod.name}}
            for pod in pods
        ]  # fmt: skip
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(targets))
        os.replace(partial, self.path)
