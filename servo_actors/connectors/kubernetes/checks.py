"""``check``: the API answers, every verb the connector uses is allowed, and what the config names
is there and readable (with requests or limits to optimize).

A failed check carries a ``remedy`` (``connectors.check_result``) for a person to apply: the
kubectl command that shows or fixes it, or the Role rules to add; the API's reachability is
``critical`` (nothing after it is asked when it fails).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from servo_actors.connectors.kubernetes.client import (
    ACCESS_REVIEW_PATH,
    VERSION_PATH,
    KubeClient,
    KubeError,
    deployments_path,
    hpas_path,
    statefulsets_path,
)
from servo_actors.connectors.kubernetes.cluster import find_hpa, read_deployment
from servo_actors.connectors.kubernetes.config import DeploymentConfig, KubernetesConfig
from servo_actors.connectors.kubernetes.settings import ClusterStateError, find_container, resource_value

__all__ = [
    "OPTIONAL_ACCESS",
    "REQUIRED_ACCESS",
    "ROLLBACK_ACCESS",
    "STATEFULSET_ACCESS",
    "allowed",
    "check_access",
    "check_deployment",
    "check_namespace",
    "check_reachable",
    "kubectl_command",
    "required_access",
    "role_rules",
    "run_checks",
]

REQUIRED_ACCESS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("apps", "deployments", ("get", "list", "watch", "patch")),
    ("apps", "replicasets", ("get", "list", "watch")),
    ("", "pods", ("get", "list", "watch")),
    ("autoscaling", "horizontalpodautoscalers", ("get", "list", "watch", "patch")),
    ("", "events", ("list", "watch")),
)
"""(group, resource, verbs) the connector uses in its namespace; deploy/kubernetes grants the same."""
STATEFULSET_ACCESS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("apps", "statefulsets", ("get", "list", "watch", "patch")),
)
"""Also needed when ``statefulsets`` are configured."""
ROLLBACK_ACCESS: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "pods", ("delete",)),)
"""Also needed for a StatefulSet under ``on_failure: rollback``: the pods of the failed revision
that are not ready are deleted, else the controller waits on them forever."""
OPTIONAL_ACCESS: tuple[tuple[str, str, tuple[str, ...]], ...] = (("metrics.k8s.io", "pods", ("get", "list")),)
"""Without these, measure reports no CPU/memory usage; everything else works."""


def _result(name: str, success: bool, message: str, remedy: str | None = None) -> dict[str, Any]:
    """A check result; the remedy only on a failure (what a person can do about it)."""
    result: dict[str, Any] = {"name": name, "success": success, "message": message}
    if remedy and not success:
        result["remedy"] = remedy
    return result


def kubectl_command(config: KubernetesConfig) -> str:
    """``kubectl`` with the config's kubeconfig, context and namespace, for a remedy to start with."""
    words = ["kubectl"]
    if config.kubeconfig:
        words += ["--kubeconfig", config.kubeconfig]
    if config.context:
        words += ["--context", config.context]
    return shlex.join([*words, "-n", config.namespace])


def role_rules(denied: list[tuple[str, str, str]]) -> str:
    """The Role rules granting ``denied`` (group, resource, verb), one per group and resource."""
    verbs: dict[tuple[str, str], list[str]] = {}
    for group, resource, verb in denied:
        verbs.setdefault((group, resource), []).append(verb)
    return "; ".join(
        f"{{apiGroups: {json.dumps([group])}, resources: {json.dumps([resource])}, verbs: {json.dumps(found)}}}"
        for (group, resource), found in verbs.items()
    )


def run_checks(client: KubeClient, config: KubernetesConfig) -> list[dict[str, Any]]:
    kubectl = kubectl_command(config)
    reachable = check_reachable(client)
    reachable["severity"] = "critical"
    if not reachable["success"]:
        reachable["remedy"] = f"{kubectl} version  # the same kubeconfig and context: fix what it says"
        return [reachable]
    results = [
        reachable,
        check_access(client, config.namespace, required_access(config)),
        check_namespace(client, config.namespace, with_statefulsets=bool(config.statefulsets)),
    ]
    for deployment in config.workloads:
        results.extend(check_deployment(client, config.namespace, deployment, kubectl))
    return results


def required_access(config: KubernetesConfig) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """REQUIRED_ACCESS, and what the configured StatefulSets (and their rollback) need besides."""
    wanted = REQUIRED_ACCESS
    if config.statefulsets:
        wanted += STATEFULSET_ACCESS
        if config.on_failure == "rollback":
            wanted += ROLLBACK_ACCESS
    return wanted


def check_reachable(client: KubeClient) -> dict[str, Any]:
    name = "kubernetes API reachable"
    try:
        version = client.get(VERSION_PATH)
    except KubeError as exc:
        return _result(name, False, str(exc))
    shown = version.get("gitVersion") or f"{version.get('major', '?')}.{version.get('minor', '?')}"
    return _result(name, True, f"Kubernetes {shown} at {client.server} ({client.access.source})")


def allowed(client: KubeClient, namespace: str, group: str, resource: str, verb: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {"namespace": namespace, "group": group, "resource": resource, "verb": verb}
        },
    }
    answer = client.create(ACCESS_REVIEW_PATH, review)
    return bool((answer.get("status") or {}).get("allowed"))


