"""The ``prometheus`` connector: metrics are PromQL range queries over the measurement window.

A MEASURE waits out ``warmup + duration`` (the window is the part after the warmup), then
``delay`` more so the last scrape of the window lands, then runs one range query per requested
metric, concurrently, and returns every series of each metric under its own id::

    connectors:
      - name: prom
        type: prometheus
        config:
          base_url: http://127.0.0.1:9090
          timeout: 10s
          metrics:
            - {name: throughput, unit: rps, query: 'sum(rate(http_requests_total[1m]))'}
            - {name: p99_latency, unit: s, step: 5s, absent: fail,
               query: 'histogram_quantile(0.99, sum by (le) (rate(latency_seconds_bucket[1m])))'}

While the window runs, the service-level conditions the optimizer sends in
``control.userdata["slo"]["conditions"]`` (``{metric, threshold, keep, trigger_count}``) are
evaluated every ``fast_fail_period`` with instant queries; a condition that fails
``trigger_count`` evaluations in a row ends the measurement at once as
``aborted``/``slo-violation``, so a bad configuration is not endured for the whole window.
"""

from __future__ import annotations

import ast
import json
import math
import re
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from servo_actors.config.models import Duration
from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.durations import format_duration

DEFAULT_BASE_URL = "http://127.0.0.1:9090"
MAX_POINTS_PER_SERIES = 11_000
"""Prometheus refuses a range query whose step would give a series more points than this."""
POLL_INTERVAL = 1.0
"""Seconds between wake-ups while a measurement waits: each reports progress."""
MIN_FAST_FAIL_PERIOD = 0.1
"""The shortest allowed ``fast_fail_period``: each evaluation is an HTTP query per condition."""
RETRY_BACKOFF_FACTOR = 0.2
"""urllib3 backoff factor between retries of a failed connection (0 s, 0.4 s, 0.8 s, ...)."""
MAX_QUERY_THREADS = 8
"""At most this many range queries run at once."""

