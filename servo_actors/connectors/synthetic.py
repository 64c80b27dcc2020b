"""``synthetic``: a simulated web service with a cost/latency trade-off, for the demo and tests.

``SyntheticModel`` is the pure response surface; ``SyntheticConnector`` puts a connector around
it (settings in force, a rollout that takes time, measurements as 1 s time series).

The simulated service takes a fixed offered load (150 rps for seed 0) spread evenly over its
replicas. Each replica is a queue:

- **cpu** (cores per replica) sets capacity and service time, with diminishing returns
  (a replica does not scale linearly with cores), so several small replicas serve more per
  core than one big one, but each small one is slower per request;
- **replicas** divide the load; every replica also needs its own baseline heap;
- **memory** (GiB per replica) must exceed the heap the replica needs (a baseline set by the
  **gc** plus a share per request/s); GC time grows as the headroom shrinks, and below the need
  the replica thrashes: latency and errors jump;
- **gc**: ``serial`` needs the least heap but has long pauses, ``g1`` the shortest pauses but
  the most heap, ``parallel`` sits between.

Cost is ``replicas * (cpu price * cpu + memory price * memory)``. The problem the demo poses is
"minimize cost subject to p99_latency <= 250 ms". For seed 0 the defaults (1 core, 2 GiB,
2 replicas, g1: $0.1056/h, p99 ~ 198 ms) are feasible; the cheapest feasible point on the
settings grid is 3 replicas of 0.5 cores and 1.5 GiB with the parallel collector
($0.0876/h, p99 ~ 236 ms), inside the space rather than at a corner. Only 4 of the 28,830
grid points lie within 5 % of that cost: the best of 30 random samples is typically ~1.8 times
as expensive, while a search that follows the surface gets there.

With ``settings_command``, the connector models an application it does not run: it offers no
settings, and each measurement first runs that command, whose stdout is a JSON object of the
settings in force *there* (``{"cpu": 0.5, "memory": 1.5, "replicas": 3, "gc": "parallel"}``,
missing ones taking their defaults); the metrics are the model's for those values. The Kubernetes
demo (scripts/kube-demo) reads them back from the cluster this way, so what it measures follows
what the cluster really holds, the replicas its HPA chose included.

Example::

    >>> model = SyntheticModel()
    >>> round(model.evaluate({"cpu": 0.5, "memory": 1.5, "replicas": 3, "gc": "parallel"})["cost"], 4)
    0.0876
"""

from __future__ import annotations

import copy
import json
import math
import random
import subprocess
import time
from typing import Any

from pydantic import Field

from servo_actors.config.fields import Duration, StrictModel
from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.connectors.wait import DEFAULT_PROGRESS_INTERVAL, wait_with_progress
from servo_actors.durations import format_duration

METRIC_UNITS = {"p99_latency": "ms", "throughput": "rps", "error_rate": "ratio", "cost": "$/h"}

_DEFAULT_COMPONENT = "web"
_SETTINGS: dict[str, dict[str, Any]] = {
    "cpu": {"type": "range", "unit": "cores", "min": 0.25, "max": 4.0, "step": 0.125, "value": 1.0},
    "memory": {"type": "range", "unit": "GiB", "min": 0.5, "max": 8.0, "step": 0.25, "value": 2.0},
    "replicas": {"type": "range", "min": 1, "max": 10, "step": 1, "value": 2},
    "gc": {"type": "enum", "values": ["serial", "parallel", "g1"], "value": "g1"},
}

# The response surface. Tuned so the constrained optimum is interior (see the module docstring
# and tests/connectors_builtin); change them together with those numbers.
_OFFERED_RPS = 150.0  # load on the whole service
_RPS_PER_CORE = 250.0  # capacity of one effective core
_SCALING_LOSS = 1.5  # effective cores = cpu / (1 + loss * cpu): diminishing returns per replica
_SERVICE_BASE_MS = 4.0
_SERVICE_PER_CORE_MS = 6.0  # service time falls as effective cores grow
_TAIL_FACTOR = 2.3  # p99 of an exponential wait is about ln(100) / 2 of the mean sojourn here
_SATURATED_UTILIZATION = 0.95  # past this the queue grows linearly instead of diverging
_OVERLOAD_SLOPE = 400.0
_HEAP_BASE_GIB = {"serial": 0.4, "parallel": 0.6, "g1": 1.1}
_HEAP_PER_RPS_GIB = 0.008
_GC_PAUSE_MS = {"serial": 50.0, "parallel": 22.0, "g1": 6.0}
_GC_PRESSURE = 0.5  # GC time grows with heap need / free headroom
_MIN_HEADROOM_GIB = 0.01
_THRASH_MS_PER_GIB = 4000.0  # latency added per GiB of heap that does not fit
_BASE_ERROR_RATE = 0.001
_TIMEOUT_LATENCY_MS = 1000.0  # around here requests start to time out...
_TIMEOUT_SPREAD_MS = 150.0
_TIMEOUT_ERROR_CEILING = 0.5  # ...up to this fraction of them
_OOM_ERROR_SLOPE = 2.0  # errors per unit of heap pressure above the OOM threshold
_OOM_PRESSURE = 0.95
_CPU_PRICE = 0.0416  # $/h per core
_MEMORY_PRICE = 0.0056  # $/h per GiB
_SEED_VARIATION = 0.1  # seeds other than 0 scale load and capacity by up to +-10 %
_STEP_TOLERANCE = 1e-6  # in steps: absorbs float error in values such as 0.1 + 0.2


