"""Faults of the real control plane under a running servo (`servo-actors run`, the kubernetes connector
tuning a Deployment with an HPA): the API server killed during a rollout wait, etcd stopped for a
few seconds, and 409 Conflicts from a real concurrent writer.

The components are stopped and started by ``scripts/kube-cluster stop/start/restart COMPONENT`` (by
the PIDs its state.json records) on the session's cluster; each test starts again whatever it
stopped, even when it fails. One namespace, application and servo serve the whole module. The
Deployment has ``minReadySeconds``, so each rollout lasts a few seconds and a fault can be put in
the middle of its wait.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kube_local import LocalCluster
from kube_real import (
    CommandQueue,
    Exchange,
    ServoRun,
    adjust_command,
    api_ready,
    cluster_settings,
    connector,
    control_plane,
    create_app,
    deployment_path,
    described_settings,
    measure_command,
    same_settings,
    servo_config,
    start_stopped,
)
from waiting import wait_until

from servo_actors.connectors.kubernetes.adjustment import MAX_CONFLICT_RETRIES

pytestmark = pytest.mark.kube

MIN_READY_SECONDS = 4
ROLLOUT_TIMEOUT = 60.0
"""The connector's ``timeout``: a rollout takes MIN_READY_SECONDS plus a second or two, but after
the API server comes back the real controller-manager's watches take ~13 s to resume (measured)."""
SHORT_ROLLOUT_TIMEOUT = 8.0
"""The ``timeout`` of the servo whose API server stays down past it."""
REQUEST_TIMEOUT = 2.0
"""The connector's ``request_timeout``."""
PROGRESS_TIMEOUT = 60.0
"""Bound on the wait for an ADJUST to reach its rollout wait (a couple of seconds in practice)."""
RECOVERY_TIMEOUT = 90.0
"""Bound on the API server being ready again after a fault (its etcd client reconnects with back-off)."""
ETCD_DOWN = 4.0
"""Seconds etcd stays stopped: the fault itself, not a wait for a condition."""
CONFLICT_ADJUSTS = 8
"""ADJUSTs tried under the concurrent writer until one meets a 409 (the first almost always does)."""
USER_AGENT = "servo-actors-kubernetes"

VALUES = [
    {
        "cpu": 0.2,
        "memory": 0.25,
        "GOGC": 120.0,
        "min_replicas": 1,
        "max_replicas": 3,
        "target_cpu_utilization": 60,
    },
    {
        "cpu": 0.3,
        "memory": 0.3125,
        "GOGC": 150.0,
        "min_replicas": 2,
        "max_replicas": 4,
        "target_cpu_utilization": 50,
    },
]


class Faulty:
    """The module's namespace and application, and one servo with its optimizer."""

    def __init__(
        self, cluster: LocalCluster, namespace: str, optimizer: CommandQueue, servo: ServoRun
    ) -> None:
        self.cluster, self.namespace, self.optimizer, self.servo = cluster, namespace, optimizer, servo
        self.turn = 0

    def next_values(self) -> dict[str, Any]:
        """Settings that differ from the cluster's, so every ADJUST rolls out."""
        self.turn += 1
        values = VALUES[self.turn % 2]
        if same_settings(values, cluster_settings(self.cluster, self.namespace)):
            values = VALUES[(self.turn + 1) % 2]
        return dict(values)

    def describe_matches(self) -> None:
        """A DESCRIBE is answered ok and reads what the cluster holds."""
        described = self.optimizer.run({"cmd": "DESCRIBE", "param": {}})
        assert described.status == "ok", f"{described.result}\n{self.servo.log()}"
        values = described_settings(described.result["descriptor"]["application"]["components"])  # type: ignore[index]
        holds = cluster_settings(self.cluster, self.namespace)
        assert same_settings(values, holds), f"described {values}, the cluster holds {holds}"


