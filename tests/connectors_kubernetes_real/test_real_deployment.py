"""describe / adjust / measure on a real Deployment: the real Deployment controller applies cpu,
memory, env and replicas, the connector waits by kubectl's rule, and nothing else of the object changes."""

from __future__ import annotations

import copy
import shlex
import subprocess

import pytest
from real_app import SIMULATE_ENV, App, ProgressLog, env_of, main_container, rolled_out, settings

from servo_actors.connectors.base import ConnectorFailure, Control

pytestmark = pytest.mark.kube

REVISION = "deployment.kubernetes.io/revision"


def test_adjust_is_rolled_out_by_the_real_controller_and_leaves_the_rest_alone(
    app: App, progress: ProgressLog
) -> None:
    before = app.create()
    connector = app.connector()
    described = connector.describe()
    assert settings(described["components"]) == {
        "cpu": 0.5, "memory": 0.5, "GOGC": 100, SIMULATE_ENV: "none", "replicas": 2,
    }  # fmt: skip
    assert set(described["metrics"]) >= {"web.ready_replicas", "web.restarts"}

    asked = {"cpu": 1.5, "memory": 0.75, "GOGC": 200, "replicas": 3}
    result = connector.adjust(
        {"web": {"settings": {name: {"value": value} for name, value in asked.items()}}}, Control(), progress
    )
    assert settings(result) == {**asked, SIMULATE_ENV: "none"}

    # Done by kubectl's rule the moment adjust returns (read from the object, and asked of kubectl).
    after = app.deployment()
    assert rolled_out(after), after["status"]
    assert "successfully rolled out" in app.rollout_status(timeout=1)
    percents = progress.percents()
    assert percents == sorted(percents) and percents[-1] == 100

    # The whole spec is as before but for what was adjusted (the server's defaults included).
    expected = copy.deepcopy(before["spec"])
    expected["replicas"] = 3
    main = main_container(expected)
    main["resources"] = {
        "requests": {"cpu": "1500m", "memory": "768Mi"},
        "limits": {"cpu": "1500m", "memory": "768Mi"},
    }
    main["env"] = [{**item, "value": "200"} if item["name"] == "GOGC" else item for item in main["env"]]
    assert after["spec"] == expected
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    kept = {k: v for k, v in after["metadata"]["annotations"].items() if k != REVISION}
    assert kept == {k: v for k, v in before["metadata"]["annotations"].items() if k != REVISION}

    # The real ReplicaSets: the old one scaled to zero, the new one holding the new template.
    old, new = app.replicasets()
    assert old["spec"]["replicas"] == 0 and old["status"].get("replicas", 0) == 0
    assert new["spec"]["replicas"] == new["status"]["readyReplicas"] == 3
    assert new["spec"]["template"]["spec"] == after["spec"]["template"]["spec"]
    pods = app.pods()
    assert len(pods) == 3
    for pod in pods:
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
        assert container["resources"] == main["resources"]
        assert env_of(container)["GOGC"] == "200"

    measured = connector.measure(["web.ready_replicas", "web.restarts"], Control(duration=0.5), progress)
    assert measured["metrics"] == {
        "web.ready_replicas": {"unit": "replicas", "value": 3},
        "web.restarts": {"unit": "count", "value": 0},
    }

    # Nothing to change: no write at all (the object's version and generation stay).
    unchanged = connector.adjust({"web": {"settings": {"GOGC": {"value": 200}, "replicas": {"value": 3}}}},
                                 Control(), progress)  # fmt: skip
    assert settings(unchanged) == settings(result)
    again = app.deployment()
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]

    # Someone else scales it: the next describe reads the cluster as it is.
    app.cluster.kubectl("scale", "deployment/web", "--replicas=1", "-n", app.namespace)
    assert settings(connector.describe()["components"])["replicas"] == 1


def test_values_the_api_server_refuses_leave_nothing_half_done(app: App, progress: ProgressLog) -> None:
    """The real API server's validation (422: a request above the limit that ``set: [request]``
    leaves in place) becomes invalid-setting, and the Deployment keeps its old values."""
    before = app.create(wait=False)
    config = copy.deepcopy(app.connector().config.model_dump(mode="json")["deployments"][0])
    config["containers"][0]["cpu"]["set"] = ["request"]
    with pytest.raises(ConnectorFailure) as caught:
        app.connector(deployments=[config]).adjust(
            {"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress
        )
    assert (caught.value.status, caught.value.reason) == ("failed", "invalid-setting")
    assert "422" in caught.value.message and "must be less than or equal to cpu limit" in caught.value.message
    after = app.deployment()
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert main_container(after)["resources"] == main_container(before)["resources"]


def test_a_paused_deployment_is_refused_before_any_write_and_fails_its_check(
    app: App, progress: ProgressLog
) -> None:
    app.create(wait=False)
    app.cluster.kubectl("rollout", "pause", "deployment/web", "-n", app.namespace)
    paused = app.deployment()
    connector = app.connector()
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust({"web": {"settings": {"cpu": {"value": 2}}}}, Control(), progress)
    assert (caught.value.status, caught.value.reason) == ("failed", "deployment-paused")
    assert "kubectl rollout resume deployment/web" in caught.value.message
    # Not resourceVersion: the Deployment controller still writes the new object's status.
    after = app.deployment()
    assert after["metadata"]["generation"] == paused["metadata"]["generation"]
    assert after["spec"] == paused["spec"]
    assert after["metadata"].get("annotations") == paused["metadata"].get("annotations")
    check = {r["name"]: r for r in connector.check()}["deployment web"]
    assert not check["success"] and "paused" in check["message"]
    # Its remedy, run as a person would (the servo never runs it), makes the check pass.
    remedy = shlex.split(check["remedy"])
    assert remedy[0] == "kubectl" and remedy[-3:] == ["rollout", "resume", "deployment/web"], remedy
    done = subprocess.run(
        [str(app.cluster.bin_dir / "kubectl"), *remedy[1:]], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert {r["name"]: r for r in connector.check()}["deployment web"]["success"]
