"""Replace a pod by one of the same name, again and again, on the real local cluster, and count the
new pods that something other than this loop deleted: for tests/kube_cluster/test_kube_cluster_pod_replace.py
and scripts/check_kube_pod_replace.py.

::

    record = replace_pods(cluster, namespace, cycles=100)
    assert record.killed == []          # uids of new pods deleted by someone else (kwok's stale delete)

One cycle is what the kubernetes connector's tuning strategy does to its tuning pod: delete the pod
(default grace period, with its uid as precondition), wait until it is gone, create a pod of the
same name at once, wait until it runs. A pod counts as killed when a watch shows it terminating or
gone before this loop sent its delete.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests
from kube_local import REQUEST_TIMEOUT, LocalCluster

NAME = "same-name"
NODE = "kwok-node-0"
"""Bound at creation: the scheduler adds nothing to the race, and skipping it saves CPU."""
STEP_TIMEOUT = 30.0
"""Generous bound on one step (running, gone) on 2 busy cores; kwok takes milliseconds."""
WATCH_SECONDS = 1
"""The server-side bound of each watch request (timeoutSeconds): the thread resumes from the last
resourceVersion when one ends, and sees ``stop`` within this (closing a response another thread is
reading blocks until the server next sends something)."""
IDLE = 0.005


@dataclass
class PodLife:
    uid: str
    running: bool = False
    terminating: bool = False
    gone: bool = False


@dataclass
class ReplaceRecord:
    cycles: int = 0
    killed: list[str] = field(default_factory=list)
    """uids of pods that were terminating or gone before this loop deleted them."""
    seconds: float = 0.0


class PodWatch:
    """One watch on the pods named ``name`` in ``namespace``, in a thread: each uid's life so far."""

    def __init__(self, cluster: LocalCluster, namespace: str, name: str) -> None:
        self._cluster = cluster
        self._path = f"/api/v1/namespaces/{namespace}/pods"
        self._name = name
        self._lock = threading.Lock()
        self._lives: dict[str, PodLife] = {}
        self._stop = threading.Event()
        self._started = threading.Event()
        self._error: str | None = None
        self._session = requests.Session()
        self._session.verify = str(cluster.dir / "pki" / "ca.crt")
        self._session.cert = (str(cluster.dir / "pki" / "admin.crt"), str(cluster.dir / "pki" / "admin.key"))
        self._session.trust_env = False
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> PodWatch:
        self._thread.start()
        if not self._started.wait(STEP_TIMEOUT):
            raise AssertionError(f"the pod watch did not start within {STEP_TIMEOUT} s")
        self.life("")  # raises if the watch failed to start
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WATCH_SECONDS + 2 * REQUEST_TIMEOUT)
        self._session.close()

    def life(self, uid: str) -> PodLife | None:
        with self._lock:
            if self._error is not None:
                raise AssertionError(f"the pod watch failed: {self._error}")
            life = self._lives.get(uid)
            return None if life is None else PodLife(**vars(life))

    def _run(self) -> None:
        try:
            listed = self._cluster.get(f"{self._path}?fieldSelector=metadata.name%3D{self._name}")
            version = listed["metadata"]["resourceVersion"]
            while not self._stop.is_set():
                version = self._follow(version)
        except (requests.RequestException, ValueError, KeyError, AssertionError) as error:
            if not self._stop.is_set():
                with self._lock:
                    self._error = repr(error)
                self._started.set()  # start() then reports the error

    def _follow(self, version: str) -> str:
        params = {
            "watch": "1",
            "fieldSelector": f"metadata.name={self._name}",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        with self._session.get(
            self._cluster.server + self._path,
            params=params,
            stream=True,
            timeout=(REQUEST_TIMEOUT, WATCH_SECONDS + REQUEST_TIMEOUT),
        ) as response:
            response.raise_for_status()
            self._started.set()
            return self._read(response, version)

    def _read(self, response: requests.Response, version: str) -> str:
        for line in response.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            if event["type"] == "ERROR":
                raise ValueError(f"watch error: {event['object'].get('message')}")
            pod = event["object"]
            version = pod["metadata"]["resourceVersion"]
            if event["type"] == "BOOKMARK":
                continue
            self._note(event["type"], pod)
        return version

    def _note(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            life = self._lives.setdefault(uid, PodLife(uid))
            life.running = life.running or pod.get("status", {}).get("phase") == "Running"
            life.terminating = life.terminating or "deletionTimestamp" in pod["metadata"] or kind == "DELETED"
            life.gone = life.gone or kind == "DELETED"


def pod_manifest(name: str = NAME) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "registry.local/app:1"}]},
    }  # fmt: skip


def _wait(watch: PodWatch, uid: str, done: str) -> PodLife:
    deadline = time.monotonic() + STEP_TIMEOUT
    while True:
        life = watch.life(uid)
        if life is not None and (getattr(life, done) or life.gone):
            return life
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {uid}: not {done} within {STEP_TIMEOUT} s (last seen: {life})")
        time.sleep(IDLE)


def replace_pods(cluster: LocalCluster, namespace: str, cycles: int, name: str = NAME) -> ReplaceRecord:
    """``cycles`` times: create the pod, wait until it runs, delete it, wait until it is gone."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    record = ReplaceRecord()
    watch = PodWatch(cluster, namespace, name).start()
    started = time.monotonic()
    try:
        for _ in range(cycles):
            created = cluster.request("POST", path, pod_manifest(name))
            if created.status_code != 201:
                raise AssertionError(f"create {name}: {created.status_code} {created.text[:300]}")
            uid = created.json()["metadata"]["uid"]
            life = _wait(watch, uid, "running")
            if life.terminating:
                record.killed.append(uid)
            else:
                body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}
                deleted = cluster.request("DELETE", f"{path}/{name}", body)
                if deleted.status_code == 404 or deleted.status_code == 409:  # gone, or another pod meanwhile
                    record.killed.append(uid)
                elif deleted.status_code not in (200, 202):
                    raise AssertionError(f"delete {name}: {deleted.status_code} {deleted.text[:300]}")
            _wait(watch, uid, "gone")
            record.cycles += 1
    finally:
        record.seconds = time.monotonic() - started
        watch.stop()
    return record