@contextlib.contextmanager
def servo_on(
    cluster: LocalCluster, namespace: str, directory: Path, rollout_timeout: float
) -> Iterator[Faulty]:
    """A servo (with its optimizer) tuning web in ``namespace``; stopped afterwards (exit 0 checked)."""
    optimizer = CommandQueue.serve()
    servo = None
    try:
        entry = connector(
            cluster, namespace, timeout=f"{rollout_timeout:g}s", request_timeout=f"{REQUEST_TIMEOUT:g}s"
        )
        servo = ServoRun.start(directory, servo_config(optimizer.server, entry))
        optimizer.context = servo.log
        yield Faulty(cluster, namespace, optimizer, servo)
    finally:
        if servo is not None:
            code = servo.stop()
            assert code == 0, servo.log()
        optimizer.stop()


@pytest.fixture(scope="module")
def namespace(kube_cluster: LocalCluster) -> Iterator[str]:
    """The module's namespace, with Deployment web (minReadySeconds) and its HPA."""
    name = kube_cluster.new_namespace("real-faults")
    try:
        create_app(kube_cluster, name, min_ready_seconds=MIN_READY_SECONDS)
        yield name
    finally:
        kube_cluster.delete_namespace(name)


@pytest.fixture(scope="module")
def faulty(
    kube_cluster: LocalCluster, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Faulty]:
    """The module's servo (``timeout`` ROLLOUT_TIMEOUT)."""
    with servo_on(
        kube_cluster, namespace, tmp_path_factory.mktemp("servo-faults"), ROLLOUT_TIMEOUT
    ) as running:
        yield running


@pytest.fixture
def whole_afterwards(kube_cluster: LocalCluster) -> Iterator[None]:
    """Whatever a test stopped is started again, and the API server is ready, before the next test."""
    yield
    start_stopped(kube_cluster)
    wait_until(
        lambda: api_ready(kube_cluster), RECOVERY_TIMEOUT, interval=0.2, what="the API server ready again"
    )


def in_rollout_wait(exchange: Exchange) -> bool:
    """The connector reported its rollout wait (kubectl's rule, ``web: ...``) in a progress post."""
    return any((post.get("message") or "").startswith("web: ") for post in list(exchange.progress))


def wait_for_rollout_wait(faulty: Faulty, exchange: Exchange) -> None:
    wait_until(
        lambda: in_rollout_wait(exchange) or exchange.finished.is_set(),
        PROGRESS_TIMEOUT, interval=0.02, what="the ADJUST in its rollout wait",
    )  # fmt: skip
    assert not exchange.finished.is_set(), f"the ADJUST ended before its rollout wait: {exchange.result}"


def test_api_server_killed_in_a_rollout_wait_and_down_past_its_timeout(
    kube_cluster: LocalCluster, namespace: str, tmp_path: Path, whole_afterwards: None
) -> None:
    """SIGKILL of the API server while the connector waits for a rollout; it stays down past the
    connector's ``timeout``: that ADJUST fails, saying the API server cannot be reached (and that the
    rollback could not be sent either); the servo goes on, and once the API server is back the next
    DESCRIBE reads the cluster as it is and a MEASURE succeeds. (An ADJUST succeeding across an API
    server restart is the next test: the real controller-manager's watches take 13-30 s to resume, so
    a rollout started right after the restart would outlast this servo's short ``timeout``.)"""
    with servo_on(kube_cluster, namespace, tmp_path / "servo", SHORT_ROLLOUT_TIMEOUT) as faulty:
        _killed_past_timeout(faulty)


