"""Tests of the example connector as its author writes them: the class constructed with its config,
a ``Control`` and a progress function that records its calls. No servo, no actor system.

Run from the repository's folder (the module must be importable, as in servo.yaml)::

    PYTHONPATH=examples/connectors python -m pytest -q examples/connectors
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cache_tuner import CacheTuner
from pydantic import ValidationError

from servo_actors.connectors import ConnectorFailure, Control


class Progress:
    """A progress function that keeps what it was told: ``progress(percent, message="")``."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, str]] = []

    def __call__(self, percent: float, message: str = "") -> None:
        self.calls.append((percent, message))


def started(tmp_path: Path, **config: Any) -> CacheTuner:
    """A connector as the servo makes one: its name, its servo.yaml ``config``, then startup()."""
    connector = CacheTuner(
        "cache", {"state_file": str(tmp_path / "state.json"), "sample_interval": 0.01, **config}
    )
    connector.startup()
    return connector


def test_describe_offers_a_range_and_an_enum_setting(tmp_path: Path) -> None:
    settings = started(tmp_path).describe()["components"]["cache"]["settings"]
    assert settings["size_mb"] == {
        "type": "range",
        "unit": "MiB",
        "min": 64,
        "max": 1024,
        "step": 64,
        "value": 256,
    }
    assert settings["policy"] == {"type": "enum", "values": ["lru", "lfu", "fifo"], "value": "lru"}


@pytest.mark.parametrize("size", [512, 512.0])  # a value arrives as a JSON number: int or float
def test_adjust_applies_the_values_and_a_fresh_connector_sees_them(tmp_path: Path, size: float) -> None:
    progress = Progress()
    request = {"cache": {"settings": {"size_mb": {"value": size}, "policy": {"value": "lfu"}}}}
    in_force = started(tmp_path).adjust(request, Control(), progress)
    assert in_force["cache"]["settings"]["size_mb"]["value"] == 512
    assert progress.calls[-1][0] == 100
    # After a cancel the servo starts a fresh process: the state must not live in the old one.
    again = started(tmp_path).describe()["components"]["cache"]["settings"]
    assert (again["size_mb"]["value"], again["policy"]["value"]) == (512, "lfu")


def test_a_value_off_the_step_is_rejected_with_a_reason(tmp_path: Path) -> None:
    request = {"cache": {"settings": {"size_mb": {"value": 100}}}}
    with pytest.raises(ConnectorFailure) as failure:
        started(tmp_path).adjust(request, Control(), Progress())
    assert (failure.value.status, failure.value.reason) == ("rejected", "invalid-setting")


def test_measure_waits_the_window_and_returns_time_series(tmp_path: Path) -> None:
    progress = Progress()
    control = Control(warmup=0.01, duration=0.05)
    measured = started(tmp_path).measure(["hit_ratio", "memory_cost"], control, progress)
    [series] = measured["metrics"]["hit_ratio"]["values"]
    assert len(series["data"]) == 5  # one point per sample_interval of the duration
    assert all(0.0 <= value <= 1.0 for _, value in series["data"])
    assert measured["metrics"]["memory_cost"] == {"unit": "$/h", "value": 0.0125}
    assert "latency_p95" not in measured["metrics"]  # not requested
    assert [percent for percent, _ in progress.calls][-1] == 100


def test_a_bad_config_is_refused_when_constructed(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="sample_intervall"):
        CacheTuner("cache", {"sample_intervall": 1})
