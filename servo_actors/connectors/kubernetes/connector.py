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
from servo_actors.connectors.kubernetes.config import KubernetesConfig, component_name, tuning_component_name
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
        again. Workloads with a namespace, timeout, settlement or on_failure of their own are
        waited on in turn, so their allowances add up. The supervisor allows that much (plus its
        grace) before it kills the connector."""
        if operation != "adjust":
            return 0.0
        total = 0.0
        for part in config.groups():
            rollout = part.timeout + (control.settlement or part.settlement)
            total += 2 * rollout if part.on_failure == "rollback" else rollout
        return total

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
        components: dict[str, Any] = {}
        metrics: dict[str, Any] = {}
        with self._cluster("describe") as client:
            usage_in: dict[str, bool] = {}
            for part in self.config.groups():
                components.update(self._describe_all(client, part))
                if part.namespace not in usage_in:
                    usage_in[part.namespace] = measurement.metrics_api_available(client, part.namespace)
                with_usage = usage_in[part.namespace]
                metrics.update(measurement.metric_descriptors([d.name for d in part.workloads], with_usage))
                metrics.update(tuning.tuning_metric_descriptors(part, with_usage))
        return {"components": components, "metrics": metrics}

    def _describe_all(self, client: KubeClient, part: KubernetesConfig) -> dict[str, Any]:
        """Every component of ``part``: the Deployments' (pinned under ``strategy: tuning``) and
        the tuning pods'."""
        components = describe_components(part, read_states(client, part))
        tuning.pin_main_components(part, components)
        components.update(tuning.describe_tuning(client, part))
        return components

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        plans = self._plans(components)
        with self._cluster("adjust") as client:
            try:
                for part, _, trial in plans:
                    tuning.check_pinned(client, part, trial)
            except SettingError as exc:
                raise ConnectorFailure(str(exc), reason="invalid-setting") from None
            adjustments: list[tuple[KubernetesConfig, Adjustment, tuning.TuningRequest]] = []
            for part, targets, trial in plans:
                try:
                    adjustments.append((part, self._patch_all(client, part, targets), trial))
                except Exception:
                    for _, sent, _ in adjustments:  # the earlier parts' patches go back too
                        self._undo_partial(sent)
                    raise
            touched = [name for _, adjustment, _ in adjustments for name in adjustment.touched]
            progress(PATCHED, f"patched {', '.join(touched)}" if touched else "nothing to change")
            waiting = [
                (part, adjustment, [w.name for w in part.workloads if w.name in targets])
                for (part, adjustment, _), (_, targets, _) in zip(adjustments, plans, strict=True)
                if targets
            ]
            self._roll_out_parts(client, waiting, control, progress)
            for part, _, trial in adjustments:
                if trial.targets:
                    settlement = control.settlement or part.settlement
                    tuning.adjust_tuning(client, part, trial, settlement, _scaled(progress, PATCHED, 99.0))
            described: dict[str, Any] = {}
            for part, _, _ in plans:
                described.update(self._describe_all(client, part))
        progress(100, "adjusted")
        return described

    def _plans(
        self, components: dict[str, Any]
    ) -> list[tuple[KubernetesConfig, dict[str, DeploymentTargets], tuning.TuningRequest]]:
        """Per part of the config: the targets of its workloads and its tuning request (a
        ConnectorFailure naming a bad component, setting or value, checked against the whole config)."""
        plans = []
        try:
            rest, _ = tuning.split_components(self.config, components)
            requested_targets(self.config, rest)
            for part in self.config.groups():
                mine = {k: v for k, v in components.items() if k in _component_names(part)}
                rest, trial = tuning.split_components(part, mine)
                plans.append((part, requested_targets(part, rest), trial))
        except SettingError as exc:
            raise ConnectorFailure(str(exc), reason="invalid-setting") from None
        return plans

    def _roll_out_parts(
        self,
        client: KubeClient,
        waiting: list[tuple[KubernetesConfig, Adjustment, list[str]]],
        control: Control,
        progress: ProgressFn,
    ) -> None:
        """Wait on each part's named workloads in turn (each part applies its own ``on_failure``);
        one failure naming every part that failed, after all were waited on."""
        failures: list[ConnectorFailure] = []
        for index, (part, adjustment, named) in enumerate(waiting):
            settlement = control.settlement or part.settlement
            try:
                share = _share(progress, index, len(waiting))
                self._roll_out(client, part, adjustment, named, settlement, share)
            except ConnectorFailure as failure:
                failures.append(failure)
        if failures:
            first = failures[0]
            raise ConnectorFailure(
                " ".join(f.message for f in failures), status=first.status, reason=first.reason
            )

    def _patch_all(
        self, client: KubeClient, part: KubernetesConfig, targets: dict[str, DeploymentTargets]
    ) -> Adjustment:
        """Send every patch of ``part``; a refusal puts back the patches already sent and ends the adjustment."""
        adjustment = Adjustment(client, part.namespace)
        try:
            for state in read_states(client, part, list(targets)):
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
        self,
        client: KubeClient,
        part: KubernetesConfig,
        adjustment: Adjustment,
        named: list[str],
        settlement: float,
        progress: ProgressFn,
    ) -> None:
        """Wait for the rollouts of the workloads ``named`` in ``part`` (the ADJUST's), then settle
        them; on failure apply its ``on_failure`` and say both.

        A workload this ADJUST patched is waited on, then watched for the whole ``settlement``.
        One it did not patch (already at the requested values) is waited on too when its rollout
        is not done (e.g. left under way by an ADJUST cancelled mid-rollout: a connector after a
        cancel never trusts that the last ADJUST finished), with the same timeout and failure
        handling; its settlement counts from when its newest pod became Ready, so it is watched
        only for what is left of it (none for one settled long ago)."""
        watcher = RolloutWatcher(
            client, part.namespace, kinds=part.kinds(), failure_grace=self.config.failure_grace
        )
        patched = adjustment.touched
        try:
            under_way = [name for name in named if name not in patched and not watcher.done(name)]
            if under_way:
                progress(
                    PATCHED,
                    f"{', '.join(under_way)}: already at the requested settings, a rollout under way: waiting for it",
                )
            waited = [name for name in named if name in patched or name in under_way]
            if waited:
                watcher.wait(waited, part.timeout, _scaled(progress, PATCHED, ROLLED_OUT))
            periods = {
                name: settlement if name in patched else watcher.settlement_left(name, settlement)
                for name in named
            }
            watcher.settle(periods, _scaled(progress, ROLLED_OUT, 99.0))
        except RolloutFailed as failure:
            outcome = self._recover(part, adjustment, failure.deployment, watcher, progress)
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
        readings = [_PartReading(part, metrics) for part in self.config.groups()]
        claimed = {metric for reading in readings for metric in reading.claimed}
        for metric in metrics:
            if metric not in claimed:
                raise ConnectorFailure(
                    f"connector {self.name!r} does not describe metric {metric!r}", reason="unknown-metric"
                )
        with self._cluster("measure") as client:
            for reading in readings:
                reading.start(client)
        seconds = control.warmup + control.duration + control.delay
        wait_with_progress(
            seconds, progress, interval=PROGRESS_INTERVAL, end_percent=99,
            message=lambda elapsed: f"measuring ({format_duration(round(seconds - elapsed))} left)",
        )  # fmt: skip
        measured: dict[str, Any] = {}
        annotations: dict[str, str] = {}
        with self._cluster("measure") as client:
            for reading in readings:
                found, notes = reading.finish(client)
                measured.update(found)
                annotations.update({f"{self.name}:{metric}": note for metric, note in notes.items()})
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

    def _recover(
        self,
        part: KubernetesConfig,
        adjustment: Adjustment,
        failed: str,
        watcher: RolloutWatcher,
        progress: ProgressFn,
    ) -> str:
        """Apply ``part``'s ``on_failure`` after workload ``failed`` failed; a sentence saying what
        was done.

        ``rollback`` puts back what this ADJUST's patches replaced and waits for that rollout. A
        failed workload this ADJUST did not patch (already at the requested values: its rollout
        left under way by an earlier, cancelled ADJUST, or its remaining settlement) has nothing of this ADJUST's to put back:
        the values before it were known only to the killed connector, and guessing them from the
        cluster could undo someone else's change. It is left as it is, and the message says so.
        ``shutdown`` scales the failed workload to zero too, patched or not: its settings are the
        requested ones, and they failed."""
        policy = part.on_failure
        if policy == "ignore":
            return "The new settings were left in place (on_failure: ignore)."
        try:
            if policy == "shutdown":
                names = adjustment.shutdown(also=[failed])
                return f"Scaled {', '.join(names)} to zero replicas (on_failure: shutdown)."
            if failed in adjustment.touched:
                return self._roll_back(part, adjustment, watcher, progress)
            kept = (
                f"{watcher.kind(failed)} {failed} was already at the requested settings before this ADJUST, "
                "which did not patch it, so it has nothing of this ADJUST's to roll back: it was left as it is."
            )
            if not adjustment.touched:
                return kept
            return f"{kept} {self._roll_back(part, adjustment, watcher, progress)}"
        except RolloutFailed as again:
            return f"The rollback did not become healthy either: {again}."
        except (KubeError, ConflictError) as exc:
            return f"The {policy} failed: {exc}."

    def _roll_back(
        self, part: KubernetesConfig, adjustment: Adjustment, watcher: RolloutWatcher, progress: ProgressFn
    ) -> str:
        """Put back what ``adjustment`` replaced and wait for that rollout; a sentence saying so."""
        names = adjustment.rollback()
        progress(ROLLED_OUT, f"rolling back {', '.join(names)}")
        watcher.wait(names, part.timeout, _scaled(progress, ROLLED_OUT, 99.0), replace_stuck=True)
        return f"Rolled {', '.join(names)} back to the previous settings, which are healthy again."

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