def _killed_past_timeout(faulty: Faulty) -> None:
    faulty.describe_matches()
    exchange = faulty.optimizer.push(adjust_command(faulty.next_values()))
    wait_for_rollout_wait(faulty, exchange)
    control_plane(faulty.cluster, "stop", "kube-apiserver", kill=True)
    killed = time.monotonic()
    try:
        exchange.wait(SHORT_ROLLOUT_TIMEOUT + 10 * REQUEST_TIMEOUT + 30)
        took = time.monotonic() - killed
        result = exchange.result or {}
        print(f"ADJUST with the API server down: {json.dumps(result)} ({took:.1f} s after the kill)")
        assert result.get("status") == "failed", f"{result}\n{faulty.servo.log()}"
        assert result.get("reason") == "kubernetes-unreachable", result
        message = result.get("message") or ""
        assert "cannot reach the Kubernetes API at https://127.0.0.1:" in message, message
        assert "rollback failed" in message, message
        assert faulty.servo.alive(), faulty.servo.log()
    finally:
        control_plane(faulty.cluster, "start", "kube-apiserver")
    wait_until(lambda: api_ready(faulty.cluster), RECOVERY_TIMEOUT, interval=0.2, what="the API server ready")
    faulty.describe_matches()
    measured = faulty.optimizer.run(measure_command(1.0))
    assert measured.status == "ok", f"{measured.result}\n{faulty.servo.log()}"
    assert faulty.servo.alive(), faulty.servo.log()


def test_api_server_killed_in_a_rollout_wait_and_back_within_it(faulty: Faulty, whole_afterwards) -> None:
    """SIGKILL of the API server while the connector waits for a rollout, started again at once
    (`restart --kill`): the wait rides it out (a broken watch is read again, refused connections
    retried within ``timeout``) and the ADJUST succeeds with its values in the cluster."""
    values = faulty.next_values()
    exchange = faulty.optimizer.push(adjust_command(values))
    wait_for_rollout_wait(faulty, exchange)
    control_plane(faulty.cluster, "restart", "kube-apiserver", kill=True)
    exchange.wait()
    retried = [p.get("message") for p in exchange.progress if "retrying" in (p.get("message") or "")]
    print(
        f"ADJUST across an API server restart: {exchange.status}; progress while it was down: {retried[:3]}"
    )
    assert exchange.status == "ok", f"{exchange.result}\n{faulty.servo.log()}"
    holds = cluster_settings(faulty.cluster, faulty.namespace)
    assert same_settings(holds, values), f"adjusted to {values}, the cluster holds {holds}"
    faulty.describe_matches()


def test_etcd_stopped_for_a_few_seconds(faulty: Faulty, whole_afterwards) -> None:
    """etcd SIGKILLed for ETCD_DOWN seconds, twice. During a rollout wait: the API server holds the
    connector's requests until its ``request_timeout``, which the wait retries, and the ADJUST
    succeeds once etcd is back. During a DESCRIBE: it fails within a bound, saying the API server did
    not answer in time; the servo goes on, and the next DESCRIBE (etcd back) reads the cluster."""
    values = faulty.next_values()
    exchange = faulty.optimizer.push(adjust_command(values))
    wait_for_rollout_wait(faulty, exchange)
    control_plane(faulty.cluster, "stop", "etcd", kill=True)
    try:
        time.sleep(ETCD_DOWN)  # the outage itself
    finally:
        control_plane(faulty.cluster, "start", "etcd")
    exchange.wait()
    print(f"ADJUST across {ETCD_DOWN:g} s without etcd: {exchange.status}")
    assert exchange.status == "ok", f"{exchange.result}\n{faulty.servo.log()}"
    wait_until(lambda: api_ready(faulty.cluster), RECOVERY_TIMEOUT, interval=0.2, what="the API server ready")
    holds = cluster_settings(faulty.cluster, faulty.namespace)
    assert same_settings(holds, values), f"adjusted to {values}, the cluster holds {holds}"

    control_plane(faulty.cluster, "stop", "etcd", kill=True)
    try:
        started = time.monotonic()
        described = faulty.optimizer.run({"cmd": "DESCRIBE", "param": {}})
        took = time.monotonic() - started
    finally:
        control_plane(faulty.cluster, "start", "etcd")
    result = described.result or {}
    print(f"DESCRIBE without etcd: {json.dumps(result)} in {took:.1f} s")
    assert result.get("status") == "failed", result
    assert result.get("reason") == "kubernetes-timeout", result
    assert f"did not answer GET /apis/apps/v1/namespaces/{faulty.namespace}/deployments/web" in result.get(
        "message", ""
    ), result
    assert faulty.servo.alive(), faulty.servo.log()
    wait_until(lambda: api_ready(faulty.cluster), RECOVERY_TIMEOUT, interval=0.2, what="the API server ready")
    faulty.describe_matches()