class SyntheticModel:
    """The pure response surface: settings in, metrics out. No clock, no I/O, no hidden state.

    ``seed`` picks the application: seed 0 is the reference service described in the module
    docstring; any other seed scales its offered load and per-core capacity by up to +-10 %
    (deterministically), so a search can be tried on several similar surfaces. ``noise`` is the
    relative standard deviation applied to latency, throughput and error rate when ``evaluate``
    is given a random generator; cost is a price and has no noise.
    """

    def __init__(self, seed: int = 0, noise: float = 0.05) -> None:
        if noise < 0:
            raise ValueError(f"noise must be 0 or more, not {noise}")
        self.seed = seed
        self.noise = noise
        if seed == 0:
            self._offered, self._per_core = _OFFERED_RPS, _RPS_PER_CORE
        else:
            variation = random.Random(seed)
            self._offered = _OFFERED_RPS * (1 + variation.uniform(-_SEED_VARIATION, _SEED_VARIATION))
            self._per_core = _RPS_PER_CORE * (1 + variation.uniform(-_SEED_VARIATION, _SEED_VARIATION))

    def components(self) -> dict[str, Any]:
        """The settings with their bounds and default values, as ``describe`` shows them."""
        return {_DEFAULT_COMPONENT: {"settings": copy.deepcopy(_SETTINGS)}}

    def evaluate(self, settings: dict[str, Any], rng: random.Random | None = None) -> dict[str, float]:
        """Metrics for ``{"cpu", "memory", "replicas", "gc"}`` (missing ones take their defaults).

        Returns ``p99_latency`` (ms), ``throughput`` (rps), ``error_rate`` (0-1) and ``cost``
        ($/h). Any positive numbers are accepted (the step grid is the connector's business);
        ValueError names a setting that is unknown, not positive or not a known gc.
        """
        cpu, memory, replicas, gc = self._settings(settings)
        per_replica_load = self._offered / replicas
        effective_cores = cpu / (1.0 + _SCALING_LOSS * cpu)
        capacity = self._per_core * effective_cores
        utilization = per_replica_load / capacity
        if utilization < _SATURATED_UTILIZATION:
            queueing = 1.0 / (1.0 - utilization)
        else:
            queueing = 1.0 / (1.0 - _SATURATED_UTILIZATION) + _OVERLOAD_SLOPE * (
                utilization - _SATURATED_UTILIZATION
            )
        service_ms = _SERVICE_BASE_MS + _SERVICE_PER_CORE_MS / effective_cores
        heap_need = _HEAP_BASE_GIB[gc] + _HEAP_PER_RPS_GIB * per_replica_load
        headroom = max(memory - heap_need, _MIN_HEADROOM_GIB)
        gc_ms = _GC_PAUSE_MS[gc] * (1.0 + _GC_PRESSURE * heap_need / headroom)
        thrash_ms = _THRASH_MS_PER_GIB * max(0.0, heap_need - memory)
        p99 = service_ms * _TAIL_FACTOR * queueing + gc_ms + thrash_ms

        timeouts = _TIMEOUT_ERROR_CEILING / (
            1.0 + math.exp(-(p99 - _TIMEOUT_LATENCY_MS) / _TIMEOUT_SPREAD_MS)
        )
        ooms = _OOM_ERROR_SLOPE * max(0.0, heap_need / memory - _OOM_PRESSURE)
        error_rate = min(1.0, _BASE_ERROR_RATE + timeouts + ooms)
        throughput = min(self._offered, replicas * capacity) * (1.0 - error_rate)
        cost = replicas * (_CPU_PRICE * cpu + _MEMORY_PRICE * memory)

        if rng is not None and self.noise > 0:
            p99 *= max(0.0, rng.gauss(1.0, self.noise))
            throughput *= max(0.0, rng.gauss(1.0, self.noise))
            error_rate = min(1.0, error_rate * max(0.0, rng.gauss(1.0, self.noise)))
        return {"p99_latency": p99, "throughput": throughput, "error_rate": error_rate, "cost": cost}

    @staticmethod
    def _settings(settings: dict[str, Any]) -> tuple[float, float, float, str]:
        unknown = set(settings) - set(_SETTINGS)
        if unknown:
            raise ValueError(
                f"unknown settings: {', '.join(sorted(unknown))} (known: {', '.join(_SETTINGS)})"
            )
        values = {name: settings.get(name, spec["value"]) for name, spec in _SETTINGS.items()}
        for name in ("cpu", "memory", "replicas"):
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number, not {value!r}")
        if values["gc"] not in _SETTINGS["gc"]["values"]:
            raise ValueError(f"gc must be one of {_SETTINGS['gc']['values']}, not {values['gc']!r}")
        return float(values["cpu"]), float(values["memory"]), float(values["replicas"]), values["gc"]


