"""Failures the real system produces, each answered with its reason word, a message a person can act
on, and the configured on_failure; a rollback is checked in the real ReplicaSets.

The failures come from the settings themselves where kwok allows it: the connector sets the main
container's ``KWOK_SIMULATE`` variable (an env setting like any other), and kwok's stages of
kube/stages/simulate-failures.yaml make the new pods crash, lose readiness or fail their pull; the
real scheduler refuses a request larger than any node; the real Deployment controller declares a
rollout past ``progressDeadlineSeconds``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from real_app import (
    SIMULATE_ENV,
    SIMULATE_INTERVAL_ANNOTATION,
    App,
    ProgressLog,
    env_of,
    main_container,
    rolled_out,
    web_manifest,
)
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control

pytestmark = pytest.mark.kube

WAIT = 30.0
"""Generous bound on the real cluster reaching a state: only a hang breaks it."""


def _fail(app: App, progress: ProgressLog, asked: dict[str, Any], control: Control | None = None,
          **config: Any) -> ConnectorFailure:  # fmt: skip
    connector = app.connector(**config)
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust(
            {"web": {"settings": {name: {"value": value} for name, value in asked.items()}}},
            control or Control(),
            progress,
        )
    failure = caught.value
    assert failure.message.startswith("Deployment web"), failure.message
    assert "Traceback" not in failure.message
    return failure


def _assert_rolled_back(app: App, before: dict[str, Any], failed: dict[str, str]) -> None:
    """The Deployment holds its old template and replicas, rolled out; in the real ReplicaSets the
    old template's set is the newest revision again and serves every replica, the failed one none."""
    after = app.deployment()
    assert after["spec"]["replicas"] == before["spec"]["replicas"]
    assert after["spec"]["template"] == before["spec"]["template"]
    assert rolled_out(after), after["status"]
    sets = app.replicasets()
    current = sets[-1]
    assert current["spec"]["template"]["spec"] == before["spec"]["template"]["spec"]
    assert current["spec"]["replicas"] == current["status"]["readyReplicas"] == before["spec"]["replicas"]
    failures = [rs for rs in sets if rs is not current]
    assert len(failures) == 1, [rs["metadata"]["name"] for rs in sets]
    [rejected] = failures
    assert rejected["spec"]["replicas"] == 0 and rejected["status"].get("replicas", 0) == 0
    rejected_main = main_container(rejected)
    for name, value in failed.items():
        if name == "cpu":
            assert rejected_main["resources"]["requests"]["cpu"] == value
        else:
            assert env_of(rejected_main)[name] == value


def test_unschedulable_waits_for_capacity_until_the_timeout_then_rolls_back(
    app: App, progress: ProgressLog
) -> None:
    before = app.create()
    # 6 cores: more than any node has (4), so the real scheduler refuses the new pod.
    failure = _fail(app, progress, {"cpu": 6, "GOGC": 300}, timeout="6s")
    assert (failure.status, failure.reason) == ("rejected", "unschedulable"), failure.message
    assert "cannot be scheduled" in failure.message and "Insufficient cpu" in failure.message
    assert "ask for less CPU or memory, or add capacity" in failure.message
    assert failure.message.endswith("Rolled web back to the previous settings, which are healthy again.")
    _assert_rolled_back(app, before, {"cpu": "6", "GOGC": "300"})


def test_a_crash_loop_fails_at_once_and_the_rollback_restores_env_memory_and_replicas(
    app: App, progress: ProgressLog
) -> None:
    before = app.create()
    failure = _fail(app, progress, {SIMULATE_ENV: "crash-loop", "memory": 1, "replicas": 3})
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    assert (
        "container main of pod web-" in failure.message
        and "fails to start: CrashLoopBackOff" in failure.message
    )
    assert "last exit: Error (code 1)" in failure.message
    assert "Rolled web back to the previous settings, which are healthy again." in failure.message
    _assert_rolled_back(app, before, {SIMULATE_ENV: "crash-loop"})
    assert main_container(app.deployment())["resources"]["limits"]["memory"] == "1Gi"


def test_image_pull_failed_is_not_the_settings_fault_and_ignore_leaves_it(
    app: App, progress: ProgressLog
) -> None:
    app.create()
    failure = _fail(app, progress, {SIMULATE_ENV: "image-pull-error"}, on_failure="ignore")
    assert (failure.status, failure.reason) == ("failed", "image-pull-failed"), failure.message
    assert "cannot pull image registry.local/web:1" in failure.message
    assert "check the image name and registry access" in failure.message
    assert failure.message.endswith("The new settings were left in place (on_failure: ignore).")
    deployment = app.deployment()
    assert env_of(main_container(deployment))[SIMULATE_ENV] == "image-pull-error"
    # The real rollout keeps the old pods serving (maxUnavailable rounds down to 0 of 2).
    old, new = app.replicasets()
    assert old["status"]["readyReplicas"] == 2
    assert env_of(main_container(new))[SIMULATE_ENV] == "image-pull-error"