def _component_names(part: KubernetesConfig) -> set[str]:
    """Every component a part offers: its containers' and (``strategy: tuning``) their tuning pods'."""
    names = set()
    for workload in part.workloads:
        for container in workload.containers:
            names.add(component_name(workload, container))
            if workload.strategy == "tuning":
                names.add(tuning_component_name(workload, container))
    return names


def _share(progress: ProgressFn, index: int, count: int) -> ProgressFn:
    """``progress`` for the ``index``-th of ``count`` parts waited on in turn: their reports
    (PATCHED to 99) laid end to end over that range."""
    if count == 1:
        return progress
    span = (99.0 - PATCHED) / count

    def report(percent: float, message: str = "") -> None:
        within = max(0.0, min(1.0, (percent - PATCHED) / (99.0 - PATCHED)))
        progress(round(PATCHED + span * (index + within), 1), message)

    return report


class _PartReading:
    """The metrics of one MEASURE that belong to one part (its workloads' and tuning pods'):
    ``claimed`` are those, read at ``start`` (restart counts) and ``finish``."""

    def __init__(self, part: KubernetesConfig, metrics: list[str]) -> None:
        self.part = part
        names = [d.name for d in part.workloads]
        known = tuning.tuning_metric_descriptors(part, with_usage=True)
        self.claimed = [m for m in metrics if m in known or measurement.split_metric(m, names) is not None]
        self.extra = tuning.TuningMeasure(part, self.claimed)
        self.wanted: dict[str, tuple[str, str]] = {}
        for metric in self.extra.rest:
            split = measurement.split_metric(metric, names)
            if split is not None:
                self.wanted[metric] = split
        self.restarts_before: dict[str, int] = {}

    def start(self, client: KubeClient) -> None:
        namespace, kinds = self.part.namespace, self.part.kinds()
        for name in {d for d, kind in self.wanted.values() if kind == "restarts"}:
            self.restarts_before[name] = measurement.restarts(client, namespace, name, kinds[name])
        self.extra.start(client)

    def finish(self, client: KubeClient) -> tuple[dict[str, Any], dict[str, str]]:
        """The values measured, and why each left out was (by metric name)."""
        namespace, kinds = self.part.namespace, self.part.kinds()
        measured: dict[str, Any] = dict(self.extra.finish(client))
        notes: dict[str, str] = dict(self.extra.notes)
        usages: dict[str, measurement.Usage] = {}
        for metric, (deployment, kind) in self.wanted.items():
            unit = {**measurement.BASE_METRICS, **measurement.USAGE_METRICS}[kind]
            if kind == "ready_replicas":
                value: float = measurement.ready_replicas(client, namespace, deployment, kinds[deployment])
            elif kind == "restarts":
                value = measurement.restarts(client, namespace, deployment, kinds[deployment])
                value = max(0, value - self.restarts_before[deployment])
            else:
                try:
                    if deployment not in usages:  # one read for cpu and memory
                        usages[deployment] = measurement.usage(
                            client, namespace, deployment, kinds[deployment]
                        )
                except KubeError as exc:
                    notes[metric] = f"metrics.k8s.io did not answer: {exc}"
                    continue
                found = usages[deployment]
                gap = found.gap()
                if gap is not None:  # a sum short of some pods is a wrong number: leave it out
                    notes[metric] = gap
                    continue
                value = found.cores if kind == "cpu_usage" else found.gib
            measured[metric] = {"unit": unit, "value": value}
        return measured, notes


def _scaled(progress: ProgressFn, start: float, end: float) -> Callable[[float, str], None]:
    """``report(fraction, message)`` mapped onto progress percent between ``start`` and ``end``;
    it never goes back (old pods leaving can make the replica counts dip)."""
    highest = [start]

    def report(fraction: float, message: str) -> None:
        highest[0] = max(highest[0], start + (end - start) * max(0.0, min(1.0, fraction)))
        progress(round(highest[0], 1), message)

    return report
