"""``check`` for tuning pods, and ``servo-actors kube cleanup``.

- ``permissions (tuning pods)``: the verbs a tuning pod needs beyond the Deployment path
  (create/delete pods), asked only when the config uses the strategy.
- ``tuning pods``: the tuning pods in the namespace and whether a servo's Deployment owns each;
  one no servo owns outlives the servo (it runs outside the cluster): the message names the
  command that removes it.
- ``cleanup``: deletes the tuning pods of the configured Deployments (found by the role label and
  the annotation naming the Deployment, in each Deployment's namespace), and waits until they are gone.
"""

from __future__ import annotations

from typing import Any

from servo_actors.connectors.kubernetes.checks import access_remedy, denied, shown
from servo_actors.connectors.kubernetes.client import KubeClient, KubeError, pods_path
from servo_actors.connectors.kubernetes.config import KubernetesConfig
from servo_actors.connectors.kubernetes.tuning_adjust import TuningFailed, TuningPods
from servo_actors.connectors.kubernetes.tuning_pod import TUNING_SELECTOR, tuning_of

__all__ = [
    "CLEANUP_COMMAND",
    "TUNING_ACCESS",
    "cleanup",
    "extra_checks",
    "tuning_pods",
]

TUNING_ACCESS: tuple[tuple[str, str, tuple[str, ...]], ...] = (("", "pods", ("create", "delete")),)
"""Beyond the Deployment path's verbs: what ``strategy: tuning`` needs (deploy/kubernetes grants it)."""
CLEANUP_COMMAND = "servo-actors kube cleanup"


def _result(name: str, success: bool, message: str) -> dict[str, Any]:
    return {"name": name, "success": success, "message": message}


def extra_checks(client: KubeClient, config: KubernetesConfig) -> list[dict[str, Any]]:
    """The results to add to ``check`` (none when no workload uses the strategy): per namespace
    holding a tuning Deployment, its permissions, then the tuning pods."""
    namespaces = list(
        dict.fromkeys(config.namespace_of(d) for d in config.deployments if d.strategy == "tuning")
    )
    results = []
    for namespace in namespaces:
        name = (
            "permissions (tuning pods)" if len(namespaces) == 1 else f"permissions (tuning pods, {namespace})"
        )
        results.append(_check_access(client, namespace, TUNING_ACCESS, name))
    if namespaces:
        results.append(_check_tuning_pods(client, config))
    return results


def _check_access(
    client: KubeClient,
    namespace: str,
    wanted: tuple[tuple[str, str, tuple[str, ...]], ...],
    name: str,
) -> dict[str, Any]:
    try:
        refused = denied(client, namespace, wanted)
    except KubeError as exc:
        return _result(name, False, f"cannot ask for a SelfSubjectAccessReview: {exc}")
    if refused:
        result = _result(
            name, False,
            f"not allowed in namespace {namespace!r}: {', '.join(shown(refused))} "
            "(grant them with the Role in deploy/kubernetes)",
        )  # fmt: skip
        result["remedy"] = access_remedy(namespace, refused)
        return result
    granted = ", ".join(f"{'/'.join(verbs)} {resource}" for _, resource, verbs in wanted)
    return _result(name, True, f"allowed in namespace {namespace!r}: {granted}")


def tuning_pods(client: KubeClient, config: KubernetesConfig) -> list[tuple[str, dict[str, Any]]]:
    """The tuning pods of the configured Deployments, each with its namespace."""
    found: list[tuple[str, dict[str, Any]]] = []
    for part in config.groups():
        names = {d.name for d in part.deployments}
        if not names:
            continue
        listed = client.get(pods_path(part.namespace), {"labelSelector": TUNING_SELECTOR}).get("items") or []
        found.extend((part.namespace, pod) for pod in listed if tuning_of(pod) in names)
    return found


def _check_tuning_pods(client: KubeClient, config: KubernetesConfig) -> dict[str, Any]:
    name = "tuning pods"
    try:
        found = tuning_pods(client, config)
    except KubeError as exc:
        return _result(name, False, str(exc))
    if not found:
        return _result(name, True, "none running")
    unowned = [p["metadata"]["name"] for _, p in found if not p["metadata"].get("ownerReferences")]
    shown = ", ".join(p["metadata"]["name"] for _, p in found)
    if unowned:
        return _result(
            name, True,
            f"{shown} running; no servo owns {', '.join(unowned)}, so it stays after the servo stops: "
            f"remove it with `{CLEANUP_COMMAND}`",
        )  # fmt: skip
    return _result(name, True, f"{shown} running, owned by the servo's Deployment")


def cleanup(client: KubeClient, config: KubernetesConfig, timeout: float, dry_run: bool = False) -> list[str]:
    """Delete the tuning pods of the configured Deployments and wait until they are gone (each
    within ``timeout``); the names of the pods deleted (or, with ``dry_run``, that would be)."""
    found = [(namespace, p["metadata"]["name"]) for namespace, p in tuning_pods(client, config)]
    if dry_run:
        return [name for _, name in found]
    for namespace, name in found:
        try:
            TuningPods(client, namespace).remove(name, timeout, lambda fraction, message: None)
        except TuningFailed as exc:
            raise KubeError(str(exc)) from None
    return [name for _, name in found]
