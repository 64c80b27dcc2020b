"""An example connector: tunes a (simulated) cache and measures its hit ratio over time.

It shows every part of the connector API in one file, and it is the example of
docs/connectors/writing.md (tests/docs/test_example_connector.py runs it through the real CLI):

- a ``config_model``: the connector's ``config`` section of servo.yaml, validated when the file is
  loaded (``servo-actors validate`` names a bad key);
- a range setting (``size_mb``) and an enum setting (``policy``) on one component;
- a time-series measurement (``hit_ratio`` and ``latency_p95``, one point per sample) beside a
  single reading (``memory_cost``);
- waiting through the control's warmup, duration and delay itself, with progress;
- state kept outside the process (``state_file``): the servo kills a connector's process on
  every cancel and starts a fresh one, so what must outlive a command is written down;
- ``ConnectorFailure`` for a refusal with a status and a reason word.

The cache is a model, not a real one: its hit ratio grows with the size and depends on the
eviction policy, with seeded noise. Use it with (from the repository's folder)::

    PYTHONPATH=examples/connectors servo-actors -c examples/connectors/servo.yaml describe
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servo_actors.connectors import Connector, ConnectorFailure, Control, ProgressFn

SIZE_MIN, SIZE_MAX, SIZE_STEP = 64, 1024, 64
"""The range of ``size_mb``: 64 MiB to 1 GiB in steps of 64 MiB."""
POLICIES = ["lru", "lfu", "fifo"]
"""The values of the enum setting ``policy``."""
DEFAULTS: dict[str, Any] = {"size_mb": 256, "policy": "lru"}
"""The settings in force before the first adjustment."""
POLICY_BONUS = {"lru": 0.0, "lfu": 0.04, "fifo": -0.06}
COST_PER_GIB_HOUR = 0.05


class CacheTunerConfig(BaseModel):
    """The ``config`` of a ``cache_tuner:CacheTuner`` connector in servo.yaml."""

    model_config = ConfigDict(extra="forbid")  # an unknown key is an error, not a silent no-op

    component: str = "cache"
    """The name of the component it describes and adjusts."""
    state_file: Path = Path("cache-tuner-state.json")
    """Where the settings in force are kept. A relative path is relative to the working directory
    of the servo (where ``servo-actors`` was started), not to servo.yaml."""
    sample_interval: float = Field(1.0, gt=0)
    """Seconds between two points of a time series during the measurement window."""
    seed: int = 0
    """Seeds the simulated noise: every fresh process draws the same sequence."""


class CacheTuner(Connector):
    """A range setting, an enum setting and time-series metrics for one cache."""

    config_model = CacheTunerConfig
    config: CacheTunerConfig  # what config_model makes of the servo.yaml section

    def startup(self) -> None:
        # Runs in every fresh process (at start, and after every cancel, deadline or crash),
        # before any operation. Nothing is left of a previous process: what is in force is read
        # from the state file by each operation.
        self.noise = random.Random(self.config.seed)

    def describe(self) -> dict[str, Any]:
        settings = self._read_state()
        return {
            "components": {
                self.config.component: {
                    "settings": {
                        "size_mb": {
                            "type": "range",
                            "unit": "MiB",
                            "min": SIZE_MIN,
                            "max": SIZE_MAX,
                            "step": SIZE_STEP,
                            "value": settings["size_mb"],
                        },
                        "policy": {"type": "enum", "values": POLICIES, "value": settings["policy"]},
                    }
                }
            },
            "metrics": {
                "hit_ratio": {"unit": "ratio"},
                "latency_p95": {"unit": "ms"},
                "memory_cost": {"unit": "$/h"},
            },
        }

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        # Only this connector's components arrive, each {"settings": {name: {"value": v}}}.
        wanted = components[self.config.component]["settings"]
        settings = dict(self._read_state())
        if "size_mb" in wanted:
            settings["size_mb"] = _size(wanted["size_mb"]["value"])
        if "policy" in wanted:
            policy = wanted["policy"]["value"]
            if policy not in POLICIES:
                raise ConnectorFailure(
                    f"policy {policy!r} is not one of {', '.join(POLICIES)}",
                    status="rejected",
                    reason="invalid-setting",
                )
            settings["policy"] = policy
        progress(50, f"resizing to {settings['size_mb']} MiB, {settings['policy']}")
        self._write_state(settings)
        _sleep(control.settlement)  # the optimizer's settlement: let the cache fill again
        progress(100, "applied")
        return {self.config.component: self.describe()["components"][self.config.component]}

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        # The connector waits through warmup, duration and delay itself: the servo only sets the
        # deadline (those times plus supervisor.operation_grace) and kills it past that.
        settings = self._read_state()
        progress(0, f"warming up for {control.warmup:g} s")
        _sleep(control.warmup)

        samples = max(1, math.floor(control.duration / self.config.sample_interval))
        began = time.monotonic()
        hits: list[list[float]] = []
        latencies: list[list[float]] = []
        for index in range(samples):
            _sleep(began + index * self.config.sample_interval - time.monotonic())
            ratio = _hit_ratio(settings, self.noise)
            now = round(time.time(), 3)
            hits.append([now, round(ratio, 4)])
            latencies.append([now, round(2.0 + 40.0 * (1.0 - ratio), 2)])
            progress(round(100 * (index + 1) / samples), f"sample {index + 1} of {samples}")
        _sleep(control.delay)

        found = {
            "hit_ratio": {"unit": "ratio", "values": [{"id": self.config.component, "data": hits}]},
            "latency_p95": {"unit": "ms", "values": [{"id": self.config.component, "data": latencies}]},
            "memory_cost": {"unit": "$/h", "value": round(settings["size_mb"] / 1024 * COST_PER_GIB_HOUR, 5)},
        }
        # Only the requested metrics (the servo passes those this connector describes).
        return {"metrics": {name: found[name] for name in metrics if name in found}, "annotations": {}}

    def check(self) -> list[dict[str, Any]]:
        folder = self.config.state_file.resolve().parent
        writable = os.access(folder, os.W_OK)
        message = f"{folder} is writable" if writable else f"cannot write to {folder}"
        return [{"name": "state file", "success": writable, "message": message}]

    def _read_state(self) -> dict[str, Any]:
        try:
            stored = json.loads(self.config.state_file.read_text())
        except FileNotFoundError:
            return dict(DEFAULTS)
        except (OSError, ValueError) as exc:
            raise ConnectorFailure(f"cannot read {self.config.state_file}: {exc}") from None
        return {**DEFAULTS, **stored}

    def _write_state(self, settings: dict[str, Any]) -> None:
        # Write then rename: a kill in the middle leaves the old file or the new one, never half.
        partial = self.config.state_file.with_name(self.config.state_file.name + ".partial")
        partial.write_text(json.dumps(settings))
        os.replace(partial, self.config.state_file)


def _size(value: Any) -> int:
    """``size_mb`` as an int: a value arrives as a JSON number, int or float (``256`` or ``256.0``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConnectorFailure(
            f"size_mb {value!r} is not a number", status="rejected", reason="invalid-setting"
        )
    size = int(round(value))
    if not SIZE_MIN <= size <= SIZE_MAX or (size - SIZE_MIN) % SIZE_STEP:
        raise ConnectorFailure(
            f"size_mb {value!r} is not in {SIZE_MIN}..{SIZE_MAX} on the step {SIZE_STEP}",
            status="rejected",
            reason="invalid-setting",
        )
    return size


def _hit_ratio(settings: dict[str, Any], noise: random.Random) -> float:
    base = 1.0 - math.exp(-settings["size_mb"] / 300.0) + POLICY_BONUS[settings["policy"]]
    return min(0.999, max(0.0, base + noise.gauss(0.0, 0.01)))


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)