class SyntheticConfig(StrictModel):
    """Configuration of ``synthetic``."""

    seed: int = 0
    noise: float = Field(0.05, ge=0.0, le=1.0)
    component: str = Field(_DEFAULT_COMPONENT, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    # Simulated seconds per real second: 1.0 is real time, 0.0 makes measure and adjust instant.
    time_scale: float = Field(1.0, ge=0.0)
    rollout_seconds: Duration = 5.0
    progress_interval: Duration = Field(DEFAULT_PROGRESS_INTERVAL, gt=0.0)
    # argv of a command printing the settings in force as a JSON object (see the module docstring);
    # null: the connector owns its settings and adjusts them itself.
    settings_command: list[str] | None = Field(None, min_length=1)
    settings_command_timeout: Duration = Field(10.0, gt=0.0)


class SyntheticConnector(Connector):
    """A simulated service: describe its settings, adjust them (with a rollout), measure it.

    ``measure`` returns a 1 s time series per metric over the measured window (the last
    ``duration`` whole seconds before it returns, simulated when ``time_scale`` < 1), each
    point a fresh noisy ``evaluate`` drawn from a generator seeded by ``seed``, so two
    connectors with the same seed and the same calls return the same values. ``p99_latency``
    carries one series per replica (``{component="web",replica="0"}``, ...); the other
    metrics one series for the service.
    """

    config_model = SyntheticConfig
    config: SyntheticConfig

    def __init__(self, name: str, config: Any = None) -> None:
        super().__init__(name, config)
        self.model = SyntheticModel(seed=self.config.seed, noise=self.config.noise)
        self._rng = random.Random(self.config.seed)
        self._spec = next(iter(self.model.components().values()))["settings"]
        self._values = {setting: spec["value"] for setting, spec in self._spec.items()}

    @property
    def settings(self) -> dict[str, Any]:
        """The settings in force, ``{"cpu": 1.0, ...}``."""
        return dict(self._values)

    def describe(self) -> dict[str, Any]:
        return {
            "components": {} if self.config.settings_command else self._components(),
            "metrics": {m: {"unit": u} for m, u in METRIC_UNITS.items()},
        }

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        if self.config.settings_command and components:
            raise _rejected(
                f"{self.name} reads its settings with settings_command and adjusts none "
                f"(asked for {', '.join(sorted(components))})",
                "unknown-component",
            )
        requested = self._validated(components)
        rollout = (self.config.rollout_seconds + control.settlement) * self.config.time_scale
        changes = ", ".join(f"{setting}={value}" for setting, value in requested.items()) or "nothing"
        wait_with_progress(
            rollout,
            progress,
            interval=self.config.progress_interval,
            message=lambda elapsed: (
                f"rolling out {changes} ({format_duration(elapsed)} of {format_duration(rollout)})"
            ),
        )
        # Applied only once the rollout is over: a cancel mid-rollout leaves the old settings.
        self._values.update(requested)
        return self._components()

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        unknown = [name for name in metrics if name not in METRIC_UNITS]
        if unknown:
            raise ConnectorFailure(
                f"{self.name}: unknown metrics {', '.join(unknown)} (known: {', '.join(METRIC_UNITS)})",
                status="rejected",
                reason="unknown-metric",
            )
        window = control.warmup + control.duration
        wait_with_progress(
            window * self.config.time_scale,
            progress,
            interval=self.config.progress_interval,
            message=lambda elapsed: f"simulating {format_duration(window)} of traffic",
        )
        values = self._values_in_force()
        points = max(1, math.ceil(control.duration))
        last = int(time.time())
        stamps = range(last - points + 1, last + 1)
        replicas = max(1, int(values["replicas"]))
        series: dict[str, dict[str, list[list[float]]]] = {name: {} for name in metrics}
        for stamp in stamps:
            for replica in range(replicas):
                # One draw per replica and second; only p99_latency is reported per replica.
                sample = self.model.evaluate(values, self._rng)
                for name in metrics:
                    if name == "p99_latency" or replica == 0:
                        series_id = self._series_id(replica if name == "p99_latency" else None)
                        series[name].setdefault(series_id, []).append([stamp, round(sample[name], 6)])
        return {
            "metrics": {
                name: {
                    "unit": METRIC_UNITS[name],
                    "values": [{"id": series_id, "data": data} for series_id, data in by_id.items()],
                }
                for name, by_id in series.items()
            },
            "annotations": {},
        }

    def _values_in_force(self) -> dict[str, Any]:
        """The settings the measurement models: our own, or what ``settings_command`` reads."""
        command = self.config.settings_command
        if not command:
            return dict(self._values)
        timeout = self.config.settings_command_timeout
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise _unreadable(f"settings_command did not finish within {format_duration(timeout)}") from None
        except OSError as exc:
            raise _unreadable(f"settings_command could not run: {exc}") from None
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()[-1:] or ["no message"]
            raise _unreadable(f"settings_command exited with code {done.returncode}: {said[0]}")
        try:
            read = json.loads(done.stdout)
        except ValueError:
            raise _unreadable(
                f"settings_command printed no JSON object: {done.stdout.strip()[:200]!r}"
            ) from None
        if not isinstance(read, dict):
            raise _unreadable(f"settings_command printed {type(read).__name__}, not a JSON object")
        values = {**self._values, **read}
        try:
            self.model.evaluate(values)  # names a setting it cannot model
        except ValueError as exc:
            raise _unreadable(f"settings_command printed settings the model cannot take: {exc}") from None
        return values

    def _series_id(self, replica: int | None) -> str:
        labels = f'component="{self.config.component}"'
        if replica is not None:
            labels += f',replica="{replica}"'
        return "{" + labels + "}"

    def _components(self) -> dict[str, Any]:
        settings = copy.deepcopy(self._spec)
        for setting, value in self._values.items():
            settings[setting]["value"] = value
        return {self.config.component: {"settings": settings}}

    def _validated(self, components: dict[str, Any]) -> dict[str, Any]:
        """``{setting: value}`` for the request, or ConnectorFailure(rejected) naming what is wrong."""
        requested: dict[str, Any] = {}
        for component, body in components.items():
            if component != self.config.component:
                raise _rejected(
                    f"unknown component {component!r} (this connector has {self.config.component!r})"
                )
            settings = body.get("settings") if isinstance(body, dict) else None
            if not isinstance(settings, dict):
                raise _rejected(f"{component}: expected {{'settings': {{name: {{'value': v}}}}}}")
            for setting, wanted in settings.items():
                where = f"{component}.{setting}"
                spec = self._spec.get(setting)
                if spec is None:
                    raise _rejected(
                        f"unknown setting {where} (known: {', '.join(self._spec)})", "unknown-setting"
                    )
                if not isinstance(wanted, dict) or "value" not in wanted:
                    raise _rejected(f"{where}: expected {{'value': v}}, got {wanted!r}")
                requested[setting] = _checked_value(where, spec, wanted["value"])
        return requested


def _checked_value(where: str, spec: dict[str, Any], value: Any) -> Any:
    if spec["type"] == "enum":
        if value not in spec["values"]:
            raise _rejected(f"{where}={value!r} is not one of {spec['values']}", "out-of-range")
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise _rejected(f"{where}={value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _rejected(f"{where}={value!r} is not a number")
    if not spec["min"] <= value <= spec["max"]:
        raise _rejected(f"{where}={value} is out of range [{spec['min']}, {spec['max']}]", "out-of-range")
    steps = (value - spec["min"]) / spec["step"]
    if abs(steps - round(steps)) > _STEP_TOLERANCE:
        raise _rejected(
            f"{where}={value} is not on the step {spec['step']} from {spec['min']}", "invalid-step"
        )
    value = spec["min"] + round(steps) * spec["step"]
    return int(round(value)) if isinstance(spec["step"], int) else float(value)


def _unreadable(message: str) -> ConnectorFailure:
    return ConnectorFailure(message, status="failed", reason="settings-unreadable")


def _rejected(message: str, reason: str = "invalid-value") -> ConnectorFailure:
    return ConnectorFailure(message, status="rejected", reason=reason)
