"""deploy/kubernetes/ against the real API server: every manifest accepted by a server-side dry run,
then the ServiceAccount, Role and RoleBinding created for real, and `servo-actors check` (a real
subprocess, configured by the ConfigMap's servo.yaml) run with that ServiceAccount's token (a
kubeconfig holding a token from `kubectl create token`): it passes, an ADJUST through
`servo-actors adjust` goes through with that token alone, and with one verb removed from the Role
the check fails naming that verb.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_local import LocalCluster
from kube_real import cluster_settings, create_app
from waiting import wait_until

pytestmark = pytest.mark.kube

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
MANIFESTS = sorted(path.name for path in DEPLOY.glob("*.yaml") if path.name != "kustomization.yaml")
CLI_TIMEOUT = 120.0
"""Bound on one `servo-actors check` / `adjust` (a few seconds: the actor system, a few API calls)."""
RBAC_TIMEOUT = 30.0
"""Bound on a Role change reaching the API server's authorizer (its informer: milliseconds)."""
TOKEN_SECONDS = 600
REMOVED = [("apps", "deployments", "patch"), ("", "pods", "watch")]
"""Verbs taken out of the Role, one at a time: (API group, resource, verb)."""


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DEPLOY / name).read_text()) if doc]


def test_every_manifest_passes_a_server_side_dry_run(kube_cluster: LocalCluster, kube_namespace: str) -> None:
    """Each file alone, then the kustomization as a whole (into the namespace it names)."""
    assert {
        "serviceaccount.yaml",
        "role.yaml",
        "rolebinding.yaml",
        "configmap.yaml",
        "deployment.yaml",
    } <= set(MANIFESTS), MANIFESTS
    for name in MANIFESTS:
        done = kube_cluster.kubectl(
            "apply", "--dry-run=server", "-n", kube_namespace, "-f", str(DEPLOY / name)
        )
        assert "(server dry run)" in done.stdout, f"{name}: {done.stdout}"
    done = kube_cluster.kubectl("apply", "--dry-run=server", "-k", str(DEPLOY))
    created = [line for line in done.stdout.splitlines() if "(server dry run)" in line]
    assert len(created) == 5, done.stdout
    # A dry run stores nothing.
    assert (
        kube_cluster.kubectl("get", "serviceaccount", "servo", "-n", kube_namespace, check=False).returncode
        != 0
    )


def servo_yaml(kubeconfig: Path, namespace: str) -> dict[str, Any]:
    """The ConfigMap's servo.yaml, its connector pointed at ``kubeconfig`` and ``namespace`` (no optimizer:
    `check` and `adjust` need none)."""
    [configmap] = documents("configmap.yaml")
    servo = yaml.safe_load(configmap["data"]["servo.yaml"])
    [entry] = [c for c in servo["connectors"] if c["type"] == "kubernetes"]
    entry["config"].update(kubeconfig=str(kubeconfig), namespace=namespace, timeout="60s", settlement="0s")
    return {"connectors": [entry]}


def token_kubeconfig(cluster: LocalCluster, namespace: str, path: Path) -> Path:
    """A kubeconfig with the ServiceAccount servo's token (`kubectl create token`) and the cluster's CA."""
    token = cluster.kubectl(
        "create", "token", "servo", "-n", namespace, f"--duration={TOKEN_SECONDS}s"
    ).stdout.strip()
    assert token.count(".") == 2, "kubectl create token did not print a JWT"
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
        "users": [{"name": "servo", "user": {"token": token}}],
        "contexts": [
            {"name": "servo", "context": {"cluster": "local", "user": "servo", "namespace": namespace}}
        ],
        "current-context": "servo",
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config))
    return path


def servo_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servo_actors", "-c", str(config), *args],
        capture_output=True, text=True, timeout=CLI_TIMEOUT, cwd=config.parent,
    )  # fmt: skip


