"""The kubernetes options servox users bring (issue 37), against the real local control plane:
workloads in two namespaces with their own ``on_failure``, ``get: [limit]`` deciding the value
DESCRIBE reports, ``static_environment_variables`` written on the Deployment (default strategy)
and on the tuning pod (``strategy: tuning``), and ``check``'s permissions asked of the real API
server with a ServiceAccount's token that lacks a verb, an extra ``permissions`` rule and any
right in the second namespace.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_local import LocalCluster
from real_app import (
    CONNECTOR_WEB,
    SIMULATE_ENV,
    App,
    ProgressLog,
    env_of,
    main_container,
    settings,
    web_manifest,
)
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes import KubernetesConnector
from servo_actors.connectors.kubernetes.client import KubeClient
from servo_actors.connectors.kubernetes.kubeconfig import resolve_access
from servo_actors.connectors.kubernetes.tuning_checks import cleanup

pytestmark = pytest.mark.kube

DEPLOY_ROLE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "role.yaml"
RBAC_TIMEOUT = 30.0
"""Bound on a Role reaching the API server's authorizer (its informer: milliseconds)."""
TOKEN_SECONDS = 600
REQUEST_TIMEOUT = 10.0
WAIT = 60.0
"""Generous bound on the real cluster reaching a state: only a hang breaks it."""


def api_manifest() -> dict[str, Any]:
    """Deployment ``api``: web's manifest under another name and label."""
    manifest = web_manifest()
    manifest["metadata"]["name"] = "api"
    manifest["spec"]["selector"] = {"matchLabels": {"app": "api"}}
    manifest["spec"]["template"]["metadata"]["labels"] = {"app": "api", "tier": "backend"}
    return manifest


def connector_api(namespace: str, **own: Any) -> dict[str, Any]:
    return {**copy.deepcopy(CONNECTOR_WEB), "name": "api", "namespace": namespace, **own}


@pytest.fixture
def second_namespace(kube_cluster: LocalCluster, request: pytest.FixtureRequest) -> Any:
    name = kube_cluster.new_namespace(f"{request.node.name[:30]}-b")
    yield name
    kube_cluster.delete_namespace(name)


def test_workloads_in_two_namespaces_each_with_its_own_on_failure_get_and_static_env(
    kube_cluster: LocalCluster, app: App, second_namespace: str, progress: ProgressLog
) -> None:
    app.create()
    other = App(kube_cluster, second_namespace)
    kube_cluster.apply(second_namespace, api_manifest())
    other.rollout_status("api")
    web = copy.deepcopy(CONNECTOR_WEB)
    web["containers"][0]["cpu"]["get"] = ["limit"]
    web["containers"][0]["static_environment_variables"] = {"TZ": "UTC", "GOMAXPROCS": 2}
    connector = app.connector([web, connector_api(second_namespace, on_failure="ignore")])

    described = connector.describe()["components"]
    assert settings(described)["cpu"] == 1.0  # web's limit (get: [limit]), not its request 0.5
    assert settings(described, "api")["cpu"] == 0.5  # api's request (the first of set)
    assert "TZ" not in described["web"]["settings"]  # static: never offered to the optimizer
    assert {"web.ready_replicas", "api.ready_replicas"} <= set(connector.describe()["metrics"])

    checked = {row["name"]: row for row in connector.check()}
    assert checked[f"permissions ({app.namespace})"]["success"], checked
    assert checked[f"permissions ({second_namespace})"]["success"], checked
    assert checked["deployment api"]["success"] and checked["deployment web"]["success"], checked

    # web (the connector's namespace, on_failure rollback) takes its new CPU; api (its own
    # namespace, on_failure ignore) fails to pull: its failure is reported and its settings stay.
    with pytest.raises(ConnectorFailure) as caught:
        connector.adjust(
            {
                "web": {"settings": {"cpu": {"value": 0.75}}},
                "api": {"settings": {SIMULATE_ENV: {"value": "image-pull-error"}}},
            },
            Control(),
            progress,
        )
    failure = caught.value
    assert (failure.status, failure.reason) == ("failed", "image-pull-failed"), failure.message
    assert failure.message.startswith("Deployment api"), failure.message
    assert failure.message.endswith("The new settings were left in place (on_failure: ignore)."), (
        failure.message
    )
    main = main_container(app.deployment())
    assert main["resources"]["requests"]["cpu"] == "750m" and main["resources"]["limits"]["cpu"] == "750m"
    assert env_of(main)["TZ"] == "UTC" and env_of(main)["GOMAXPROCS"] == "2"
    assert env_of(main_container(other.deployment("api")))[SIMULATE_ENV] == "image-pull-error"
    assert "TZ" not in env_of(main_container(other.deployment("api")))  # api configures none
    # The two parts are waited on in turn, their progress laid end to end.
    assert progress.percents() == sorted(progress.percents()) and progress.percents()[-1] < 100


