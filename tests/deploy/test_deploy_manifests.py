"""deploy/kubernetes: valid against the Kubernetes schemas, least privilege, and a servo.yaml the servo loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from servo_actors.config import load_config
from servo_actors.connectors.registry import available_connector_types, connector_settings_problems

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
SCHEMA_VERSIONS = ("1.27.0", "1.30.0", kubernetes_validate.utils.latest_version())
"""The oldest Kubernetes still commonly run, a middle one, and the newest the package knows."""
RUN_AS = 10001

CONTRACT_RULES = {
    ("apps", "deployments"): {"get", "list", "watch", "patch"},
    ("apps", "statefulsets"): {"get", "list", "watch", "patch"},
    ("apps", "replicasets"): {"get", "list", "watch"},
    ("", "pods"): {
        "get",
        "list",
        "watch",
        "create",
        "delete",
    },  # create/delete: strategy: tuning; delete: a StatefulSet's rollback
    ("autoscaling", "horizontalpodautoscalers"): {"get", "list", "watch", "patch"},
    ("", "events"): {"list", "watch"},
    ("metrics.k8s.io", "pods"): {"get", "list"},
}
"""The RBAC verbs of KUBE_CONTRACT.md, the same list the connector's check verifies (the tuning
pods' and StatefulSets' verbs: tuning_checks.TUNING_ACCESS / checks.STATEFULSET_ACCESS, ROLLBACK_ACCESS)."""


def manifests() -> dict[str, dict[str, Any]]:
    """Every object of the kustomization, by kind."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    objects: dict[str, dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for document in yaml.safe_load_all((DEPLOY / name).read_text()):
            assert document["kind"] not in objects, f"two {document['kind']} objects"
            objects[document["kind"]] = document
    return objects


def servo_container() -> dict[str, Any]:
    return manifests()["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def test_the_kustomization_names_every_manifest_and_only_them() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = sorted(path.name for path in DEPLOY.glob("*.yaml") if path.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    assert [image["name"] for image in kustomization["images"]] == [servo_container()["image"]]


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_manifest_validates_against_the_strict_kubernetes_schema(version: str) -> None:
    objects = manifests()
    assert set(objects) == {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment"}
    for obj in objects.values():
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_schema_check_refuses_a_misspelt_field() -> None:
    deployment = manifests()["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, SCHEMA_VERSIONS[-1], strict=True)


def test_the_role_grants_exactly_the_contract_verbs_and_nothing_cluster_wide() -> None:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in manifests()["Role"]["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == CONTRACT_RULES
    assert not list(DEPLOY.glob("*cluster*"))


def test_the_binding_gives_the_role_to_the_deployments_service_account() -> None:
    objects = manifests()
    binding = objects["RoleBinding"]
    account = objects["ServiceAccount"]["metadata"]["name"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": objects["Role"]["metadata"]["name"],
    }
    assert [(subject["kind"], subject["name"]) for subject in binding["subjects"]] == [
        ("ServiceAccount", account)
    ]
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert binding["subjects"][0]["namespace"] == kustomization["namespace"]
    assert objects["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"] == account


def test_the_servo_runs_non_root_read_only_and_bounded() -> None:
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    container = servo_container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == RUN_AS
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert (
        set(container["resources"]["requests"]) == set(container["resources"]["limits"]) == {"cpu", "memory"}
    )
    writable = {mount["mountPath"] for mount in container["volumeMounts"] if not mount.get("readOnly")}
    assert writable == {"/tmp"}
    assert manifests()["Deployment"]["spec"]["replicas"] == 1
    assert manifests()["Deployment"]["spec"]["strategy"] == {"type": "Recreate"}


def test_the_container_runs_the_configured_servo_with_the_token_from_the_secret() -> None:
    objects = manifests()
    container = servo_container()
    args = container["args"]
    assert args[-1] == "run"
    config_path = Path(args[args.index("--config") + 1])
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    volumes = {
        volume["name"]: volume for volume in objects["Deployment"]["spec"]["template"]["spec"]["volumes"]
    }
    config_volume = next(name for name, volume in volumes.items() if "configMap" in volume)
    assert volumes[config_volume]["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    assert Path(mounts[config_volume]) / config_path.name == config_path
    assert config_path.name in objects["ConfigMap"]["data"]
    servo_yaml = yaml.safe_load(objects["ConfigMap"]["data"][config_path.name])
    token_file = Path(servo_yaml["optimizer"]["token_file"])
    secret_volume = next(name for name, volume in volumes.items() if "secret" in volume)
    items = {item["path"] for item in volumes[secret_volume]["secret"].get("items", [])}
    assert Path(mounts[secret_volume]) / token_file.name == token_file
    assert token_file.name in items
    assert "token" not in servo_yaml["optimizer"]


def test_the_config_map_holds_a_servo_yaml_the_servo_loads(tmp_path: Path) -> None:
    data = manifests()["ConfigMap"]["data"]
    (tmp_path / "servo.yaml").write_text(data["servo.yaml"])
    # Strict once the kubernetes connector type is registered; until then the structure only.
    registered = "kubernetes" in available_connector_types()
    config = load_config(
        tmp_path / "servo.yaml", env={}, connector_check=connector_settings_problems if registered else None
    )
    assert [(spec.name, spec.type) for spec in config.connectors] == [("k8s", "kubernetes")]
    assert config.optimizer is not None and config.optimizer.token_file == "/var/run/secrets/servo/token"
    k8s = config.connectors[0].config
    assert k8s["kubeconfig"] is None  # in-cluster credentials of the ServiceAccount
    assert k8s["namespace"] == yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["namespace"]


def test_the_dockerfile_installs_the_kubernetes_extra_and_runs_as_the_pods_user() -> None:
    lines = [
        line.strip()
        for line in (DEPLOY / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert lines[0] == "FROM python:3.11-slim"
    assert any('pip install ".[kubernetes]"' in line for line in lines)
    assert f"USER {RUN_AS}:{RUN_AS}" in lines
    assert 'ENTRYPOINT ["servo-actors"]' in lines
