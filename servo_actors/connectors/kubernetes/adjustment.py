"""Applying an adjustment's patches (re-read and retry on 409), remembering what they replaced,
and putting it back (``rollback``) or scaling to zero (``shutdown``) when the rollout fails.

What was replaced lives only in this object: a connector killed mid-adjustment (a cancel) loses
it, and the next command's connector starts from the cluster as it then is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servo_actors.connectors.kubernetes.client import KubeApiError, KubeClient, hpa_path, workload_path
from servo_actors.connectors.kubernetes.patches import (
    Owned,
    deployment_patch,
    hpa_owned,
    hpa_patch,
    hpa_wanted,
    owned_fields,
    wanted_fields,
)
from servo_actors.connectors.kubernetes.settings import (
    ClusterStateError,
    DeploymentState,
    DeploymentTargets,
    SettingError,
)
from servo_actors.errors import ConnectorError

__all__ = [
    "Adjustment",
    "Builder",
    "ConflictError",
    "MAX_CONFLICT_RETRIES",
    "patch_with_retry",
]

MAX_CONFLICT_RETRIES = 5
"""How many times a patch answered 409 Conflict is rebuilt from a fresh read and sent again."""

Builder = Callable[[dict[str, Any]], dict[str, Any] | None]


class ConflictError(ConnectorError):
    """A patch kept meeting concurrent changes (409) past MAX_CONFLICT_RETRIES."""


def patch_with_retry(
    client: KubeClient, path: str, first: dict[str, Any] | None, build: Builder
) -> dict[str, Any] | None:
    """Build a patch from the object (``first``, else read), send it, and on 409 read again and
    rebuild. Returns the object the sent patch was built from, or None when nothing needed changing."""
    obj = first
    for _ in range(MAX_CONFLICT_RETRIES + 1):
        if obj is None:
            obj = client.get(path)
        patch = build(obj)
        if patch is None:
            return None
        try:
            client.patch(path, patch)
            return obj
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            obj = None  # someone else wrote it since our read: read again and rebuild
    raise ConflictError(
        f"PATCH {path}: still conflicting after {MAX_CONFLICT_RETRIES} retries (409 Conflict)"
    )


def _resource_version(obj: dict[str, Any]) -> str | None:
    return obj.get("metadata", {}).get("resourceVersion")


@dataclass
class Adjustment:
    """The patches of one ADJUST and what they replaced."""

    client: KubeClient
    namespace: str
    deployments: dict[str, tuple[DeploymentState, DeploymentTargets, Owned]] = field(default_factory=dict)
    hpas: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """Deployment name -> (HPA name, its owned fields before)."""
    kinds: dict[str, str] = field(default_factory=dict)
    """Workload name -> kind (``Deployment`` / ``StatefulSet``), for every workload applied."""

    @property
    def touched(self) -> list[str]:
        """The workloads whose rollout to wait for, in config order of patching."""
        return list(dict.fromkeys([*self.deployments, *self.hpas]))

    def _path(self, name: str) -> str:
        return workload_path(self.namespace, self.kinds.get(name, "Deployment"), name)

    def apply(self, state: DeploymentState, targets: DeploymentTargets) -> None:
        """Patch the Deployment (and its HPA) towards ``targets``; record what each patch replaced."""
        name = state.config.name
        if targets.replicas is not None and state.hpa is not None:
            raise SettingError(
                f"{name}: replicas is not offered while HorizontalPodAutoscaler "
                f"{state.hpa['metadata']['name']!r} controls the {state.config.kind}; adjust its hpa_* settings"
            )
        if targets.hpa and state.hpa is None:
            raise SettingError(f"{name}: no HorizontalPodAutoscaler targets the {state.config.kind}")
        config = state.config
        self.kinds[name] = config.kind
        template_or_scale = targets.replicas is not None or any(
            t.cpu is not None or t.memory is not None or t.env for t in targets.containers.values()
        )
        strategy = (state.deployment.get("spec", {}).get("updateStrategy") or {}).get("type")
        if config.kind == "StatefulSet" and strategy == "OnDelete" and (template_or_scale or targets.hpa):
            raise ClusterStateError(
                f"StatefulSet {name!r} has updateStrategy OnDelete: its pods take a new template only "
                "when someone deletes them, so new settings would never roll out on their own; switch it "
                "to RollingUpdate or leave it out of the adjustment",
                reason="statefulset-on-delete",
            )
        if state.deployment.get("spec", {}).get("paused") and template_or_scale:
            raise ClusterStateError(
                f"Deployment {name!r} is paused, so new settings would not roll out: resume it "
                f"(kubectl rollout resume deployment/{name}) or leave it out of the adjustment",
                reason="deployment-paused",
            )
        captured: dict[str, Owned] = {}

        def build(obj: dict[str, Any]) -> dict[str, Any] | None:
            before = owned_fields(obj, targets, config)
            captured["before"] = before
            return deployment_patch(before, wanted_fields(before, targets, config), _resource_version(obj))

        if patch_with_retry(self.client, self._path(name), state.deployment, build) is not None:
            self.deployments[name] = (state, targets, captured["before"])
        if targets.hpa and state.hpa is not None:
            hpa_name = state.hpa["metadata"]["name"]
            hpa_before: dict[str, Any] = {}

            def build_hpa(obj: dict[str, Any]) -> dict[str, Any] | None:
                before = hpa_owned(obj)
                hpa_before.update(before)
                try:
                    wanted = hpa_wanted(before, targets.hpa)
                except ValueError as exc:
                    raise SettingError(f"{name}: {exc}") from None
                return hpa_patch(before, wanted, _resource_version(obj))

            if (
                patch_with_retry(self.client, hpa_path(self.namespace, hpa_name), state.hpa, build_hpa)
                is not None
            ):
                self.hpas[name] = (hpa_name, dict(hpa_before))

    def rollback(self) -> list[str]:
        """Patch back every value this adjustment replaced; the workloads to wait for."""
        for name, (state, targets, before) in self.deployments.items():

            def build(
                obj: dict[str, Any],
                state: DeploymentState = state,
                targets: DeploymentTargets = targets,
                before: Owned = before,
            ) -> dict[str, Any] | None:
                now = owned_fields(obj, targets, state.config)
                return deployment_patch(now, before, _resource_version(obj))

            patch_with_retry(self.client, self._path(name), None, build)
        for hpa_name, before in self.hpas.values():

            def build_hpa(obj: dict[str, Any], before: dict[str, Any] = before) -> dict[str, Any] | None:
                return hpa_patch(hpa_owned(obj), before, _resource_version(obj))

            patch_with_retry(self.client, hpa_path(self.namespace, hpa_name), None, build_hpa)
        return self.touched

    def shutdown(self, also: list[str] | None = None) -> list[str]:
        """Scale every touched workload, and those ``also`` named (applied but not patched), to
        zero (an HPA leaves a workload at zero alone); their names."""
        names = list(dict.fromkeys([*self.touched, *(also or [])]))
        for name in names:

            def build(obj: dict[str, Any]) -> dict[str, Any] | None:
                if obj.get("spec", {}).get("replicas") == 0:
                    return None
                return {"metadata": {"resourceVersion": _resource_version(obj)}, "spec": {"replicas": 0}}

            patch_with_retry(self.client, self._path(name), None, build)
        return names