def test_static_environment_variables_go_on_the_tuning_pod_only(app: App, progress: ProgressLog) -> None:
    before = app.create()
    web = {**copy.deepcopy(CONNECTOR_WEB), "strategy": "tuning", "replicas": None}
    web["containers"][0]["static_environment_variables"] = {"TZ": "UTC"}
    connector = app.connector([web], settlement="0s")
    connector.adjust({"web-tuning": {"settings": {"cpu": {"value": 0.25}}}}, Control(), progress)
    pod = app.cluster.get(f"/api/v1/namespaces/{app.namespace}/pods/web-tuning")
    [main] = [c for c in pod["spec"]["containers"] if c["name"] == "main"]
    assert env_of(main)["TZ"] == "UTC" and main["resources"]["requests"]["cpu"] == "250m"
    assert app.deployment()["spec"]["template"] == before["spec"]["template"]  # servox's rule: main untouched
    # `servo-actors kube cleanup`'s own code finds it in the workload's namespace and removes it.
    client = KubeClient(resolve_access(str(app.cluster.kubeconfig), None), REQUEST_TIMEOUT)
    try:
        assert cleanup(client, connector.config, WAIT) == ["web-tuning"]
    finally:
        client.close()


def token_kubeconfig(cluster: LocalCluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding ServiceAccount ``account``'s token (`kubectl create token`) and the cluster's CA."""
    token = cluster.kubectl(
        "create", "token", account, "-n", namespace, f"--duration={TOKEN_SECONDS}s"
    ).stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority": str(cluster.dir / "pki" / "ca.crt"),
                },
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [
            {"name": account, "context": {"cluster": "local", "user": account, "namespace": namespace}}
        ],
        "current-context": account,
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config))
    return path


def test_check_asks_the_api_server_and_names_each_missing_permission_with_its_rule(
    kube_cluster: LocalCluster, app: App, second_namespace: str, tmp_path: Path
) -> None:
    """A ServiceAccount bound to deploy/kubernetes's Role without ``watch pods``, in the first
    namespace only; the config asks besides for ``get configmaps`` and names a workload in the
    second namespace, where the account may do nothing."""
    app.create()
    role = yaml.safe_load(DEPLOY_ROLE.read_text())
    for rule in role["rules"]:
        if rule["resources"] == ["pods"] and rule["apiGroups"] == [""]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "watch"]
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lacking"}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "lacking"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "servo"},
        "subjects": [{"kind": "ServiceAccount", "name": "lacking", "namespace": app.namespace}],
    }
    kube_cluster.apply(app.namespace, account, role, binding)
    who = f"--as=system:serviceaccount:{app.namespace}:lacking"

    def can(verb: str, resource: str) -> bool:
        done = kube_cluster.kubectl("auth", "can-i", verb, resource, "-n", app.namespace, who, check=False)
        return done.stdout.strip() == "yes"

    wait_until(lambda: can("patch", "deployments.apps"), RBAC_TIMEOUT, interval=0.2, what="the Role in force")
    kubeconfig = token_kubeconfig(kube_cluster, app.namespace, "lacking", tmp_path / "lacking.kubeconfig")
    config = {
        "kubeconfig": str(kubeconfig),
        "namespace": app.namespace,
        "deployments": [CONNECTOR_WEB, connector_api(second_namespace)],
        "permissions": [{"group": "", "resources": ["configmaps"], "verbs": ["get", "list"]}],
    }
    rows = {row["name"]: row for row in KubernetesConnector("k8s", config).check()}
    mine = rows[f"permissions ({app.namespace})"]
    print(mine["message"])
    assert not mine["success"]
    assert (
        f"not allowed in namespace '{app.namespace}': watch pods, get configmaps, list configmaps ("
        in mine["message"]
    )
    assert mine["remedy"] == (
        f"add to the servo's Role in namespace '{app.namespace}': "
        '{apiGroups: [""], resources: ["pods"], verbs: ["watch"]}; '
        '{apiGroups: [""], resources: ["configmaps"], verbs: ["get", "list"]} '
        "(deploy/kubernetes/role.yaml holds them all)"
    )
    theirs = rows[f"permissions ({second_namespace})"]
    assert not theirs["success"]
    assert (
        f"not allowed in namespace '{second_namespace}': get deployments.apps, list deployments.apps"
        in theirs["message"]
    )
    assert not rows["deployment api"]["success"] and "forbidden" in rows["deployment api"]["message"]
    # Its remedy's kubectl works in the workload's own namespace.
    assert f"-n {second_namespace} get deployments" in rows["deployment api"]["remedy"]
    assert rows["deployment web"]["success"], rows["deployment web"]