def conflicts_met(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    """The connector's writes in ``namespace`` that the API server answered 409 (its audit log)."""
    found = []
    for line in cluster.audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            ref.get("namespace") == namespace
            and (event.get("userAgent") or "").startswith(USER_AGENT)
            and event.get("verb") == "patch"
            and (event.get("responseStatus") or {}).get("code") == 409
        ):
            found.append(event)
    return found


class Writer:
    """Another client writing the Deployment every WRITE_PAUSE seconds: a label, each write moving
    its resourceVersion on. (Not an annotation: the real API server bumps a Deployment's generation
    when its annotations change, as annotations are copied to its ReplicaSets, so an annotation
    written without pause keeps every rollout "waiting for the controller to see generation N".)"""

    LABEL = "example.com/concurrent-writer"
    WRITE_PAUSE = 0.005

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.cluster, self.path = cluster, deployment_path(namespace)
        self.writes = 0
        self.last: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="concurrent-writer", daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        session = requests.Session()
        session.verify = str(self.cluster.dir / "pki" / "ca.crt")
        session.cert = (
            str(self.cluster.dir / "pki" / "admin.crt"),
            str(self.cluster.dir / "pki" / "admin.key"),
        )
        session.trust_env = False
        headers = {"Content-Type": "application/merge-patch+json"}
        try:
            while not self._stop.wait(self.WRITE_PAUSE):
                value = f"w{self.writes}"
                body = json.dumps({"metadata": {"labels": {self.LABEL: value}}})
                response = session.patch(
                    self.cluster.server + self.path, data=body, headers=headers, timeout=10
                )
                if response.status_code == 200:
                    self.writes += 1
                    self.last = value
        finally:
            session.close()


def test_conflicts_from_a_concurrent_writer(faulty: Faulty, whole_afterwards) -> None:
    """Another client writes the Deployment continuously while the servo adjusts it: the connector's
    patches carry the resourceVersion they were built from, so the real API server answers 409 when
    the other write came between. The connector reads again and rebuilds, at most
    MAX_CONFLICT_RETRIES times per patch: each ADJUST either succeeds, its values in the cluster and
    the other writer's label kept, or fails with reason ``conflict`` naming the 409."""
    before = len(conflicts_met(faulty.cluster, faulty.namespace))
    outcomes = []
    with Writer(faulty.cluster, faulty.namespace) as writer:
        for _ in range(CONFLICT_ADJUSTS):
            values = faulty.next_values()
            adjusted = faulty.optimizer.run(adjust_command(values))
            met = len(conflicts_met(faulty.cluster, faulty.namespace)) - before
            outcomes.append((adjusted.status, met))
            if adjusted.status == "ok":
                holds = cluster_settings(faulty.cluster, faulty.namespace)
                assert same_settings(holds, values), f"adjusted to {values}, the cluster holds {holds}"
            else:
                result = adjusted.result or {}
                assert result.get("status") == "failed" and result.get("reason") == "conflict", result
                assert "409 Conflict" in result.get("message", ""), result
            if met and adjusted.status == "ok":
                break  # a 409 met, and an ADJUST through (possibly the same one, after a fresh read)
    labels = faulty.cluster.get(deployment_path(faulty.namespace))["metadata"].get("labels") or {}
    print(
        f"under a concurrent writer ({writer.writes} writes): ADJUST outcomes (status, 409s so far) {outcomes}"
    )
    assert met > 0, f"no 409 met in {len(outcomes)} ADJUSTs against {writer.writes} concurrent writes"
    assert labels.get(Writer.LABEL) == writer.last, "the other writer's last write was lost"
    # Bounded: one first try and MAX_CONFLICT_RETRIES more per patch (a Deployment and an HPA per ADJUST).
    assert met <= len(outcomes) * 2 * (MAX_CONFLICT_RETRIES + 1), outcomes
    assert faulty.servo.alive(), faulty.servo.log()
    faulty.describe_matches()
