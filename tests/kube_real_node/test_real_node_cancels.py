"""The scenario this project exists for, on real pods: `servo-actors run` (a real subprocess) with the
embedded optimizer tunes Deployment ``web`` and its HPA, whose pods are the project's app on the real
node, while cancels are pressed at seeded random moments (tests/support/kube_real.py,
``run_cancel_storm``, as in tests/connectors_kubernetes_real/test_real_cancels.py on kwok's pods).

Every ADJUST is a real rollout: new containers start (sandbox, app, readiness probe every second)
and the old ones get SIGTERM and their 1 s grace period. Every MEASURE runs under load: the servo's
``loadgen`` connector sends /work to the demo's balancer on loopback (scripts/kube_demo_real: the
node has no Service VIPs), which spreads it over web's ready pods. On every trial: a cancel met at
a progress post is answered ``cancelled``, the connector's process is replaced, and the next
DESCRIBE equals what the cluster holds. At the end: an ADJUST not cancelled holds, a MEASURE not
cancelled got answers from the pods, no tuning pod exists, the containers the node's containerd
runs for the namespace are exactly those of the pods the API server has (none once they are
deleted), and SIGTERM ends the servo with GOODBYE.

The seed is printed; ``SERVO_KUBE_CANCEL_SEED`` replays a run, ``SERVO_KUBE_CANCELS`` sets the count.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_real import (
    COMMAND_TIMEOUT,
    NAME,
    CommandQueue,
    ServoRun,
    adjust_command,
    cluster_settings,
    connector,
    create_app,
    measure_command,
    real_manifest,
    real_values,
    run_cancel_storm,
    same_settings,
    servo_config,
)
from real_node import POD_TIMEOUT, ready, running_containers
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from kube_demo_real.balancer import Balancer  # noqa: E402
from kube_demo_real.pods import ReadyPods  # noqa: E402

pytestmark = [pytest.mark.kube, pytest.mark.slow]

CANCELS = int(os.environ.get("SERVO_KUBE_CANCELS", "30"))
SEED = int(os.environ.get("SERVO_KUBE_CANCEL_SEED", str(random.SystemRandom().randrange(1 << 32))))
MAX_TRIALS = 3 * CANCELS
"""Trials whose cancel came too late do not count; this bounds them."""
PROGRESS_INTERVAL = "30ms"
"""A cancel is answered to the next progress post: this often, so that one pressed as the command
is sent meets the connector still reading and patching."""
RATE_RPS = 20
WORK_MS = 1
"""The load during every MEASURE: 20 requests/s of 1 ms of CPU each (20m, within any pod's 100m)."""
LOAD_METRICS = ["throughput", "error_rate", "latency_p99"]
MEASURED = [f"{NAME}.ready_replicas", f"{NAME}.restarts", *LOAD_METRICS]
FINAL_MEASURE_SECONDS = 3.0
CONTAINERS_TIMEOUT = 60.0
"""Seconds for the node's containers to match the API's pods (the kubelet stops a deleted pod's
containers within its 1 s grace period; only a hang breaks this bound)."""


def load_connector(url: str) -> dict[str, Any]:
    return {"name": "load", "type": "loadgen",
            "config": {"url": f"{url}/work?ms={WORK_MS}", "rate": RATE_RPS, "concurrency": 2, "timeout": "5s"}}  # fmt: skip


def reading(metric: dict[str, Any]) -> float:
    """A metric of a MEASUREMENT: its single reading, or the last point of its first series."""
    if "value" in metric:
        return float(metric["value"])
    return float(metric["values"][0]["data"][-1][1])


def pods(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    return cluster.get(f"/api/v1/namespaces/{namespace}/pods")["items"]  # type: ignore[no-any-return]


def balancing_to_ready_pods(cluster: LocalCluster, namespace: str, ready_pods: ReadyPods) -> bool:
    """Whether the balancer's addresses are those of the namespace's ready pods, none terminating."""
    listed = pods(cluster, namespace)
    if any(p["metadata"].get("deletionTimestamp") for p in listed):
        return False
    live = sorted(f"{p['status']['podIP']}:8080" for p in listed if ready(p))
    return bool(live) and sorted(pod.address for pod in ready_pods.pods) == live


def containers_match_pods(cluster: LocalCluster, namespace: str) -> dict[str, str] | None:
    """The running containers once they are exactly the sandbox and app of every pod the API server
    has in ``namespace`` (two per pod, none for a pod it no longer has), else None."""
    listed = pods(cluster, namespace)
    if any(p["metadata"].get("deletionTimestamp") for p in listed):
        return None
    running = running_containers(cluster, namespace)
    per_pod = {p["metadata"]["uid"]: 0 for p in listed}
    for uid in running.values():
        if uid not in per_pod:
            return None
        per_pod[uid] += 1
    return running if all(count == 2 for count in per_pod.values()) else None


@pytest.mark.timeout(600)
def test_cancels_at_random_moments_of_real_rollouts_and_loaded_measurements(
    kube_cluster: LocalCluster, kube_namespace: str, tmp_path: Path
) -> None:
    print(f"seed {SEED} (replay with SERVO_KUBE_CANCEL_SEED={SEED})")
    rng = random.Random(SEED)
    create_app(kube_cluster, kube_namespace, manifest=real_manifest())
    ready_pods = ReadyPods(
        kube_cluster.bin_dir / "kubectl", kube_cluster.kubeconfig, kube_namespace, f"app={NAME}", 8080
    )
    balancer = Balancer(ready_pods)
    ready_pods.start()
    balancer.start()
    optimizer = CommandQueue.serve()
    assert optimizer.server is not None
    config = servo_config(
        optimizer.server, connector(kube_cluster, kube_namespace), load_connector(balancer.url),
        progress_interval=PROGRESS_INTERVAL,
    )  # fmt: skip
    servo = ServoRun.start(tmp_path / "servo", config)
    optimizer.context = servo.log
    try:
        first = optimizer.run({"cmd": "DESCRIBE", "param": {}})
        assert first.status == "ok", f"{first.result}\n{servo.log()}"
        assert set(LOAD_METRICS) <= set(first.result["descriptor"]["measurement"]["metrics"]), first.result  # type: ignore[index]

        storm = run_cancel_storm(
            kube_cluster, kube_namespace, optimizer, servo, rng, SEED, CANCELS, MAX_TRIALS,
            values_of=real_values, measure_metrics=MEASURED,
        )  # fmt: skip
        print(storm.summary())
        assert len(storm.answered_to("progress")) >= CANCELS, storm.summary()
        phases = storm.phases()
        assert phases.get("rollout wait", 0) > 0, storm.summary()
        assert phases.get("measurement", 0) > 0, storm.summary()

        last = real_values(rng)
        final = optimizer.run(adjust_command(last), COMMAND_TIMEOUT)
        assert final.status == "ok", f"{final.result}\n{servo.log()}"
        holds = cluster_settings(kube_cluster, kube_namespace)
        assert same_settings(holds, last), f"the last adjustment was {last}, the cluster holds {holds}"
        # The balancer reads the pods every second: once it sends to the rollout's pods only (not to
        # an address just removed, which takes seconds to fail), a MEASURE under load.
        wait_until(lambda: balancing_to_ready_pods(kube_cluster, kube_namespace, ready_pods), POD_TIMEOUT,
                   0.2, "the balancer sending to web's ready pods only")  # fmt: skip
        measured = optimizer.run(measure_command(FINAL_MEASURE_SECONDS, MEASURED), COMMAND_TIMEOUT)
        assert measured.status == "ok", f"{measured.result}\n{servo.log()}"
        metrics = measured.result["metrics"]  # type: ignore[index]
        print(f"the end: {holds}; measured under load: {metrics}")
        assert reading(metrics["throughput"]) > 0, metrics
        assert servo.alive(), servo.log()
    finally:
        code = servo.stop()
        optimizer.stop()
        balancer.stop()
        ready_pods.stop()
    assert code == 0, servo.log()
    history = optimizer.server.state()["history"]
    events = [entry["event"] for entry in history if entry.get("event")]
    assert events[0] == "HELLO" and events.count("HELLO") == 1, events[:5]
    assert events[-1] == "GOODBYE" and events.count("GOODBYE") == 1, events[-5:]

    # Nothing left on the node: no tuning pod; containerd runs the containers of the API's pods and
    # no other (a cancelled rollout's pods were stopped by the real kubelet, not orphaned) ...
    assert not [
        p["metadata"]["name"] for p in pods(kube_cluster, kube_namespace) if "tuning" in p["metadata"]["name"]
    ]
    running = wait_until(
        lambda: containers_match_pods(kube_cluster, kube_namespace), CONTAINERS_TIMEOUT, 0.5,
        "the node's running containers to be those of the API's pods",
    )  # fmt: skip
    print(f"running on the node: {len(running)} containers of {len(set(running.values()))} pods")
    # ... and none once the Deployment is deleted.
    kube_cluster.kubectl("delete", "deployment", NAME, "-n", kube_namespace, "--wait=true",
                         f"--timeout={POD_TIMEOUT:.0f}s", timeout=POD_TIMEOUT + 30)  # fmt: skip
    wait_until(lambda: not pods(kube_cluster, kube_namespace), POD_TIMEOUT, 0.5, "web's pods gone")
    wait_until(lambda: not running_containers(kube_cluster, kube_namespace), CONTAINERS_TIMEOUT, 0.5,
               "no container of the namespace running on the node")  # fmt: skip
