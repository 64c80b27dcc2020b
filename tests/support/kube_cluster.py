"""An emulated Kubernetes cluster for tests: kmock over real HTTP on loopback, plus the controllers.

    cluster = KubeCluster.start(tmp_path)
    try:
        cluster.add_deployment("web", containers=[{"name": "main", "image": "nginx:1.25",
                                                   "resources": {"requests": {"cpu": "500m"}}}])
        cluster.controller(FailureMode.HEALTHY, rollout_seconds=0.2)
        # point the code under test at cluster.kubeconfig; inspect with cluster.get("deployment", "web")
    finally:
        cluster.stop()

The API contract (KUBE_CONTRACT.md) is implemented by kube_apiserver (HTTP semantics on top of
kmock), kube_apihost (thread, port, down/up), kube_controllers and kube_pod_states (what the
controller-manager, scheduler and kubelet would write). Deployments added here start settled:
rolled out healthy at revision 1, as if they existed before the test.

Not emulated (a real cluster may differ here): server-side apply (415) and managedFields;
admission (quotas, LimitRanges, webhooks) beyond the validation of kube_validation; kinds other
than Deployment, ReplicaSet, Pod, autoscaling/v2 HPA, core/v1 Event, Namespace (read only) and
metrics.k8s.io PodMetrics (other URLs get kmock's plain emulation); watch bookmarks and
resourceVersionMatch; minReadySeconds, revisionHistoryLimit and proportional scaling in the
deployment controller; the HPA's stabilization windows and behavior (it holds its desired count
and takes other values back at once); pod states are scripted per FailureMode on one node, and a
running pod stays Terminating for one rollout period rather than its grace period.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kube_objects
import kube_tls
import kube_validation
import yaml
from kube_apihost import KubeApiHost
from kube_apiserver import EmulatedApiServer
from kube_controller_thread import ControllerThread
from kube_controllers import Controllers
from kube_pod_states import FailureMode
from kube_store import WATCH_HISTORY

__all__ = ["KubeCluster", "FailureMode"]

TOKEN = "emulated-cluster-token"
"""The bearer token in the kubeconfig; the emulated server answers 401 to requests without it."""
CONTEXT = "emulated"
CONTROLLER_STOP_TIMEOUT = 10.0


class KubeCluster:
    """One emulated cluster; see the module docstring and KUBE_CONTRACT.md."""

    def __init__(
        self,
        directory: Path,
        watch_history: int = WATCH_HISTORY,
        tls: bool = False,
        client_cert: bool = False,
    ) -> None:
        self._server = EmulatedApiServer(token=TOKEN, watch_history=watch_history)
        self.pki = kube_tls.make_pki(Path(directory) / "pki") if tls or client_cert else None
        self.client_cert = client_cert
        self._host = KubeApiHost(self._server, self.pki.server_context() if self.pki else None)
        self._controllers = Controllers(self._server.store, self._server.usage)
        self._thread: ControllerThread | None = None
        self._controller_errors: list[BaseException] = []
        self.kubeconfig = Path(directory) / "kubeconfig"

    @classmethod
    def start(
        cls, directory: Path, watch_history: int = WATCH_HISTORY, tls: bool = False, client_cert: bool = False
    ) -> KubeCluster:
        """Start the API server on a free loopback port and write the kubeconfig into ``directory``.

        ``watch_history``: how many changes a watch can resume across before it gets 410 Gone.
        ``tls``: serve https with a CA of its own (``cluster.pki``), named in the kubeconfig by
        certificate-authority-data. ``client_cert`` (implies tls): the kubeconfig's user has a client
        certificate and key instead of the token.
        """
        cluster = cls(directory, watch_history, tls, client_cert)
        cluster._host.start()
        cluster._write_kubeconfig()
        return cluster

    @property
    def url(self) -> str:
        return self._host.url

    @property
    def token(self) -> str:
        return TOKEN

    def _write_kubeconfig(self) -> None:
        cluster: dict[str, Any] = {"server": self.url}
        user: dict[str, Any] = {"token": TOKEN}
        if self.pki is not None:
            cluster["certificate-authority-data"] = self.pki.data(self.pki.ca_cert)
        if self.pki is not None and self.client_cert:
            user = {
                "client-certificate-data": self.pki.data(self.pki.client_cert),
                "client-key-data": self.pki.data(self.pki.client_key),
            }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT, "cluster": cluster}],
            "users": [{"name": CONTEXT, "user": user}],
            "contexts": [
                {"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"}}
            ],
            "current-context": CONTEXT,
        }
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))

    # ---- objects ------------------------------------------------------------------------------------

    def add_deployment(
        self,
        name: str,
        namespace: str = "default",
        containers: list[dict[str, Any]] | None = None,
        replicas: int = 2,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A Deployment already rolled out (revision 1, ``replicas`` ready pods); returns it as stored."""
        containers = containers or [{"name": "main", "image": "nginx:1.25"}]
        deployment = kube_objects.deployment(name, namespace, containers, replicas, labels)

        self._check(kube_objects.KINDS["deployment"], deployment)

        def create() -> dict[str, Any]:
            self._server.store.commit(kube_objects.KINDS["deployment"], deployment)
            self._controllers.settle(namespace, name)
            stored = self._server.store.get(kube_objects.KINDS["deployment"], namespace, name)
            assert stored is not None
            return stored

        return self._host.call(create)

    def add_hpa(
        self,
        name: str,
        target_deployment: str,
        namespace: str = "default",
        min_replicas: int = 1,
        max_replicas: int = 5,
        target_cpu_utilization: int = 70,
    ) -> dict[str, Any]:
        """An autoscaling/v2 HPA on ``target_deployment``; the HPA controller then owns its spec.replicas."""
        hpa = kube_objects.hpa(
            name, namespace, target_deployment, min_replicas, max_replicas, target_cpu_utilization
        )
        self._check(kube_objects.KINDS["hpa"], hpa)
        return self._host.call(self._server.store.commit, kube_objects.KINDS["hpa"], hpa)

    @staticmethod
    def _check(kind: kube_objects.Kind, obj: dict[str, Any]) -> None:
        """The API server's validation (and quantity canonicalization) of an object a test adds."""
        problems = kube_validation.normalize_and_validate(kind, obj, None)
        if problems:
            raise ValueError(kube_validation.message(kind, obj["metadata"]["name"], problems))

    def get(self, kind: str, name: str, namespace: str = "default") -> dict[str, Any]:
        """The stored object (a copy); KeyError if there is none. kind: deployment, hpa, replicaset, pod, event."""
        obj = self._host.call(self._server.store.get, kube_objects.KINDS[kind], namespace, name)
        if obj is None:
            raise KeyError(f"no {kind} {namespace}/{name} in the emulated cluster")
        return obj

    def list(self, kind: str, namespace: str = "default") -> list[dict[str, Any]]:
        """All stored objects of a kind in a namespace (copies)."""
        return self._host.call(self._server.store.list, kube_objects.KINDS[kind], namespace)

    def pods(self, deployment: str, namespace: str = "default") -> list[dict[str, Any]]:
        """The pods of a Deployment's ReplicaSets, Terminating ones (metadata.deletionTimestamp) included."""
        return [
            pod for pod in self.list("pod", namespace) if pod["metadata"]["name"].startswith(f"{deployment}-")
        ]

    @property
    def patch_log(self) -> list[tuple[str, str, Any, dict[str, str]]]:
        """(method, path, body, headers) of every write received over HTTP, oldest first: refused ones
        (409, 403, 415, 422) too, so a test sees the retries."""
        return [
            (write.method, write.path, copy.deepcopy(write.body), dict(write.headers))
            for write in self._host.call(list, self._server.writes)
        ]

    # ---- controllers --------------------------------------------------------------------------------

    def controller(
        self,
        mode: FailureMode = FailureMode.HEALTHY,
        rollout_seconds: float = 0.2,
        on: Iterable[str] | None = None,
    ) -> None:
        """Start (or reconfigure) the controllers; ``on`` limits the Deployment controller to those names."""

        def configure() -> None:
            self._controllers.mode = mode
            self._controllers.rollout_seconds = rollout_seconds
            self._controllers.only = None if on is None else tuple(on)

        self._host.call(configure)
        if self._thread is None:
            self._thread = ControllerThread(self._controller_pass, lambda: self._controllers.next_due)
            self._controller_errors = self._thread.errors
            self._server.store.on_change = self._thread.wake
            self._thread.start()
        self._thread.wake()

    def set_mode(self, mode: FailureMode) -> None:
        """The mode for ReplicaSets created from now on (the next rollout)."""

        def configure() -> None:
            self._controllers.mode = mode

        self._host.call(configure)

    def controller_stuck_on(self, deployment: str, generation: int, namespace: str = "default") -> bool:
        """Whether the STUCK mode left that generation of the Deployment unobserved for good."""
        uid = self.get("deployment", deployment, namespace)["metadata"]["uid"]
        return self._host.call(self._controllers.memory.stuck.get, uid) == generation

    @property
    def controller_errors(self) -> list[BaseException]:
        """Exceptions raised inside controller passes (a test may assert there are none)."""
        return list(self._controller_errors)

    def _controller_pass(self) -> None:
        if self._host.listening:
            self._host.call(self._controllers.reconcile, time.monotonic())

    # ---- faults ------------------------------------------------------------------------------------

    def conflict_next(self, kind: str, name: str, times: int = 1, namespace: str = "default") -> None:
        """The next ``times`` HTTP writes to that object answer 409 Conflict."""

        def arm() -> None:
            key = (kube_objects.KINDS[kind].short, namespace, name)
            self._server.conflicts[key] = self._server.conflicts.get(key, 0) + times

        self._host.call(arm)

    def deny(self, verb: str, resource: str, group: str = "") -> None:
        """RBAC refuses ``verb`` on ``resource`` (plural) of ``group``: SSAR says allowed=false, requests get 403."""
        self._host.call(self._server.access.denied.add, (verb, resource, group))

    def allow(self, verb: str, resource: str, group: str = "") -> None:
        """Undo a ``deny``."""
        self._host.call(self._server.access.denied.discard, (verb, resource, group))

    def restrict_to_role(self, role: dict[str, Any] | Path | None) -> None:
        """Allow exactly a Role's rules (a manifest dict or YAML file, e.g. deploy/kubernetes/role.yaml).

        Requests outside it answer 403 and SelfSubjectAccessReviews say allowed=false; ``deny`` still
        removes more. None goes back to allowing everything.
        """
        rules = yaml.safe_load(Path(role).read_text()) if isinstance(role, Path) else role
        self._host.call(self._server.access.restrict_to, rules)

    def down(self) -> None:
        """Close the API server's socket: connection refused, open watches end; the state is kept."""
        self._host.unplug()

    def up(self) -> None:
        """Listen again on the same port, with the same state."""
        self._host.plug()
        if self._thread is not None:
            self._thread.wake()

    def set_metrics(
        self, pod_or_deployment: str, cpu: str = "250m", memory: str = "300Mi", namespace: str = "default"
    ) -> None:
        """metrics.k8s.io usage for a pod or every pod of a Deployment; until called, the API is absent (404)."""

        def install_and_set() -> None:
            self._server.install_metrics()
            self._server.usage.set(namespace, pod_or_deployment, cpu, memory)

        self._host.call(install_and_set)
        if self._thread is not None:
            self._thread.wake()

    def stop(self) -> None:
        """Stop the controllers and the API server (idempotent)."""
        if self._thread is not None:
            self._thread.stop(CONTROLLER_STOP_TIMEOUT)
            self._thread = None
        self._host.stop()