AbsentPolicy = Literal["ignore", "zero", "warn", "fail"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class PrometheusMetric(_Strict):
    """One metric: a PromQL query evaluated over the window every ``step`` seconds.

    ``absent`` says what an empty result means: ``ignore`` (no series), ``zero`` (one series of
    zeros), ``warn`` (no series and an annotation) or ``fail`` (the measurement fails).
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
    unit: str = ""
    query: str
    step: Duration = 1.0
    absent: AbsentPolicy = "ignore"

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must not be empty")
        return value.strip()

    @field_validator("step")
    @classmethod
    def _step_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("step must be more than 0")
        return value


class PrometheusConfig(_Strict):
    """The connector's ``config`` section."""

    base_url: str = DEFAULT_BASE_URL
    timeout: Duration = 10.0
    retries: int = Field(1, ge=0, le=10)
    fast_fail_period: Duration = 5.0
    metrics: list[PrometheusMetric] = Field(min_length=1)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @field_validator("timeout")
    @classmethod
    def _timeout_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("timeout must be more than 0")
        return value

    @field_validator("fast_fail_period")
    @classmethod
    def _period_not_tiny(cls, value: float) -> float:
        if value < MIN_FAST_FAIL_PERIOD:
            raise ValueError(f"fast_fail_period must be at least {format_duration(MIN_FAST_FAIL_PERIOD)}")
        return value

    @field_validator("metrics")
    @classmethod
    def _unique_names(cls, metrics: list[PrometheusMetric]) -> list[PrometheusMetric]:
        seen: set[str] = set()
        for metric in metrics:
            if metric.name in seen:
                raise ValueError(f"metric name {metric.name!r} is used twice")
            seen.add(metric.name)
        return metrics


class SloCondition(BaseModel):
    """A service-level condition from ``userdata.slo.conditions`` (extra keys are the optimizer's)."""

    model_config = ConfigDict(extra="ignore")

    metric: str
    threshold: float
    keep: Literal["below", "above"] = "below"
    trigger_count: int = Field(1, ge=1)

    def violated_by(self, value: float) -> bool:
        return value > self.threshold if self.keep == "below" else value < self.threshold


class ViolationStreak:
    """How many evaluations in a row broke one condition; tripped at its ``trigger_count``.

    >>> streak = ViolationStreak(SloCondition(metric="p99", threshold=0.1, trigger_count=2))
    >>> [streak.observe(v) for v in (0.3, 0.05, 0.3, 0.3)]
    [False, False, False, True]

    ``None`` (no data) is not a violation, and breaks the streak like a good value does.
    """

    def __init__(self, condition: SloCondition) -> None:
        self.condition = condition
        self.count = 0

    def observe(self, value: float | None) -> bool:
        self.count = self.count + 1 if value is not None and self.condition.violated_by(value) else 0
        return self.count >= self.condition.trigger_count


def series_id(labels: Mapping[str, str]) -> str:
    """The stable id of a series: its labels sorted, as ``{code="200",job="web"}``."""
    return "{" + ",".join(f'{key}="{_escape_label(value)}"' for key, value in sorted(labels.items())) + "}"


def effective_step(start: float, end: float, step: float) -> float:
    """``step``, raised (to the next millisecond) when it would give more than MAX_POINTS_PER_SERIES."""
    smallest = (end - start) / (MAX_POINTS_PER_SERIES - 1)
    if step >= smallest:
        return step
    return math.ceil(smallest * 1000) / 1000


@dataclass
class RangeResult:
    """What one range query returned: the series in wire shape, and what had to be changed."""

    values: list[dict[str, Any]]
    step: float
    step_raised: bool
    dropped_points: int


class PrometheusConnector(Connector):
    """Reads metrics from a Prometheus server (see the module docstring for the config)."""

    config_model: ClassVar[type[BaseModel]] = PrometheusConfig
    config: PrometheusConfig

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
            with self._client() as client:
                raw = client.custom_query_range(
                    metric.query,
                    start_time=datetime.fromtimestamp(start, tz=UTC),
                    end_time=datetime.fromtimestamp(end, tz=UTC),
                    step=repr(step),
                    params={"timeout": repr(self.config.timeout)},
                    timeout=self.config.timeout,
                )
            values, dropped = _to_series(raw)
        except Exception as exc:  # every way a query can fail becomes one failure naming the query
            raise self._failure(exc, f"query {metric.query!r} of metric {metric.name!r}") from exc
        return RangeResult(values=values, step=step, step_raised=step != metric.step, dropped_points=dropped)

    def check(self) -> list[dict[str, Any]]:
        reachable = self._check_reachable()
        if not reachable["success"]:
            return [reachable]
        return [reachable, *(self._check_query(spec) for spec in self.config.metrics), self._check_targets()]

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
        next_evaluation = window_begins + period if conditions else math.inf
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
        """The instant value of ``metric`` furthest on the wrong side (max for below, min for above)."""
        try:
            with self._client() as client:
                raw = client.custom_query(
                    metric.query, params={"timeout": repr(self.config.timeout)}, timeout=self.config.timeout
                )
            values = [float(item["value"][1]) for item in raw]
        except Exception as exc:  # as in query_range: one failure naming the query
            raise self._failure(exc, f"SLO query {metric.query!r} of metric {metric.name!r}") from exc
        values = [v for v in values if math.isfinite(v)]
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
            return [{"id": "{}", "data": [[_number(start + i * step), 0.0] for i in range(count)]}]
        return []

    # -- checks --------------------------------------------------------------------------------

    def _check_reachable(self) -> dict[str, Any]:
        name = "prometheus reachable"
        url = f"{self.config.base_url}/api/v1/status/buildinfo"
        try:
            with self._session() as session:
                response = session.get(url, timeout=self.config.timeout)
                response.raise_for_status()
                version = response.json()["data"]["version"]
        except Exception as exc:  # any failure is the answer to "is it reachable?"
            return {"name": name, "success": False, "message": str(self._failure(exc, "build info"))}
        return {"name": name, "success": True, "message": f"Prometheus {version} at {self.config.base_url}"}

    def _check_query(self, spec: PrometheusMetric) -> dict[str, Any]:
        name = f"query {spec.name}"
        try:
            with self._client() as client:
                raw = client.custom_query(
                    spec.query, params={"timeout": repr(self.config.timeout)}, timeout=self.config.timeout
                )
        except Exception as exc:  # reported as a failed check, not raised
            return {
                "name": name,
                "success": False,
                "message": str(self._failure(exc, f"query {spec.query!r}")),
            }
        if raw:
            return {"name": name, "success": True, "message": f"{len(raw)} series from {spec.query!r}"}
        # An absence the config tolerates is not a failed check, only worth saying.
        tolerated = spec.absent in ("ignore", "zero")
        return {
            "name": name,
            "success": tolerated,
            "message": f"{spec.query!r} returned no data (absent: {spec.absent})",
        }

    def _check_targets(self) -> dict[str, Any]:
        name = "scrape targets up"
        try:
            with self._client() as client:
                targets = client.get_targets(state="active")["activeTargets"]
        except Exception as exc:  # reported as a failed check, not raised
            return {"name": name, "success": False, "message": str(self._failure(exc, "targets"))}
        if not targets:
            return {"name": name, "success": False, "message": "Prometheus has no active scrape targets"}
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
            }
        return {"name": name, "success": True, "message": f"all {len(targets)} targets up"}

    # -- plumbing ------------------------------------------------------------------------------

    @contextmanager
    def _session(self) -> Iterator[requests.Session]:
        """A fresh session with bounded retries, closed after use (sessions are not shared
        between threads, and none is left holding a socket)."""
        session = requests.Session()
        session.mount(self.config.base_url, HTTPAdapter(max_retries=self._retry()))
        try:
            yield session
        finally:
            session.close()

    @contextmanager
    def _client(self) -> Iterator[PrometheusConnect]:
        with self._session() as session:
            yield PrometheusConnect(
                url=self.config.base_url, retry=self._retry(), session=session, timeout=self.config.timeout
            )

    def _retry(self) -> Retry:
        return Retry(
            total=self.config.retries,
            read=0,  # a query that timed out reading is not repeated: the timeout is the bound
            status=0,
            backoff_factor=RETRY_BACKOFF_FACTOR,
            raise_on_status=False,
        )

    def _failure(self, exc: Exception, what: str) -> ConnectorFailure:
        base_url = self.config.base_url
        if isinstance(exc, ConnectorFailure):
            return exc
        if isinstance(exc, PrometheusApiClientException):
            status, detail = _api_error(str(exc))
            return ConnectorFailure(
                f"Prometheus at {base_url} refused {what} (HTTP {status}): {detail}",
                reason="prometheus-error",
            )
        if isinstance(exc, requests.ConnectionError) and not isinstance(exc, requests.ReadTimeout):
            return ConnectorFailure(
                f"cannot reach Prometheus at {base_url} for {what}: {_root_cause(exc)}",
                reason="prometheus-unreachable",
            )
        if isinstance(exc, requests.Timeout):
            return ConnectorFailure(
                f"Prometheus at {base_url} did not answer {what} within {format_duration(self.config.timeout)}",
                reason="prometheus-timeout",
            )
        return ConnectorFailure(
            f"unexpected answer from Prometheus at {base_url} to {what}: {type(exc).__name__}: {exc}",
            reason="prometheus-error",
        )


