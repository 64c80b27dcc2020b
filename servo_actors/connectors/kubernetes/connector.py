"""The ``kubernetes`` connector: CPU, memory, env and replicas of Deployments and StatefulSets, and HPA bounds.

Every operation reads the cluster afresh (nothing is kept between commands), so a connector
started after a cancel sees the cluster as it is. See docs/connectors/kubernetes.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from pydantic import BaseModel

from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.connectors.kubernetes import measurement, tuning, tuning_checks
from servo_actors.connectors.kubernetes.adjustment import Adjustment, ConflictError
from servo_actors.connectors.kubernetes.checks import run_checks
from servo_actors.connectors.kubernetes.client import (
    KubeApiError,
    KubeClient,
    KubeError,
    KubeTimeout,
    KubeUnreachable,
)
from servo_actors.connectors.kubernetes.cluster import read_states
from servo_actors.connectors.kubernetes.config import KubernetesConfig
from servo_actors.connectors.kubernetes.kubeconfig import KubeConfigError, resolve_access
from servo_actors.connectors.kubernetes.rollout import RolloutFailed, RolloutWatcher
from servo_actors.connectors.kubernetes.settings import (
    ClusterStateError,
    DeploymentTargets,
    SettingError,
    describe_components,
    requested_targets,
)
from servo_actors.connectors.wait import wait_with_progress
from servo_actors.durations import format_duration

__all__ = [
    "KubernetesConnector",
    "PATCHED",
    "PROGRESS_INTERVAL",
    "ROLLED_OUT",
]

PROGRESS_INTERVAL = 1.0
"""Seconds between progress reports while a measurement waits."""
PATCHED, ROLLED_OUT = 5.0, 90.0
"""Progress (percent) when the patches are sent, and when every rollout is done (settlement follows)."""


class KubernetesConnector(Connector):
    """Optimizes Deployments and StatefulSets (see the module docstring and docs/connectors/kubernetes.md)."""

    config_model: ClassVar[type[BaseModel]] = KubernetesConfig
    config: KubernetesConfig

    @classmethod
    def operation_seconds(cls, config: KubernetesConfig, operation: str, control: Control) -> float:
        """An ADJUST waits up to ``timeout`` for the rollout, then the settlement; with
        ``on_failure: rollback`` a failure near the end is rolled back, which may take as long
        again. The supervisor allows that much (plus its grace) before it kills the connector."""
        if operation != "adjust":
            return 0.0
        rollout = config.timeout + (control.settlement or config.settlement)
        return 2 * rollout if config.on_failure == "rollback" else rollout

    @classmethod
    def config_warnings(cls, config: KubernetesConfig) -> list[str]:
        """The kubeconfig as ``check`` reads it (files only: no request, no credential plugin run):
        a missing or unusable one is named in ``check``'s own words."""
        try:
            resolve_access(config.kubeconfig, config.context)
        except KubeConfigError as exc:
            return [str(exc)]
        return []

    def describe(self) -> dict[str, Any]:
        with self._cluster("describe") as client:
            components = self._describe_all(client)
            with_usage = measurement.metrics_api_available(client, self.config.namespace)
        names = [d.name for d in self.config.workloads]
        metrics = measurement.metric_descriptors(names, with_usage)
        metrics.update(tuning.tuning_metric_descriptors(self.config, with_usage))
        return {"components": components, "metrics": metrics}

    def _describe_all(self, client: KubeClient) -> dict[str, Any]:
        """Every component: the Deployments' (pinned under ``strategy: tuning``) and the tuning pods'."""
        components = describe_components(self.config, read_states(client, self.config))
        tuning.pin_main_components(self.config, components)
        components.update(tuning.describe_tuning(client, self.config))
        return components

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        try:
            components, trial = tuning.split_components(self.config, components)
            targets = requested_targets(self.config, components)
        except SettingError as exc:
            raise ConnectorFailure(str(exc), reason="invalid-setting") from None
        settlement = control.settlement or self.config.settlement
        with self._cluster("adjust") as client:
            try:
                tuning.check_pinned(client, self.config, trial)
            except SettingError as exc:
                raise ConnectorFailure(str(exc), reason="invalid-setting") from None
            adjustment = self._patch_all(client, targets)
            touched = adjustment.touched
            progress(PATCHED, f"patched {', '.join(touched)}" if touched else "nothing to change")
            if touched:
                self._roll_out(client, adjustment, settlement, progress)
            if trial.targets:
                tuning.adjust_tuning(client, self.config, trial, settlement, _scaled(progress, PATCHED, 99.0))
            described = self._describe_all(client)
        progress(100, "adjusted")
        return described

    def _patch_all(self, client: KubeClient, targets: dict[str, DeploymentTargets]) -> Adjustment:
        """Send every patch; a refusal puts back the patches already sent and ends the adjustment."""
        adjustment = Adjustment(client, self.config.namespace)
        try:
            for state in read_states(client, self.config, list(targets)):
                adjustment.apply(state, targets[state.config.name])
        except SettingError as exc:
            self._undo_partial(adjustment)
            raise ConnectorFailure(str(exc), reason="invalid-setting") from None
        except ClusterStateError as exc:
            self._undo_partial(adjustment)
            raise ConnectorFailure(f"adjust: {exc}", reason=exc.reason) from None
        except KubeApiError as exc:
            self._undo_partial(adjustment)
            if exc.status == 422:  # e.g. a request above the limit left in place by `set`
                raise ConnectorFailure(
                    f"the API server refused the new settings: {exc}", reason="invalid-setting"
                ) from None
            raise
        return adjustment

    def _roll_out(
        self, client: KubeClient, adjustment: Adjustment, settlement: float, progress: ProgressFn
    ) -> None:
        """Wait for the rollouts and the settlement; on failure apply ``on_failure`` and say both."""
        watcher = RolloutWatcher(
            client, self.config.namespace, kinds=self.config.kinds(), failure_grace=self.config.failure_grace
        )
        try:
            watcher.wait(adjustment.touched, self.config.timeout, _scaled(progress, PATCHED, ROLLED_OUT))
            watcher.settle(adjustment.touched, settlement, _scaled(progress, ROLLED_OUT, 99.0))
        except RolloutFailed as failure:
            outcome = self._recover(adjustment, watcher, progress)
            diagnosis = failure.diagnosis
            what = diagnosis.message.rstrip(".")
            workload = f"{watcher.kind(failure.deployment)} {failure.deployment}"
            if not what.startswith(workload):
                what = f"{workload}: {what}"
            raise ConnectorFailure(
                f"{what}. {outcome}", status=diagnosis.status, reason=diagnosis.reason
            ) from None

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        if not metrics:
            return {"metrics": {}, "annotations": {}}
        names = [d.name for d in self.config.workloads]
        kinds = self.config.kinds()
        extra = tuning.TuningMeasure(self.config, metrics)
        wanted = {}
        for metric in extra.rest:
            split = measurement.split_metric(metric, names)
            if split is None:
                raise ConnectorFailure(
                    f"connector {self.name!r} does not describe metric {metric!r}", reason="unknown-metric"
                )
            wanted[metric] = split
        namespace = self.config.namespace
        restart_names = {d for d, kind in wanted.values() if kind == "restarts"}
        with self._cluster("measure") as client:
            restarts_before = {d: measurement.restarts(client, namespace, d, kinds[d]) for d in restart_names}
            extra.start(client)
        seconds = control.warmup + control.duration + control.delay
        wait_with_progress(
            seconds, progress, interval=PROGRESS_INTERVAL, end_percent=99,
            message=lambda elapsed: f"measuring ({format_duration(round(seconds - elapsed))} left)",
        )  # fmt: skip
        measured: dict[str, Any] = {}
        annotations: dict[str, str] = {}
        usages: dict[str, measurement.Usage] = {}
        with self._cluster("measure") as client:
            measured.update(extra.finish(client))
            annotations.update({f"{self.name}:{metric}": note for metric, note in extra.notes.items()})
            for metric, (deployment, kind) in wanted.items():
                unit = {**measurement.BASE_METRICS, **measurement.USAGE_METRICS}[kind]
                if kind == "ready_replicas":
                    value: float = measurement.ready_replicas(
                        client, namespace, deployment, kinds[deployment]
                    )
                elif kind == "restarts":
                    value = (
                        measurement.restarts(client, namespace, deployment, kinds[deployment])
                        - restarts_before[deployment]
                    )
                else:
                    try:
                        if deployment not in usages:  # one read for cpu and memory
                            usages[deployment] = measurement.usage(
                                client, namespace, deployment, kinds[deployment]
                            )
                    except KubeError as exc:
                        annotations[f"{self.name}:{metric}"] = f"metrics.k8s.io did not answer: {exc}"
                        continue
                    found = usages[deployment]
                    gap = found.gap()
                    if gap is not None:  # a sum short of some pods is a wrong number: leave it out
                        annotations[f"{self.name}:{metric}"] = gap
                        continue
                    value = found.cores if kind == "cpu_usage" else found.gib
                measured[metric] = {"unit": unit, "value": max(0, value) if kind == "restarts" else value}
        progress(100, "measured")
        return {"metrics": measured, "annotations": annotations}

    def check(self) -> list[dict[str, Any]]:
        try:
            client = self._client()
        except ConnectorFailure as exc:
            return [{"name": "kubeconfig", "success": False, "message": exc.message}]
        try:
            results = run_checks(client, self.config)
            if results and results[0]["success"]:  # the API answers
                results.extend(tuning_checks.extra_checks(client, self.config))
            return results
        except KubeConfigError as exc:  # e.g. a credential plugin that fails
            return [{"name": "kubeconfig", "success": False, "message": str(exc)}]
        finally:
            client.close()

    # -- failure handling ----------------------------------------------------------------------

    def _recover(self, adjustment: Adjustment, watcher: RolloutWatcher, progress: ProgressFn) -> str:
        """Apply ``on_failure``; a sentence saying what was done."""
        policy = self.config.on_failure
        if policy == "ignore":
            return "The new settings were left in place (on_failure: ignore)."
        try:
            if policy == "shutdown":
                names = adjustment.shutdown()
                return f"Scaled {', '.join(names)} to zero replicas (on_failure: shutdown)."
            names = adjustment.rollback()
            progress(ROLLED_OUT, f"rolling back {', '.join(names)}")
            watcher.wait(names, self.config.timeout, _scaled(progress, ROLLED_OUT, 99.0), replace_stuck=True)
            return f"Rolled {', '.join(names)} back to the previous settings, which are healthy again."
        except RolloutFailed as again:
            return f"The rollback did not become healthy either: {again}."
        except (KubeError, ConflictError) as exc:
            return f"The {policy} failed: {exc}."

    def _undo_partial(self, adjustment: Adjustment) -> None:
        """A refused setting after some patches went out: put those back (no waiting)."""
        if adjustment.touched:
            try:
                adjustment.rollback()
            except (KubeError, ConflictError):
                pass  # the refusal is what gets reported; the next describe shows the cluster as it is

    # -- plumbing ------------------------------------------------------------------------------

    def _client(self) -> KubeClient:
        try:
            access = resolve_access(self.config.kubeconfig, self.config.context)
            return KubeClient(access, self.config.request_timeout)
        except KubeConfigError as exc:
            raise ConnectorFailure(str(exc), reason="kubeconfig-invalid") from None

    @contextmanager
    def _cluster(self, what: str) -> Iterator[KubeClient]:
        """A client for one operation; API and cluster errors become failures naming what was done."""
        client = self._client()
        try:
            yield client
        except KubeConfigError as exc:
            raise ConnectorFailure(str(exc), reason="kubeconfig-invalid") from None
        except KubeUnreachable as exc:
            raise ConnectorFailure(f"{what}: {exc}", reason="kubernetes-unreachable") from None
        except KubeTimeout as exc:
            raise ConnectorFailure(f"{what}: {exc}", reason="kubernetes-timeout") from None
        except KubeApiError as exc:
            reason = "kubernetes-forbidden" if exc.status == 403 else "kubernetes-error"
            raise ConnectorFailure(f"{what}: {exc}", reason=reason) from None
        except KubeError as exc:
            raise ConnectorFailure(f"{what}: {exc}", reason="kubernetes-error") from None
        except ConflictError as exc:
            raise ConnectorFailure(f"{what}: {exc}", reason="conflict") from None
        except ClusterStateError as exc:
            raise ConnectorFailure(f"{what}: {exc}", reason=exc.reason) from None
        finally:
            client.close()


def _scaled(progress: ProgressFn, start: float, end: float) -> Callable[[float, str], None]:
    """``report(fraction, message)`` mapped onto progress percent between ``start`` and ``end``;
    it never goes back (old pods leaving can make the replica counts dip)."""
    highest = [start]

    def report(fraction: float, message: str) -> None:
        highest[0] = max(highest[0], start + (end - start) * max(0.0, min(1.0, fraction)))
        progress(round(highest[0], 1), message)

    return report
