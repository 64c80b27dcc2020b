"""The HPA settings against the real HPA controller (kube-controller-manager, sync every 5 s) fed by
metrics-server from kwok's simulated usage: the connector changes the HPA, the real HPA rescales the
Deployment, and the connector never writes the Deployment's replicas (read from the audit log).

One module-wide set-up, since the first metrics of an HPA take ~35-50 s: Deployment ``web`` (main
container only: a 500m request) whose pods use 400m each (``kwok.x-k8s.io/usage-cpu``), i.e. 80% of
the request, under an HPA min 1, max 4, target 90% (80/90 is within the HPA's 10% tolerance: one
replica). The session cluster's HPA scale-down stabilization is 0 s. Deployment ``tuned`` (no HPA)
and its tuning pod share the wait: the usage test reads both before and after their first metrics.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kube_local import LocalCluster
from real_app import CONNECTOR_WEB, MAIN, App, ProgressLog, main_container, rolled_out, settings, web_manifest
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes.client import USER_AGENT

pytestmark = pytest.mark.kube

USAGE_CPU = "kwok.x-k8s.io/usage-cpu"
FIRST_METRICS_TIMEOUT = 150.0
"""Seconds for the HPA's first metrics (~35-50 s: kwok usage -> metrics-server scrape -> HPA sync)."""
SCALE_TIMEOUT = 120.0
"""Seconds for the real HPA to rescale and the Deployment to roll the new count out (~5-20 s)."""

HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "web"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "minReplicas": 1,
        "maxReplicas": 4,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 90}},
            }
        ],
    },
}
CONNECTOR_HPA: dict[str, Any] = {
    **copy.deepcopy(CONNECTOR_WEB),
    "hpa": {
        "min_replicas": {"min": 1, "max": 4},
        "max_replicas": {"min": 1, "max": 6},
        "target_cpu_utilization": {"min": 10, "max": 95, "step": 5},
    },
}


def hpa_utilization(hpa: dict[str, Any]) -> int | None:
    for metric in (hpa.get("status") or {}).get("currentMetrics") or []:
        current = (metric.get("resource") or {}).get("current") or {}
        if "averageUtilization" in current:
            return int(current["averageUtilization"])
    return None


def utilization_is(hpa: dict[str, Any], percent: int) -> bool:
    value = hpa_utilization(hpa)
    return value is not None and abs(value - percent) <= 5


USAGE_METRICS = ["web.cpu_usage", "web.memory_usage", "tuned-tuning.cpu_usage", "tuned-tuning.memory_usage"]
FIRST_MEASURE: dict[str, Any] = {}
"""The connector's usage measured the moment web and the tuning pod of ``tuned`` were Ready (before
metrics-server sampled them)."""
CONNECTOR_TUNED = {"name": "tuned", "strategy": "tuning",
                   "containers": [{"name": "main", "cpu": {"min": "100m", "max": 2, "step": "50m"}}]}  # fmt: skip


def tuned_manifest() -> dict[str, Any]:
    """Deployment ``tuned`` (no HPA), whose tuning pod uses 300m: it shares the metrics wait."""
    manifest = web_manifest(replicas=1, containers=[MAIN], pod_annotations={USAGE_CPU: "300m"})
    labels = {"app": "tuned"}
    manifest["metadata"].update(name="tuned", labels=labels)
    manifest["spec"]["selector"] = {"matchLabels": labels}
    manifest["spec"]["template"]["metadata"]["labels"] = labels
    return manifest


@pytest.fixture(scope="module")
def hpa_app(kube_cluster: LocalCluster, module_namespace: str) -> Iterator[App]:
    app = App(kube_cluster, module_namespace)
    app.create(web_manifest(replicas=1, containers=[MAIN], pod_annotations={USAGE_CPU: "400m"}), HPA,
               tuned_manifest())  # fmt: skip
    # At once: metrics-server lists a pod about 35 s after it starts (two scrapes 10 s apart at the
    # least), so web's pod and the new tuning pod have none yet. tuned's own pod is not waited for.
    both = app.connector(deployments=[CONNECTOR_WEB, CONNECTOR_TUNED])
    both.adjust({"tuned-tuning": {"settings": {"cpu": {"value": 0.5}}}}, Control(), ProgressLog())
    FIRST_MEASURE.update(both.measure(USAGE_METRICS, Control(), ProgressLog()))
    wait_until(lambda: hpa_utilization(app.hpa()) is not None, FIRST_METRICS_TIMEOUT, interval=1.0,
               what="the HPA's first metrics")  # fmt: skip
    yield app