def _to_series(raw: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Range-query results in wire shape, and how many NaN/Inf points were dropped (not JSON)."""
    series, dropped = [], 0
    for item in raw:
        data = []
        for stamp, text in item["values"]:
            value = float(text)
            if math.isfinite(value):
                data.append([_number(stamp), value])
            else:
                dropped += 1
        series.append({"id": series_id(item["metric"]), "data": data})
    return series, dropped


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(stamp: float) -> float | int:
    """Whole-second timestamps as ints, as the wire example shows them."""
    stamp = float(stamp)
    return int(stamp) if stamp.is_integer() else round(stamp, 3)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat(timespec="seconds")


def _phase(now: float, began: float, window_begins: float, window_ends: float) -> str:
    if now < window_begins:
        return f"warming up ({format_duration(round(window_begins - now))} left)"
    if now < window_ends:
        return f"measuring ({format_duration(round(window_ends - now))} left)"
    return "waiting for the final scrape"


_API_ERROR = re.compile(r"^HTTP Status Code (\d+) \((.*)\)$", re.DOTALL)


def _api_error(text: str) -> tuple[str, str]:
    """HTTP status and Prometheus's own ``error`` from the client library's exception text.

    The library formats the response body as a bytes literal; it is read back with
    ``ast.literal_eval`` (a literal parser, not eval) and then as Prometheus's JSON error.
    """
    match = _API_ERROR.match(text)
    if not match:
        return "?", text
    status, body = match.groups()
    try:
        raw = ast.literal_eval(body)
        payload = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        return status, f"{payload['error']} ({payload.get('errorType', 'error')})"
    except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError):
        return status, body


def _root_cause(exc: BaseException) -> str:
    """The innermost reason of a connection error, e.g. ``[Errno 111] Connection refused``."""
    found = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
    return found.group(0) if found else type(exc).__name__
