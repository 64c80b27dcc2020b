"""The kubernetes connector end to end: a real ``servo-actors run`` process against the embedded
optimizer, driving the emulated cluster over HTTP; cancels kill the connector's process."""

from __future__ import annotations

import signal

import pytest
from k8s_objects import connector_config

from servo_actors.optimizer.search import SearchDriver

pytestmark = pytest.mark.slow

COMMAND_TIMEOUT = 60.0
"""Generous bound on one command's round trip: only a hang breaks it."""


def _servo_config(kit, server, cluster, **changes) -> dict:
    connector = {"name": "k8s", "type": "kubernetes", "config": connector_config(cluster, **changes)}
    return kit.servo_config(server, [connector])


def _adjust(cpu: float) -> dict:
    state = {"application": {"components": {"web": {"settings": {"cpu": {"value": cpu}}}}}}
    return {"cmd": "ADJUST", "param": {"state": state, "control": {"settlement": 0}}}


DESCRIBE = {"cmd": "DESCRIBE", "param": {}}


def _cpu(cluster) -> str:
    return cluster.get("deployment", "web")["spec"]["template"]["spec"]["containers"][0]["resources"][
        "requests"
    ]["cpu"]


@pytest.mark.timeout(180)
def test_a_plan_optimizes_the_deployment(cluster, servo, optimizer, kit) -> None:
    driver = SearchDriver.from_plan(
        {
            "app": "example.com/web",
            "steps": 2,
            "measure": {"duration": "1s"},
            "objective": {"minimize": "web.ready_replicas"},
            "sleep": 1,
            "confirm": {"repeats": 0},  # counts below are the search's; confirmation has its own tests
        }
    )
    server = optimizer(driver)
    proc = servo(_servo_config(kit, server, cluster))
    kit.wait_until(lambda: driver.phase == "done", COMMAND_TIMEOUT * 2, interval=0.1, what="plan done")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    posts = kit.check_trace(server.state()["history"])
    results = [p[-1]["param"] for p in posts.values() if p and "status" in p[-1]["param"]]
    assert len(results) == 1 + 1 + 2 * 2, results
    assert all(r["status"] == "ok" for r in results), results
    description = results[0]["descriptor"]
    assert set(description["application"]["components"]["web"]["settings"]) == {
        "cpu",
        "memory",
        "GOGC",
        "replicas",
    }
    adjusted = [r for r in results if "state" in r][-1]["state"]["application"]["components"]["web"][
        "settings"
    ]
    deployment = cluster.get("deployment", "web")
    assert deployment["spec"]["replicas"] == adjusted["replicas"]["value"]
    assert deployment["status"]["readyReplicas"] == adjusted["replicas"]["value"]
    assert "Traceback" not in proc.log()


@pytest.mark.timeout(180)
def test_cancel_mid_rollout_then_describe_and_adjust_again(cluster, servo, optimizer, kit) -> None:
    driver = kit.QueueDriver()
    server = optimizer(driver)
    driver.server = server
    proc = servo(_servo_config(kit, server, cluster, request_timeout="2s"))
    first = driver.push(DESCRIBE)
    assert first.finished.wait(COMMAND_TIMEOUT), proc.log()
    assert first.result["status"] == "ok", first.result

    # A slow rollout, cancelled while the connector waits on it: its process is killed mid-wait.
    cluster.controller(rollout_seconds=30)
    writes = len(cluster.patch_log)
    slow = driver.push(_adjust(2.0))
    kit.wait_until(lambda: len(cluster.patch_log) > writes, COMMAND_TIMEOUT, what="the patch went out")
    assert server.cancel()["armed"]  # answered at the next progress post, during the rollout wait
    assert slow.finished.wait(COMMAND_TIMEOUT), proc.log()
    assert slow.result is not None and slow.result["status"] == "cancelled", slow.result
    assert _cpu(cluster) == "2"  # the patch went out before the cancel; the rollout is still under way

    # A fresh connector sees the cluster as it is, and works from there.
    cluster.controller(rollout_seconds=0.2)
    again = driver.push(DESCRIBE)
    assert again.finished.wait(COMMAND_TIMEOUT), proc.log()
    assert again.result["status"] == "ok", again.result
    settings = again.result["descriptor"]["application"]["components"]["web"]["settings"]
    assert settings["cpu"]["value"] == 2.0
    fixed = driver.push(_adjust(1.0))
    assert fixed.finished.wait(COMMAND_TIMEOUT), proc.log()
    assert fixed.result["status"] == "ok", fixed.result
    assert _cpu(cluster) == "1"
    status = cluster.get("deployment", "web")["status"]
    assert status["updatedReplicas"] == status["readyReplicas"] == status["availableReplicas"] == 2

    # The API server goes away: a clear failure, and the servo goes on.
    cluster.down()
    lost = driver.push(DESCRIBE)
    assert lost.finished.wait(COMMAND_TIMEOUT), proc.log()
    assert (lost.result["status"], lost.result["reason"]) == ("failed", "kubernetes-unreachable"), lost.result
    assert "Connection refused" in lost.result["message"]
    cluster.up()
    back = driver.push(DESCRIBE)
    assert back.finished.wait(COMMAND_TIMEOUT), proc.log()
    assert back.result["status"] == "ok", back.result

    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])
    assert "Traceback" not in proc.log()
