"""What the scheduler and the kubelet would write into a pod's status, per failure mode and pod age.

Each state is a pure function of (mode, age, rollout_seconds) so a test can reason about it; the
shapes (phase, conditions, containerStatuses with state/lastState/restartCount) follow core/v1 Pod.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import kube_objects

NODE_NAME = "emulated-node"
NODE_IP = "10.0.0.10"
UNSCHEDULABLE_MESSAGE = (
    "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: "
    "1 No preemption victims found for incoming pod."
)
READINESS_FAILURE = "Readiness probe failed: HTTP probe failed with statuscode: 503"


class FailureMode(enum.Enum):
    """How the pods of ReplicaSets created while the mode is set behave (see KUBE_CONTRACT.md)."""

    HEALTHY = "healthy"
    UNSCHEDULABLE = "unschedulable"
    CRASHLOOP = "crashloop"
    IMAGE_PULL = "image_pull"
    PROGRESS_DEADLINE = "progress_deadline"
    REPLICA_FAILURE = "replica_failure"
    UNSTABLE = "unstable"
    STUCK = "stuck"


@dataclass(frozen=True)
class PodState:
    """A pod's observable state; ``label`` changes exactly when an event is due."""

    label: str
    ready: bool
    restarts: int = 0


def state_for(
    mode: FailureMode, age: float, rollout_seconds: float, settled: float | None = None
) -> PodState:
    """The state of a pod ``age`` seconds old whose ReplicaSet was made under ``mode``.

    ``settled``: seconds since the rollout of the pod's ReplicaSet completed (None: not yet). An
    UNSTABLE pod stays ready until one period after that, then loses readiness with a container
    restart for one period, is ready again for one, and so on: all of the ReplicaSet's pods together.
    """
    if mode is FailureMode.UNSCHEDULABLE:
        return PodState("unschedulable", False)
    if age < rollout_seconds:
        return PodState("creating", False)
    cycles = int((age - rollout_seconds) / rollout_seconds) if rollout_seconds > 0 else 0
    if mode is FailureMode.CRASHLOOP:
        return PodState("crashloop", False, restarts=1 + cycles)
    if mode is FailureMode.IMAGE_PULL:
        return PodState("errimagepull" if cycles % 2 == 0 else "imagepullbackoff", False)
    if mode is FailureMode.PROGRESS_DEADLINE:
        return PodState("unready", False)
    if mode is FailureMode.UNSTABLE and settled is not None and settled >= rollout_seconds > 0:
        phase = int((settled - rollout_seconds) / rollout_seconds)
        if phase % 2 == 0:
            return PodState("restarted", False, restarts=phase // 2 + 1)
        return PodState("running", True, restarts=(phase + 1) // 2)
    return PodState("running", True)


def next_change(
    mode: FailureMode, age: float, rollout_seconds: float, settled: float | None = None
) -> float | None:
    """Seconds until ``state_for`` changes for a pod of this age, or None if only an event can change it."""
    if mode is FailureMode.UNSCHEDULABLE or rollout_seconds <= 0:
        return None
    if age < rollout_seconds:
        return rollout_seconds - age
    if mode in (FailureMode.CRASHLOOP, FailureMode.IMAGE_PULL):
        return rollout_seconds - (age - rollout_seconds) % rollout_seconds
    if mode is FailureMode.UNSTABLE and settled is not None:
        return rollout_seconds - settled % rollout_seconds
    return None


def _pod_ref(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta['name']}_{meta['namespace']}({meta.get('uid', '')})"


def _container_status(
    container: dict[str, Any], state: PodState, pod: dict[str, Any], started_at: str
) -> dict[str, Any]:
    name, image = container["name"], container.get("image", "")
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": ""
        if state.label in ("creating", "errimagepull", "imagepullbackoff")
        else f"docker.io/library/{image}@sha256:{kube_objects.safe_suffix(image, 12)}",
        "ready": state.ready,
        "restartCount": state.restarts,
        "started": state.label in ("running", "restarted", "unready"),
        "lastState": {},
    }
    container_id = f"containerd://{kube_objects.safe_suffix(pod['metadata']['name'] + name, 20)}"
    if state.label == "creating":
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}
    elif state.label == "errimagepull":
        status["state"] = {
            "waiting": {
                "reason": "ErrImagePull",
                "message": (
                    f'failed to pull and unpack image "docker.io/library/{image}": failed to resolve reference '
                    f'"docker.io/library/{image}": docker.io/library/{image}: not found'
                ),
            }
        }
    elif state.label == "imagepullbackoff":
        status["state"] = {
            "waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
        }
    elif state.label == "crashloop":
        status["state"] = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": (f"back-off 10s restarting failed container={name} pod={_pod_ref(pod)}"),
            }
        }
    else:
        status["containerID"] = container_id
        status["state"] = {"running": {"startedAt": started_at}}
    if state.restarts:
        status["lastState"] = {
            "terminated": {
                "exitCode": 1,
                "reason": "Error",
                "startedAt": started_at,
                "finishedAt": kube_objects.now(),
                "containerID": container_id,
            }
        }
    return status


