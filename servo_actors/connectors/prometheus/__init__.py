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
evaluated every ``fast_fail_period``: the value of a metric is the worst of its series, each
read as its current value (an instant query) or, with ``fast_fail_span``, as its mean over that
much time before the evaluation (a range query). ``fast_fail_skip`` holds the first evaluation
back (counted from the window's beginning), and ``fast_fail_treat_zero_as_missing`` counts a 0 as no
data. A condition that fails ``trigger_count`` evaluations in a row ends the measurement at once as
``aborted``/``slo-violation``, so a bad configuration is not endured for the whole window.

servox's ``fast_fail`` had the same knobs (``period``, ``span``, ``skip``,
``treat_zero_as_missing``) with two differences: its span defaulted to the period (here: the
current value), and it evaluated during the warmup and counted ``skip`` from the warmup's start.
The warmup is the time whose readings are discarded, so judging the SLOs on it was a defect;
here the warmup is never evaluated. servox also averaged the series of a metric together, so one
bad pod among good ones never tripped a condition; here the worst series counts.

The package's modules: ``config`` (``PrometheusConfig``, ``PrometheusMetric``), ``slo`` (the
fast-fail conditions), ``series`` (results in wire shape), ``http`` (the only users of
``requests`` and ``prometheus_api_client``) and ``connector`` (``PrometheusConnector``: the
measurement loop, the queries and the checks).
"""

from __future__ import annotations

from servo_actors.connectors.prometheus.config import (
    DEFAULT_BASE_URL,
    MIN_FAST_FAIL_PERIOD,
    AbsentPolicy,
    PrometheusConfig,
    PrometheusMetric,
)
from servo_actors.connectors.prometheus.connector import (
    MAX_QUERY_THREADS,
    POLL_INTERVAL,
    PrometheusConnector,
)
from servo_actors.connectors.prometheus.http import (
    RETRY_BACKOFF_FACTOR,
    PrometheusHttp,
)
from servo_actors.connectors.prometheus.series import (
    MAX_POINTS_PER_SERIES,
    RangeResult,
    effective_step,
    series_id,
)
from servo_actors.connectors.prometheus.slo import SloCondition, ViolationStreak

__all__ = [
    "DEFAULT_BASE_URL",
    "MAX_POINTS_PER_SERIES",
    "MAX_QUERY_THREADS",
    "MIN_FAST_FAIL_PERIOD",
    "POLL_INTERVAL",
    "RETRY_BACKOFF_FACTOR",
    "AbsentPolicy",
    "PrometheusConfig",
    "PrometheusConnector",
    "PrometheusHttp",
    "PrometheusMetric",
    "RangeResult",
    "SloCondition",
    "ViolationStreak",
    "effective_step",
    "series_id",
]