def check_access(
    client: KubeClient, namespace: str, wanted: tuple[tuple[str, str, tuple[str, ...]], ...] = REQUIRED_ACCESS
) -> dict[str, Any]:
    name = "permissions"
    try:
        missing = _denied(client, namespace, wanted)
        optional = _denied(client, namespace, OPTIONAL_ACCESS)
    except KubeError as exc:
        return _result(name, False, f"cannot ask for a SelfSubjectAccessReview: {exc}")
    note = ""
    if optional:
        note = f"; without {', '.join(_shown(optional))}, measure reports no CPU/memory usage"
    if missing:
        return _result(
            name, False,
            f"not allowed in namespace {namespace!r}: {', '.join(_shown(missing))} "
            f"(grant them with the Role in deploy/kubernetes){note}",
            f"add to the servo's Role in namespace {namespace!r}: {role_rules(missing)} "
            "(deploy/kubernetes/role.yaml holds them all)",
        )  # fmt: skip
    return _result(name, True, f"every verb the connector uses is allowed in namespace {namespace!r}{note}")


def _denied(
    client: KubeClient, namespace: str, wanted: tuple[tuple[str, str, tuple[str, ...]], ...]
) -> list[tuple[str, str, str]]:
    denied = []
    for group, resource, verbs in wanted:
        for verb in verbs:
            if not allowed(client, namespace, group, resource, verb):
                denied.append((group, resource, verb))
    return denied


def _shown(denied: list[tuple[str, str, str]]) -> list[str]:
    return [f"{verb} {resource}{'.' + group if group else ''}" for group, resource, verb in denied]


def check_namespace(client: KubeClient, namespace: str, with_statefulsets: bool = False) -> dict[str, Any]:
    name = f"namespace {namespace} readable"
    try:
        found = client.get(deployments_path(namespace), {"limit": "500"}).get("items") or []
        hpas = client.get(hpas_path(namespace), {"limit": "500"}).get("items") or []
        sets = (
            client.get(statefulsets_path(namespace), {"limit": "500"}).get("items") or []
            if with_statefulsets
            else []
        )
    except KubeError as exc:
        return _result(name, False, str(exc), f"kubectl get namespace {shlex.quote(namespace)}")
    counted = f"{len(sets)} StatefulSet(s), " if with_statefulsets else ""
    return _result(name, True, f"{len(found)} Deployment(s), {counted}{len(hpas)} HorizontalPodAutoscaler(s)")


def check_deployment(
    client: KubeClient, namespace: str, config: DeploymentConfig, kubectl: str = "kubectl"
) -> list[dict[str, Any]]:
    """The configured Deployment (or StatefulSet) exists with the containers and resources named;
    ``kubectl`` starts the remedies (``kubectl_command``)."""
    name = f"{config.kind.lower()} {config.name}"
    workload = shlex.quote(f"{config.kind.lower()}/{config.name}")
    try:
        deployment = read_deployment(client, namespace, config.name, config.kind)
    except (KubeError, ClusterStateError) as exc:
        return [_result(name, False, str(exc), f"{kubectl} get {config.kind.lower()}s  # the names there")]
    problems, notes, remedies = [], [], []
    for container_config in config.containers:
        container = find_container(deployment, container_config.name)
        if container is None:
            problems.append(f"no container {container_config.name!r}")
            names = "jsonpath={.spec.template.spec.containers[*].name}"
            remedies.append(f"{kubectl} get {workload} -o {shlex.quote(names)}  # its containers")
            continue
        for resource, bounds in (("cpu", container_config.cpu), ("memory", container_config.memory)):
            if bounds is None:
                continue
            value = resource_value(container, resource, bounds.set)
            if value is None:
                problems.append(
                    f"container {container_config.name!r} has neither a {resource} request nor a limit"
                )
                quantity = f"{bounds.min:g}" if resource == "cpu" else f"{bounds.min:g}Gi"
                amount = shlex.quote(f"--requests={resource}={quantity}")
                remedies.append(
                    f"{kubectl} set resources {workload} -c {shlex.quote(container_config.name)} {amount}"
                )
            else:
                notes.append(f"{container_config.name} {resource} {value}")
    if deployment.get("spec", {}).get("paused"):
        problems.append("it is paused: new settings would not roll out (kubectl rollout resume)")
        remedies.append(f"{kubectl} rollout resume {workload}")
    if (deployment.get("spec", {}).get("updateStrategy") or {}).get("type") == "OnDelete":
        problems.append(
            "its updateStrategy is OnDelete: new settings would not roll out, so ADJUST refuses it"
        )
        rolling = shlex.quote('{"spec":{"updateStrategy":{"type":"RollingUpdate"}}}')
        remedies.append(f"{kubectl} patch {workload} -p {rolling}")
    replicas = deployment.get("spec", {}).get("replicas", 1)
    results = [
        _result(name, False, "; ".join(problems), "; ".join(remedies))
        if problems
        else _result(name, True, f"{replicas} replica(s); " + (", ".join(notes) or "no resources configured"))
    ]
    if config.hpa is not None or config.replicas is not None:
        results.append(_check_hpa(client, namespace, config))
    return results


def _check_hpa(client: KubeClient, namespace: str, config: DeploymentConfig) -> dict[str, Any]:
    name = f"autoscaler of {config.name}"
    try:
        hpa, _ = find_hpa(client, namespace, config, None)
    except (KubeError, ClusterStateError) as exc:
        return _result(name, False, str(exc))
    if hpa is None:
        return _result(name, True, "no HorizontalPodAutoscaler targets it: replicas is offered")
    spec = hpa.get("spec", {})
    message = f"HorizontalPodAutoscaler {hpa['metadata']['name']} ({spec.get('minReplicas', 1)}-{spec.get('maxReplicas')} replicas)"
    if config.replicas is not None:
        message += f": replicas is not offered while it controls the {config.kind}"
    return _result(name, True, message)