def pod_status(pod: dict[str, Any], state: PodState) -> dict[str, Any]:
    """The pod's new status for ``state``, keeping condition timestamps that did not change."""
    previous = {cond["type"]: cond for cond in pod.get("status", {}).get("conditions", [])}
    old = pod.get("status", {})
    status: dict[str, Any] = {"phase": "Pending", "qosClass": old.get("qosClass", "BestEffort")}

    def cond(kind: str, ok: bool, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
        return kube_objects.condition(kind, ok, reason, message, previous.get(kind), workload=False)

    if state.label == "unschedulable":
        status["conditions"] = [cond("PodScheduled", False, "Unschedulable", UNSCHEDULABLE_MESSAGE)]
        return status
    started_at = old.get("startTime") or kube_objects.now()
    containers = pod["spec"].get("containers", [])
    unready = [container["name"] for container in containers] if not state.ready else []
    unready_message = f"containers with unready status: [{' '.join(unready)}]"
    status.update(
        {
            "phase": "Pending"
            if state.label in ("creating", "errimagepull", "imagepullbackoff")
            else "Running",
            "hostIP": NODE_IP,
            "hostIPs": [{"ip": NODE_IP}],
            "podIP": f"10.42.0.{1 + sum(pod['metadata']['name'].encode()) % 250}",
            "startTime": started_at,
            "conditions": [
                cond("PodReadyToStartContainers", state.label != "creating"),
                cond("Initialized", True),
                cond(
                    "Ready",
                    state.ready,
                    None if state.ready else "ContainersNotReady",
                    None if state.ready else unready_message,
                ),
                cond(
                    "ContainersReady",
                    state.ready,
                    None if state.ready else "ContainersNotReady",
                    None if state.ready else unready_message,
                ),
                cond("PodScheduled", True),
            ],
            "containerStatuses": [
                _container_status(container, state, pod, started_at) for container in containers
            ],
        }
    )
    status["podIPs"] = [{"ip": status["podIP"]}]
    return status


def events_for(
    pod: dict[str, Any], before: PodState | None, after: PodState
) -> list[tuple[str, str, bool, str]]:
    """Events (reason, message, warning, component) recorded when a pod goes from ``before`` to ``after``."""
    if before is not None and before == after:
        return []
    meta = pod["metadata"]
    image = (pod["spec"].get("containers") or [{}])[0].get("image", "")
    name = (pod["spec"].get("containers") or [{}])[0].get("name", "")
    if after.label == "unschedulable":
        return [("FailedScheduling", UNSCHEDULABLE_MESSAGE, True, "default-scheduler")]
    events = []
    if before is None or before.label == "unschedulable":
        events.append(
            (
                "Scheduled",
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {NODE_NAME}",
                False,
                "default-scheduler",
            )
        )
    if after.label == "errimagepull":
        events.append(
            (
                "Failed",
                f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to '
                f'pull and unpack image "docker.io/library/{image}": not found',
                True,
                "kubelet",
            )
        )
    elif after.label == "imagepullbackoff":
        events.append(("BackOff", f'Back-off pulling image "{image}"', True, "kubelet"))
    elif after.label == "crashloop":
        events.append(
            (
                "BackOff",
                f"Back-off restarting failed container {name} in pod {_pod_ref(pod)}",
                True,
                "kubelet",
            )
        )
    elif after.label in ("unready", "restarted"):
        events.append(("Unhealthy", READINESS_FAILURE, True, "kubelet"))
    elif after.label == "running" and (before is None or before.label != "running"):
        events.append(("Started", f"Started container {name}", False, "kubelet"))
    return events
