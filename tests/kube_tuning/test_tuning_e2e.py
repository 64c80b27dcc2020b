"""strategy: tuning end to end: a real ``servo-actors run`` process against the embedded optimizer
and the real local cluster. A whole (short) optimization moves only the tuning pod; ADJUSTs
cancelled at random moments (the connector's process is killed) leave a state from which the
next command's fresh connector makes exactly one tuning pod with the requested values."""

from __future__ import annotations

import os
import random
import signal
from typing import Any

import pytest
from kube_local import LocalCluster
from kube_tuning_support import (
    SIMULATE_ENV,
    deployment_snapshot,
    env_of,
    main_container,
    ready,
    rolled_out,
    tuning_config,
    tuning_pods,
    web_deployment,
)

from servo_actors.optimizer.search import SearchDriver

pytestmark = [
    pytest.mark.kube,
    pytest.mark.timeout(300),
]

COMMAND_TIMEOUT = 90.0
"""Generous bound on one command's round trip: only a hang breaks it."""
CANCELS = 5
SEED = int(os.environ.get("KUBE_TUNING_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)


def _adjust(cpu: float, gogc: int) -> dict[str, Any]:
    settings = {"cpu": {"value": cpu}, "GOGC": {"value": gogc}}
    state = {"application": {"components": {"web-tuning": {"settings": settings}}}}
    return {"cmd": "ADJUST", "param": {"state": state, "control": {"settlement": 0}}}


def _servo_config(kit: Any, server: Any, cluster: LocalCluster, ns: str) -> dict[str, Any]:
    config = tuning_config(cluster, ns)
    # Healthy trials only: the search would otherwise pick kwok's failure modes, which
    # test_tuning_pod.py covers, and this test is about the whole loop leaving one good pod.
    [container] = config["deployments"][0]["containers"]
    container["env"] = [e for e in container["env"] if e["name"] != SIMULATE_ENV]
    connector = {"name": "k8s", "type": "kubernetes", "config": config}
    return kit.servo_config(server, [connector])


def test_a_whole_optimization_moves_only_the_tuning_pod(
    kube_cluster: LocalCluster, kube_namespace: str, servo: Any, optimizer: Any, kit: Any
) -> None:
    ns = kube_namespace
    kube_cluster.apply(ns, web_deployment())
    rolled_out(kube_cluster, ns)
    before = deployment_snapshot(kube_cluster, ns)
    driver = SearchDriver.from_plan(
        {
            "app": "example.com/web",
            "steps": 3,
            "measure": {"duration": "1s"},
            "objective": {"minimize": "web-tuning.restarts"},
            "sleep": 0.2,
            "confirm": {"repeats": 0},
        }
    )
    server = optimizer(driver)
    proc = servo(_servo_config(kit, server, kube_cluster, ns))
    kit.wait_until(lambda: driver.phase == "done", COMMAND_TIMEOUT * 2, interval=0.1, what="plan done")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    posts = kit.check_trace(server.state()["history"])
    results = [p[-1]["param"] for p in posts.values() if p and "status" in p[-1]["param"]]
    failed = [(r["status"], r.get("reason"), r.get("message")) for r in results if r["status"] != "ok"]
    assert not failed, failed
    adjusted = [r for r in results if "state" in r]
    assert len(adjusted) == 3
    components = adjusted[-1]["state"]["application"]["components"]
    assert set(components) == {"web", "web-tuning"}
    assert deployment_snapshot(kube_cluster, ns) == before  # the Deployment was never written
    [pod] = tuning_pods(kube_cluster, ns)
    assert ready(pod)
    assert float(components["web-tuning"]["settings"]["cpu"]["value"]) == pytest.approx(
        _cores(main_container(pod)["resources"]["requests"]["cpu"])
    )
    assert "Traceback" not in proc.log()


def _cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_adjusts_cancelled_at_random_moments_then_one_tuning_pod(
    kube_cluster: LocalCluster, kube_namespace: str, servo: Any, optimizer: Any, kit: Any
) -> None:
    print(f"KUBE_TUNING_SEED={SEED}")  # shown when the test fails: rerun with it
    rng = random.Random(SEED)
    ns = kube_namespace
    kube_cluster.apply(ns, web_deployment())
    rolled_out(kube_cluster, ns)
    before = deployment_snapshot(kube_cluster, ns)
    driver = kit.QueueDriver()
    server = optimizer(driver)
    driver.server = server
    proc = servo(_servo_config(kit, server, kube_cluster, ns))
    outcomes = []
    for _ in range(CANCELS):
        entry = driver.push(
            _adjust(rng.choice([0.25, 0.5, 0.75, 1.0]), rng.choice([50, 100, 200])),
            cancel_after=rng.uniform(0.0, 1.5),
        )
        assert entry.finished.wait(COMMAND_TIMEOUT), proc.log()
        if entry.cancel_timer is not None:
            entry.cancel_timer.join(COMMAND_TIMEOUT)
        outcomes.append((entry.result or {}).get("status", "cancelled"))
        assert outcomes[-1] in ("ok", "cancelled"), entry.result
        assert len(tuning_pods(kube_cluster, ns)) <= 1
    print("outcomes:", outcomes)
    final = driver.push(_adjust(0.5, 300))
    assert final.finished.wait(COMMAND_TIMEOUT), proc.log()
    assert final.result is not None and final.result["status"] == "ok", final.result
    [pod] = tuning_pods(kube_cluster, ns)
    assert ready(pod) and not pod["metadata"].get("deletionTimestamp")
    assert main_container(pod)["resources"]["requests"]["cpu"] == "500m" and env_of(pod)["GOGC"] == "300"
    assert deployment_snapshot(kube_cluster, ns) == before
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])
