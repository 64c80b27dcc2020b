"""Readings of one setting taken again, outside the optimizer: the same load (the `loadgen`
connector, same rate and concurrency, through the same front) and the same figures read from
Prometheus over the loaded window (p99 of `/work`, error rate, throughput), ``repeats`` times; with
their mean and spread (sample standard deviation)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from kube_demo_real.app import (
    CONCURRENCY,
    DELAY_SECONDS,
    MEASURE_SECONDS,
    RATE_RPS,
    WARMUP_SECONDS,
    error_query,
    p99_query,
    throughput_query,
)
from kube_demo_real.prometheus import HostPrometheus
from servo_actors.connectors.base import Control
from servo_actors.connectors.loadgen import LoadgenConnector

METRICS = ("p99_latency", "errors", "rps")


@dataclass(frozen=True)
class Summary:
    mean: float
    spread: float
    values: tuple[float, ...]

    def text(self, digits: int = 1) -> str:
        return f"{self.mean:.{digits}f} ± {self.spread:.{digits}f}"


def measure_once(
    prometheus: HostPrometheus, target_url: str, namespace: str, seconds: float = MEASURE_SECONDS
) -> dict[str, float]:
    """One loaded window; its p99 (ms), error rate and throughput from Prometheus (the app's pods
    in ``namespace``)."""
    load = LoadgenConnector("remeasure", {"url": target_url, "rate": RATE_RPS, "concurrency": CONCURRENCY,
                                          "timeout": "5s"})  # fmt: skip
    load.measure([], Control(duration=seconds, warmup=WARMUP_SECONDS), lambda *_: None)
    ended = time.time()
    time.sleep(DELAY_SECONDS)
    window = f"{int(seconds)}s"
    values = {}
    for name, query in (("p99_latency", p99_query(namespace, window)), ("errors", error_query(namespace, window)),
                        ("rps", throughput_query(namespace, window))):  # fmt: skip
        result = prometheus.query(query, at=ended)
        values[name] = float(result[0]["value"][1]) if result else float("nan")
    return values


def measure(prometheus: HostPrometheus, target_url: str, namespace: str, repeats: int) -> dict[str, Summary]:
    readings = [measure_once(prometheus, target_url, namespace) for _ in range(repeats)]
    return {name: summary([r[name] for r in readings]) for name in METRICS}


def summary(values: list[float]) -> Summary:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return Summary(statistics.fmean(values), spread, tuple(values))


def as_json(summaries: dict[str, Summary]) -> dict[str, Any]:
    return {
        name: {"mean": s.mean, "spread": s.spread, "values": list(s.values)} for name, s in summaries.items()
    }
