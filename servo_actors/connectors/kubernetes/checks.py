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
    "Access",
    "OPTIONAL_ACCESS",
    "REQUIRED_ACCESS",
    "ROLLBACK_ACCESS",
    "STATEFULSET_ACCESS",
    "access_remedy",
    "allowed",
    "check_access",
    "check_deployment",
    "check_namespace",
    "check_reachable",
    "denied",
    "kubectl_command",
    "qualified",
    "required_access",
    "role_rules",
    "run_checks",
    "shown",
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


def kubectl_command(config: KubernetesConfig, namespace: str | None = None) -> str:
    """``kubectl`` with the config's kubeconfig, context and namespace (or ``namespace``), for a
    remedy to start with."""
    words = ["kubectl"]
    if config.kubeconfig:
        words += ["--kubeconfig", config.kubeconfig]
    if config.context:
        words += ["--context", config.context]
    return shlex.join([*words, "-n", namespace or config.namespace])


def role_rules(denied: list[tuple[str, str, str]]) -> str:
    """The Role rules granting ``denied`` (group, resource, verb), one per group and resource."""
    verbs: dict[tuple[str, str], list[str]] = {}
    for group, resource, verb in denied:
        verbs.setdefault((group, resource), []).append(verb)
    return "; ".join(
        f"{{apiGroups: {json.dumps([group])}, resources: {json.dumps([resource])}, verbs: {json.dumps(found)}}}"
        for (group, resource), found in verbs.items()
    )


Access = tuple[tuple[str, str, tuple[str, ...]], ...]
"""(API group, resource, verbs) rows, as REQUIRED_ACCESS."""


def run_checks(client: KubeClient, config: KubernetesConfig) -> list[dict[str, Any]]:
    """Reachable; then, per namespace the workloads are in, the permissions and the namespace;
    then each workload."""
    reachable = check_reachable(client)
    reachable["severity"] = "critical"
    if not reachable["success"]:
        kubectl = kubectl_command(config)
        reachable["remedy"] = f"{kubectl} version  # the same kubeconfig and context: fix what it says"
        return [reachable]
    results = [reachable]
    namespaces: dict[str, Access] = {}
    with_statefulsets: dict[str, bool] = {}
    for part in config.groups():
        wanted = namespaces.get(part.namespace, ())
        namespaces[part.namespace] = _union(wanted, required_access(part))
        with_statefulsets[part.namespace] = with_statefulsets.get(part.namespace, False) or bool(
            part.statefulsets
        )
    single = len(namespaces) == 1
    for namespace, wanted in namespaces.items():
        name = "permissions" if single else f"permissions ({namespace})"
        results.append(check_access(client, namespace, wanted, name=name))
        results.append(check_namespace(client, namespace, with_statefulsets=with_statefulsets[namespace]))
    for workload in config.workloads:
        namespace = config.namespace_of(workload)
        results.extend(check_deployment(client, namespace, workload, kubectl_command(config, namespace)))
    return results


def required_access(config: KubernetesConfig) -> Access:
    """REQUIRED_ACCESS, what the configured StatefulSets (and their rollback) need besides, and
    the config's own ``permissions``."""
    wanted = REQUIRED_ACCESS
    if config.statefulsets:
        wanted += STATEFULSET_ACCESS
        if any((s.on_failure or config.on_failure) == "rollback" for s in config.statefulsets):
            wanted += ROLLBACK_ACCESS
    extra = tuple(
        (rule.group, resource, tuple(rule.verbs))
        for rule in config.permissions
        for resource in rule.resources
    )
    return _union(wanted, extra)


def _union(first: Access, second: Access) -> Access:
    """``first`` then the verbs of ``second`` it lacks, one row per (group, resource), in order."""
    rows: dict[tuple[str, str], list[str]] = {}
    for group, resource, verbs in (*first, *second):
        listed = rows.setdefault((group, resource), [])
        listed.extend(v for v in verbs if v not in listed)
    return tuple((group, resource, tuple(verbs)) for (group, resource), verbs in rows.items())


def qualified(group: str, resource: str) -> str:
    """``deployments.apps``, or ``pods`` for the core group: as kubectl names a resource."""
    return f"{resource}.{group}" if group else resource


def access_remedy(namespace: str, denied: list[tuple[str, str, str]]) -> str:
    """What to grant: the Role rules, one per resource."""
    return (
        f"add to the servo's Role in namespace {namespace!r}: {role_rules(denied)} "
        "(deploy/kubernetes/role.yaml holds them all)"
    )


def check_reachable(client: KubeClient) -> dict[str, Any]:
    name = "kubernetes API reachable"
    try:
        version = client.get(VERSION_PATH)
    except KubeError as exc:
        return _result(name, False, str(exc))
    shown = version.get("gitVersion") or f"{version.get('major', '?')}.{version.get('minor', '?')}"
    return _result(name, True, f"Kubernetes {shown} at {client.server} ({client.access.source})")


def allowed(client: KubeClient, namespace: str, group: str, resource: str, verb: str) -> bool:
    """The API server's answer to a SelfSubjectAccessReview; ``resource`` may name a subresource
    (``pods/log``)."""
    plural, _, subresource = resource.partition("/")
    attributes = {"namespace": namespace, "group": group, "resource": plural, "verb": verb}
    if subresource:
        attributes["subresource"] = subresource
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = client.create(ACCESS_REVIEW_PATH, review)
    return bool((answer.get("status") or {}).get("allowed"))


def check_access(
    client: KubeClient, namespace: str, wanted: Access = REQUIRED_ACCESS, name: str = "permissions"
) -> dict[str, Any]:
    """Each verb of ``wanted`` asked of the API server (SelfSubjectAccessReview); a refusal names
    every verb missing and the rules that grant them."""
    try:
        missing = denied(client, namespace, wanted)
        optional = denied(client, namespace, OPTIONAL_ACCESS)
    except KubeError as exc:
        return _result(name, False, f"cannot ask for a SelfSubjectAccessReview: {exc}")
    note = ""
    if optional:
        note = f"; without {', '.join(shown(optional))}, measure reports no CPU/memory usage"
    if missing:
        return _result(
            name, False,
            f"not allowed in namespace {namespace!r}: {', '.join(shown(missing))} "
            f"(grant them with the Role in deploy/kubernetes){note}",
            access_remedy(namespace, missing),
        )  # fmt: skip
    return _result(name, True, f"every verb the connector uses is allowed in namespace {namespace!r}{note}")


def denied(client: KubeClient, namespace: str, wanted: Access) -> list[tuple[str, str, str]]:
    """The (group, resource, verb) of ``wanted`` the API server says the credentials may not use."""
    refused = []
    for group, resource, verbs in wanted:
        for verb in verbs:
            if not allowed(client, namespace, group, resource, verb):
                refused.append((group, resource, verb))
    return refused


def shown(refused: list[tuple[str, str, str]]) -> list[str]:
    """``patch deployments.apps``, ``watch pods``: each refused verb as kubectl names it."""
    return [f"{verb} {qualified(group, resource)}" for group, resource, verb in refused]


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
            order = bounds.reported()
            value = resource_value(container, resource, order)
            if value is None:
                missing = (
                    f"neither a {resource} request nor a limit"
                    if len(order) > 1
                    else f"no {resource} {order[0]} (get: [{order[0]}])"
                )
                problems.append(f"container {container_config.name!r} has {missing}")
                quantity = f"{bounds.min:g}" if resource == "cpu" else f"{bounds.min:g}Gi"
                amount = shlex.quote(f"--{order[0]}s={resource}={quantity}")
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