def test_lost_readiness_during_settlement_is_unstable_and_shutdown_scales_to_zero(
    app: App, progress: ProgressLog
) -> None:
    # The marked pod turns un-ready 4 s after it is Ready: after its rollout, within the settlement.
    app.create(web_manifest(replicas=1, pod_annotations={SIMULATE_INTERVAL_ANNOTATION: "4s"}))
    failure = _fail(app, progress, {SIMULATE_ENV: "unstable", "cpu": 0.75}, Control(settlement=30),
                    on_failure="shutdown")  # fmt: skip
    assert (failure.status, failure.reason) == ("rejected", "unstable"), failure.message
    assert "lost readiness during settlement" in failure.message
    assert "containers with unready status: [main]" in failure.message
    assert failure.message.endswith("Scaled web to zero replicas (on_failure: shutdown).")
    assert app.deployment()["spec"]["replicas"] == 0
    assert any(message.startswith("settling") for _, message in progress.reports)


def test_a_rollout_past_its_progress_deadline_is_named_and_rolled_back(
    app: App, progress: ProgressLog
) -> None:
    # Pods ready for a second, then not: never available for minReadySeconds, so the real
    # controller declares the rollout stuck after progressDeadlineSeconds.
    before = app.create(web_manifest(replicas=1, minReadySeconds=2, progressDeadlineSeconds=5))
    failure = _fail(app, progress, {SIMULATE_ENV: "unstable"})
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    assert "stopped progressing" in failure.message and "has timed out progressing" in failure.message
    # kwok's stage posts the kubelet's Unhealthy event: its failing probe is named.
    assert "is not ready: Readiness probe failed (simulated by kwok, mark unstable)" in failure.message
    assert "Rolled web back to the previous settings, which are healthy again." in failure.message
    _assert_rolled_back(app, before, {SIMULATE_ENV: "unstable"})
    progressing = next(c for c in app.deployment()["status"]["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "NewReplicaSetAvailable")


def _pod_quota(pods: int) -> dict[str, Any]:
    """A ResourceQuota the real API server's admission enforces: at most ``pods`` pods."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "pods"},
        "spec": {"hard": {"pods": str(pods)}},
    }


def test_a_quota_that_forbids_the_new_pods_fails_after_the_grace_and_rolls_back(
    app: App, progress: ProgressLog
) -> None:
    # No room for the rollout's surge pod: the real ReplicaSet controller reports ReplicaFailure
    # (FailedCreate, exceeded quota) and retries; it lasts, so the rollout fails once the grace is over.
    before = app.create()
    app.cluster.apply(app.namespace, _pod_quota(before["spec"]["replicas"]))
    failure = _fail(app, progress, {"GOGC": 300}, failure_grace="1s")
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    assert "cannot create pods" in failure.message and "exceeded quota" in failure.message
    assert "Rolled web back to the previous settings, which are healthy again." in failure.message
    assert any("unless it clears" in message for _, message in progress.reports), progress.reports
    _assert_rolled_back(app, before, {"GOGC": "300"})


def test_a_quota_lifted_within_the_grace_is_waited_out(app: App, progress: ProgressLog) -> None:
    # The same refusal, gone before the grace is over (as a refusal by an API server that has just
    # restarted is): the controllers' retries create the pods and the rollout completes.
    before = app.create()
    app.cluster.apply(app.namespace, _pod_quota(before["spec"]["replicas"]))
    connector = app.connector(failure_grace="60s")
    outcome: list[BaseException | None] = []

    def adjust() -> None:
        try:
            connector.adjust({"web": {"settings": {"GOGC": {"value": 300}}}}, Control(), progress)
            outcome.append(None)
        except BaseException as exc:  # reported by the test thread
            outcome.append(exc)

    worker = threading.Thread(target=adjust)
    worker.start()
    try:
        wait_until(
            lambda: any("unless it clears" in message for _, message in progress.reports),
            WAIT, what="the ReplicaFailure seen and waited on",
        )  # fmt: skip
    finally:
        app.cluster.kubectl("delete", "resourcequota", "pods", "-n", app.namespace)
        worker.join(WAIT * 3)
    assert outcome == [None], outcome
    deployment = app.deployment()
    assert rolled_out(deployment) and env_of(main_container(deployment))["GOGC"] == "300"
