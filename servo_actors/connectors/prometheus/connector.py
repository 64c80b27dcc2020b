"""``PrometheusConnector``: its operations, the measurement loop (waiting out the window while
evaluating the fast-fail conditions), the range queries and the checks."""

from __future__ import annotations

import math
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.connectors.prometheus.config import PrometheusConfig, PrometheusMetric
from servo_actors.connectors.prometheus.http import PrometheusHttp
from servo_actors.connectors.prometheus.series import (
    MAX_POINTS_PER_SERIES,
    RangeResult,
    effective_step,
    wire_series,
    wire_timestamp,
)
from servo_actors.connectors.prometheus.slo import SloCondition, ViolationStreak
from servo_actors.durations import format_duration

__all__ = ["MAX_QUERY_THREADS", "POLL_INTERVAL", "PrometheusConnector"]

POLL_INTERVAL = 1.0
"""Seconds between wake-ups while a measurement waits: each reports progress."""
MAX_QUERY_THREADS = 8
"""At most this many range queries run at once."""


class PrometheusConnector(Connector):
    """Reads metrics from a Prometheus server (see the package docstring for the config)."""

    config_model: ClassVar[type[BaseModel]] = PrometheusConfig
    config: PrometheusConfig

    @property
    def http(self) -> PrometheusHttp:
        """Sessions, the client and error messages for this connector's config."""
        return PrometheusHttp(self.config)

    def describe(self) -> dict[str, Any]:
        return {"components": {}, "metrics": {m.name: {"unit": m.unit} for m in self.config.metrics}}

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        specs = self._requested(metrics)
        conditions = self._slo_conditions(control)
        if not specs and not conditions:
            return {"metrics": {}, "annotations": {}}
        window_start = time.time() + control.warmup
        window_end = window_start + control.duration
        self._wait_out(control, progress, conditions)
        progress(99, f"querying {len(specs)} metric(s)")
        start, end = round(window_start), round(window_end)
        results = self._query_all(specs, start, end)
        measured: dict[str, Any] = {}
        annotations: dict[str, str] = {}
        for spec, result in zip(specs, results, strict=True):
            notes = []
            if result.step_raised:
                notes.append(
                    f"step raised from {format_duration(spec.step)} to {format_duration(result.step)} "
                    f"to stay within {MAX_POINTS_PER_SERIES} points per series"
                )
            if result.dropped_points:
                notes.append(f"{result.dropped_points} NaN/Inf point(s) dropped")
            values = result.values
            if not values:
                values = self._absent(spec, start, end, result.step, notes)
            measured[spec.name] = {"unit": spec.unit, "values": values}
            if notes:
                annotations[f"{self.name}:{spec.name}"] = "; ".join(notes)
        progress(100, "measured")
        return {"metrics": measured, "annotations": annotations}

    def query_range(self, metric: PrometheusMetric, start: float, end: float) -> RangeResult:
        """Run ``metric``'s query over [start, end] (epoch seconds, rounded to whole seconds).

        Raises ConnectorFailure naming the query on any HTTP, PromQL or connection error.
        """
        start, end = round(start), round(end)
        step = effective_step(start, end, metric.step)
        try:
            with self.http.client() as client:
                raw = client.custom_query_range(
                    metric.query,
                    start_time=datetime.fromtimestamp(start, tz=UTC),
                    end_time=datetime.fromtimestamp(end, tz=UTC),
                    step=repr(step),
                    params={"timeout": repr(self.config.timeout)},
                    timeout=self.config.timeout,
                )
            values, dropped = wire_series(raw)
        except Exception as exc:  # every way a query can fail becomes one failure naming the query
            raise self.http.failure(exc, f"query {metric.query!r} of metric {metric.name!r}") from exc
        return RangeResult(values=values, step=step, step_raised=step != metric.step, dropped_points=dropped)

    def check(self) -> list[dict[str, Any]]:
        """Reachable (``critical``: nothing else is asked when it fails), each metric's query, and
        the scrape targets; a failed one carries the ``curl`` to try (``connectors.check_result``)."""
        reachable = self._check_reachable()
        reachable["severity"] = "critical"
        if not reachable["success"]:
            return [reachable]
        return [reachable, *(self._check_query(spec) for spec in self.config.metrics), self._check_targets()]

    def _curl(self, path: str, query: str | None = None) -> str:
        """The ``curl`` asking this Prometheus what the check asked (for a failed check's remedy)."""
        url = shlex.quote(f"{self.config.base_url}{path}")
        if query is None:
            return f"curl -sS {url}"
        return f"curl -sSG {url} --data-urlencode {shlex.quote(f'query={query}')}"

    # -- measurement helpers -------------------------------------------------------------------

    def _requested(self, names: list[str]) -> list[PrometheusMetric]:
        by_name = {m.name: m for m in self.config.metrics}
        unknown = [name for name in names if name not in by_name]
        if unknown:
            raise ConnectorFailure(
                f"connector {self.name!r} does not describe metric(s) {', '.join(map(repr, unknown))} "
                f"(it has {', '.join(sorted(by_name))})",
                reason="unknown-metric",
            )
        return [by_name[name] for name in names]

    def _slo_conditions(self, control: Control) -> list[tuple[SloCondition, PrometheusMetric]]:
        """The conditions on metrics this connector owns (others belong to other connectors)."""
        slo = control.userdata.get("slo") if isinstance(control.userdata, dict) else None
        raw = slo.get("conditions") if isinstance(slo, dict) else None
        if not raw:
            return []
        if not isinstance(raw, list):
            raise ConnectorFailure("userdata.slo.conditions must be a list", reason="invalid-slo")
        by_name = {m.name: m for m in self.config.metrics}
        conditions = []
        for index, item in enumerate(raw):
            try:
                condition = SloCondition.model_validate(item)
            except ValidationError as exc:
                problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ConnectorFailure(
                    f"userdata.slo.conditions[{index}]: {problem}", reason="invalid-slo"
                ) from None
            if condition.metric in by_name:
                conditions.append((condition, by_name[condition.metric]))
        return conditions

    def _wait_out(
        self, control: Control, progress: ProgressFn, conditions: list[tuple[SloCondition, PrometheusMetric]]
    ) -> None:
        """Sleep through warmup, window and delay, reporting progress and evaluating fast-fail."""
        began = time.monotonic()
        window_begins = began + control.warmup
        window_ends = window_begins + control.duration
        finished = window_ends + control.delay
        total = max(finished - began, 1e-9)
        period = self.config.fast_fail_period
        # The first evaluation is the first one of the period's rhythm that is not skipped.
        first = period * max(1, math.ceil(self.config.fast_fail_skip / period))
        next_evaluation = window_begins + first if conditions else math.inf
        streaks = [(ViolationStreak(condition), metric) for condition, metric in conditions]
        next_progress = began
        while (now := time.monotonic()) < finished:
            if now >= next_progress:
                progress(
                    min(99.0, (now - began) / total * 100), _phase(now, began, window_begins, window_ends)
                )
                next_progress = now + POLL_INTERVAL
            if now >= next_evaluation:
                if now < window_ends:
                    self._evaluate_slo(streaks)
                next_evaluation = now + period if now + period < window_ends else math.inf
            wake = min(next_progress, next_evaluation, finished)
            time.sleep(max(0.0, wake - time.monotonic()))

    def _evaluate_slo(self, streaks: list[tuple[ViolationStreak, PrometheusMetric]]) -> None:
        for streak, metric in streaks:
            worst = self._worst_value(streak.condition, metric)
            if streak.observe(worst):
                condition = streak.condition
                raise ConnectorFailure(
                    f"SLO violated: {metric.name} = {worst:g}, should stay {condition.keep} "
                    f"{condition.threshold:g} ({streak.count} evaluation(s) in a row)",
                    status="aborted",
                    reason="slo-violation",
                )

    def _worst_value(self, condition: SloCondition, metric: PrometheusMetric) -> float | None:
        """The value of ``metric`` furthest on the wrong side (max for below, min for above), over
        its series: each series' current value, or its mean over ``fast_fail_span``. None when no
        series has one (a 0 counts as none under ``fast_fail_treat_zero_as_missing``)."""
        span = self.config.fast_fail_span
        if span is not None:
            now = time.time()
            result = self.query_range(metric, now - span, now)
            values = [
                sum(points) / len(points)
                for series in result.values
                if (points := [float(point[1]) for point in series["data"]])
            ]
        else:
            try:
                with self.http.client() as client:
                    raw = client.custom_query(
                        metric.query,
                        params={"timeout": repr(self.config.timeout)},
                        timeout=self.config.timeout,
                    )
                values = [float(item["value"][1]) for item in raw]
            except Exception as exc:  # as in query_range: one failure naming the query
                raise self.http.failure(exc, f"SLO query {metric.query!r} of metric {metric.name!r}") from exc
        values = [v for v in values if math.isfinite(v)]
        if self.config.fast_fail_treat_zero_as_missing:
            values = [v for v in values if v != 0]
        if not values:
            return None
        return max(values) if condition.keep == "below" else min(values)

    def _query_all(self, specs: list[PrometheusMetric], start: int, end: int) -> list[RangeResult]:
        """One range query per metric, concurrently; the first failure (in config order) wins."""
        if not specs:
            return []
        # Each request is bounded by the timeout (and the retry count), so the pool's exit is too.
        with ThreadPoolExecutor(min(len(specs), MAX_QUERY_THREADS), thread_name_prefix=self.name) as pool:
            futures = [pool.submit(self.query_range, spec, start, end) for spec in specs]
        return [future.result() for future in futures]

    def _absent(
        self, spec: PrometheusMetric, start: int, end: int, step: float, notes: list[str]
    ) -> list[Any]:
        """What an empty result becomes under the metric's ``absent`` policy."""
        if spec.absent == "fail":
            raise ConnectorFailure(
                f"metric {spec.name!r}: query {spec.query!r} returned no data between "
                f"{_iso(start)} and {_iso(end)}",
                reason="metric-absent",
            )
        if spec.absent == "warn":
            notes.append(f"query {spec.query!r} returned no data between {_iso(start)} and {_iso(end)}")
        if spec.absent == "zero":
            count = int((end - start) // step) + 1
            return [{"id": "{}", "data": [[wire_timestamp(start + i * step), 0.0] for i in range(count)]}]
        return []

    # -- checks --------------------------------------------------------------------------------

    def _check_reachable(self) -> dict[str, Any]:
        name = "prometheus reachable"
        url = f"{self.config.base_url}/api/v1/status/buildinfo"
        try:
            with self.http.session() as session:
                response = session.get(url, timeout=self.config.timeout)
                response.raise_for_status()
                version = response.json()["data"]["version"]
        except Exception as exc:  # any failure is the answer to "is it reachable?"
            return {
                "name": name,
                "success": False,
                "message": str(self.http.failure(exc, "build info")),
                "remedy": f"{self._curl('/api/v1/status/buildinfo')}  # then fix base_url or start Prometheus there",
            }
        return {"name": name, "success": True, "message": f"Prometheus {version} at {self.config.base_url}"}

    def _check_query(self, spec: PrometheusMetric) -> dict[str, Any]:
        name = f"query {spec.name}"
        try:
            with self.http.client() as client:
                raw = client.custom_query(
                    spec.query, params={"timeout": repr(self.config.timeout)}, timeout=self.config.timeout
                )
        except Exception as exc:  # reported as a failed check, not raised
            return {
                "name": name,
                "success": False,
                "message": str(self.http.failure(exc, f"query {spec.query!r}")),
                "remedy": f"{self._curl('/api/v1/query', spec.query)}  # fix the query until this answers",
            }
        if raw:
            return {"name": name, "success": True, "message": f"{len(raw)} series from {spec.query!r}"}
        # An absence the config tolerates is not a failed check, only worth saying.
        tolerated = spec.absent in ("ignore", "zero")
        result = {
            "name": name,
            "success": tolerated,
            "message": f"{spec.query!r} returned no data (absent: {spec.absent})",
        }
        if not tolerated:
            listed = self._curl("/api/v1/label/__name__/values")
            result["remedy"] = f"{listed}  # the metric names Prometheus has: is the query's among them?"
        return result

    def _check_targets(self) -> dict[str, Any]:
        name = "scrape targets up"
        try:
            with self.http.client() as client:
                targets = client.get_targets(state="active")["activeTargets"]
        except Exception as exc:  # reported as a failed check, not raised
            return {"name": name, "success": False, "message": str(self.http.failure(exc, "targets"))}
        remedy = f"{self._curl('/api/v1/targets?state=active')}  # each target's lastError"
        if not targets:
            return {
                "name": name,
                "success": False,
                "message": "Prometheus has no active scrape targets",
                "remedy": "add the application to Prometheus's scrape_configs, then: " + remedy,
            }
        down = [t for t in targets if t.get("health") != "up"]
        if down:
            detail = "; ".join(
                f"{t.get('scrapeUrl')} is {t.get('health')}"
                + (f" ({t['lastError']})" if t.get("lastError") else "")
                for t in down
            )
            return {
                "name": name,
                "success": False,
                "message": f"{len(down)} of {len(targets)} down: {detail}",
                "remedy": remedy,
            }
        return {"name": name, "success": True, "message": f"all {len(targets)} targets up"}


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")


def _phase(now: float, began: float, window_begins: float, window_ends: float) -> str:
    if now < window_begins:
        return f"warming up ({format_duration(round(window_begins - now))} left)"
    if now < window_ends:
        return f"measuring ({format_duration(round(window_ends - now))} left)"
    return "waiting for the final scrape"