def permissions(checked: subprocess.CompletedProcess[str]) -> str:
    """The message of the kubernetes connector's ``permissions`` check in `check --json` output."""
    rows = json.loads(checked.stdout)["data"]["checks"]
    [row] = [r for r in rows if r["name"] == "permissions"]
    return str(row["message"])


def can_i(cluster: LocalCluster, namespace: str, verb: str, resource: str) -> bool:
    done = cluster.kubectl(
        "auth", "can-i", verb, resource, "-n", namespace, f"--as=system:serviceaccount:{namespace}:servo", check=False
    )  # fmt: skip
    return done.stdout.strip() == "yes"


def test_check_passes_with_the_service_account_token_and_names_a_removed_verb(
    kube_cluster: LocalCluster, kube_namespace: str, tmp_path: Path
) -> None:
    create_app(kube_cluster, kube_namespace)  # Deployment web (container main) and its HPA
    binding = documents("rolebinding.yaml")[0]
    for subject in binding["subjects"]:
        subject["namespace"] = kube_namespace  # what kustomize does with the namespace it is given
    [role] = documents("role.yaml")
    kube_cluster.apply(kube_namespace, *documents("serviceaccount.yaml"), role, binding)
    wait_until(lambda: can_i(kube_cluster, kube_namespace, "patch", "deployments.apps"), RBAC_TIMEOUT,
               interval=0.2, what="the Role in force")  # fmt: skip
    kubeconfig = token_kubeconfig(kube_cluster, kube_namespace, tmp_path / "servo.kubeconfig")
    config = tmp_path / "servo.yaml"
    config.write_text(yaml.safe_dump(servo_yaml(kubeconfig, kube_namespace)))

    checked = servo_cli(config, "check", "--json")
    print(f"check with the ServiceAccount's token: exit {checked.returncode}\n{checked.stdout}")
    assert checked.returncode == 0, f"{checked.stdout}\n{checked.stderr}"
    assert "every verb the connector uses is allowed" in permissions(checked), checked.stdout

    before = cluster_settings(kube_cluster, kube_namespace)
    adjusted = servo_cli(config, "adjust", "web.cpu=0.5")
    assert adjusted.returncode == 0, f"{adjusted.stdout}\n{adjusted.stderr}"
    after = cluster_settings(kube_cluster, kube_namespace)
    assert after == {**before, "cpu": 0.5}, (before, after)
    assert kubeconfig.read_text().split("token: ")[1].split()[0] not in adjusted.stdout + adjusted.stderr

    for group, resource, verb in REMOVED:
        reduced = copy.deepcopy(role)
        for rule in reduced["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != verb]
        qualified = f"{resource}.{group}" if group else resource
        kube_cluster.apply(kube_namespace, reduced)
        wait_until(
            lambda v=verb, r=qualified: not can_i(kube_cluster, kube_namespace, v, r),
            RBAC_TIMEOUT, interval=0.2, what=f"{verb} {qualified} withdrawn",
        )  # fmt: skip
        checked = servo_cli(config, "check", "--json")
        print(f"check without {verb} {qualified}: exit {checked.returncode}\n{permissions(checked)}")
        assert checked.returncode == 1, f"{checked.stdout}\n{checked.stderr}"
        named = f"not allowed in namespace '{kube_namespace}': {verb} {qualified} "
        assert named in permissions(checked), checked.stdout
        # The remedy is the Role rule that grants it back, as deploy/kubernetes/role.yaml writes it.
        [row] = [r for r in json.loads(checked.stdout)["data"]["checks"] if r["name"] == "permissions"]
        rule = f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}'
        assert row["remedy"] == (
            f"add to the servo's Role in namespace '{kube_namespace}': {rule} "
            "(deploy/kubernetes/role.yaml holds them all)"
        ), row
        kube_cluster.apply(kube_namespace, role)
        wait_until(
            lambda v=verb, r=qualified: can_i(kube_cluster, kube_namespace, v, r),
            RBAC_TIMEOUT, interval=0.2, what=f"{verb} {qualified} granted again",
        )  # fmt: skip