def test_usage_is_left_out_until_metrics_server_has_sampled_every_running_pod(hpa_app: App) -> None:
    """A new pod has no metrics for ~35 s: a sum over the pods that have some would read 0.0 cores.
    The connector leaves the usage out then (web's, and the tuning pod's of ``tuned``), and says
    why; once metrics-server lists the pods (the HPA's first metrics came from it), the usage is
    reported. Runs before the HPA rescales web (its new pods would have no metrics again)."""
    [pod] = hpa_app.pods()
    assert FIRST_MEASURE["metrics"] == {}, FIRST_MEASURE
    for metric in USAGE_METRICS:
        note = FIRST_MEASURE["annotations"][f"k8s:{metric}"]
        assert note.startswith("omitted: 1 of 1 running pods have no metrics"), note
        assert (pod["metadata"]["name"] if metric.startswith("web.") else "tuned-tuning") in note
    connector = hpa_app.connector(deployments=[CONNECTOR_WEB, CONNECTOR_TUNED])
    assert set(USAGE_METRICS) <= set(connector.describe()["metrics"])

    def measured() -> dict[str, Any] | None:
        found = connector.measure(USAGE_METRICS, Control(), ProgressLog())
        return found if not found["annotations"] else None

    # The tuning pod was created a second or two after web's pod: it may need one more scrape.
    metrics = wait_until(measured, FIRST_METRICS_TIMEOUT, interval=1.0, what="the tuning pod's metrics")[
        "metrics"
    ]
    assert metrics["web.cpu_usage"] == {"unit": "cores", "value": pytest.approx(0.4, rel=0.05)}
    assert metrics["tuned-tuning.cpu_usage"] == {"unit": "cores", "value": pytest.approx(0.3, rel=0.05)}
    assert metrics["web.memory_usage"]["value"] > 0 and metrics["tuned-tuning.memory_usage"]["value"] > 0


def scaled_to(app: App, replicas: int) -> bool:
    deployment = app.deployment()
    return deployment["spec"]["replicas"] == replicas and rolled_out(deployment)


def test_hpa_settings_change_the_hpa_and_the_real_hpa_rescales(hpa_app: App) -> None:
    app = hpa_app
    assert utilization_is(app.hpa(), 80)
    assert app.deployment()["spec"]["replicas"] == 1
    connector = app.connector(deployments=[CONNECTOR_HPA])
    described = settings(connector.describe()["components"])
    assert "replicas" not in described
    assert {k: v for k, v in described.items() if k.startswith("hpa_")} == {
        "hpa_min_replicas": 1, "hpa_max_replicas": 4, "hpa_target_cpu_utilization": 90,
    }  # fmt: skip

    # Target 20% of 80%: the HPA wants 4, the new max holds it to 3.
    asked = {"hpa_target_cpu_utilization": 20, "hpa_max_replicas": 3}
    result = connector.adjust(
        {"web": {"settings": {k: {"value": v} for k, v in asked.items()}}}, Control(), ProgressLog()
    )
    assert {k: settings(result)[k] for k in asked} == asked
    spec = app.hpa()["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 3)
    assert spec["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 20}},
        }
    ]
    wait_until(lambda: scaled_to(app, 3), SCALE_TIMEOUT, interval=0.5, what="the HPA scaling web to 3")

    # min = max = 2 and the old target: the HPA scales down to 2 (stabilization 0 s).
    asked = {"hpa_min_replicas": 2, "hpa_max_replicas": 2, "hpa_target_cpu_utilization": 90}
    connector.adjust(
        {"web": {"settings": {k: {"value": v} for k, v in asked.items()}}}, Control(), ProgressLog()
    )
    wait_until(lambda: scaled_to(app, 2), SCALE_TIMEOUT, interval=0.5, what="the HPA scaling web to 2")
    described = settings(connector.describe()["components"])
    assert {k: described[k] for k in asked} == asked

    # replicas is refused while the HPA controls the Deployment, before any write.
    version = app.deployment()["metadata"]["resourceVersion"]
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": {"replicas": {"value": 5}}}}, Control(), ProgressLog())
    assert caught.value.status == "failed"
    assert "replicas is not offered" in caught.value.message
    assert app.deployment()["metadata"]["resourceVersion"] == version

    # A template change of the HPA-controlled Deployment rolls out at the HPA's count (its patch
    # carries no replicas: see the audit test below).
    result = connector.adjust({"web": {"settings": {"cpu": {"value": 1}}}}, Control(), ProgressLog())
    assert settings(result)["cpu"] == 1
    after = app.deployment()
    assert after["spec"]["replicas"] == 2 and rolled_out(after), after["status"]
    assert main_container(after)["resources"]["requests"]["cpu"] == "1"


def test_the_connector_never_writes_replicas_of_the_hpa_controlled_deployment(hpa_app: App) -> None:
    """Read from the audit log (whole request bodies of Deployment, scale and HPA writes): the
    connector's writes are HPA patches only; the Deployment's replicas were written by the HPA
    controller through the scale subresource."""
    events = [e for e in hpa_app.audit() if e.get("verb") in {"create", "update", "patch"}]
    # (the tuning pod of ``tuned``, made by the module's set-up for the usage test, is not web's)
    ours = [
        e for e in events
        if (e.get("userAgent") or "").startswith(USER_AGENT) and e["objectRef"].get("name") != "tuned-tuning"
    ]  # fmt: skip
    assert ours, "no write by the connector in the audit log"
    for event in ours:
        ref = event["objectRef"]
        assert ref.get("subresource") != "scale", event
        if ref["resource"] == "deployments":
            assert "replicas" not in ((event.get("requestObject") or {}).get("spec") or {}), event
    assert {e["objectRef"]["resource"] for e in ours} == {"horizontalpodautoscalers", "deployments"}
    scales = [e for e in events if e["objectRef"].get("subresource") == "scale"]
    assert scales and all(
        "horizontal-pod-autoscaler" in (e.get("user") or {}).get("username", "") for e in scales
    )
