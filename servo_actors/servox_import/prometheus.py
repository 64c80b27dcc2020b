"""servox's ``prometheus`` connector as this project's ``prometheus`` connector.

servox's defaults differ: its ``base_url`` is ``https://prometheus:9090`` and a metric's ``step``
``1m``; both are written out when the servox file leaves them to the default. ``fast_fail``'s
``period``, ``span``, ``skip`` and ``treat_zero_as_missing`` are ``fast_fail_period``,
``fast_fail_span`` (servox's default, the period, written out), ``fast_fail_skip`` and
``fast_fail_treat_zero_as_missing``; the SLOs come from the optimizer in both.
"""

from __future__ import annotations

from typing import Any

from servo_actors.servox_import.conversion import (
    Conversion,
    Entry,
    cannot_convert,
    check_keys,
    converted_duration,
)
from servo_actors.servox_import.quantities import duration

__all__ = ["SERVOX_PROMETHEUS_URL", "convert_prometheus"]

SERVOX_PROMETHEUS_URL = "https://prometheus:9090"
SERVOX_METRIC_STEP = "1m"
_TOP = {"description", "base_url", "streaming_interval", "metrics", "targets", "fast_fail"}
_METRIC = {"name", "unit", "query", "step", "absent"}
_FAST_FAIL = {"disabled", "period", "span", "skip", "treat_zero_as_missing"}
_ABSENT = ("ignore", "zero", "warn", "fail")


def convert_prometheus(conversion: Conversion, key: str, settings: Any) -> list[Entry]:
    source = conversion.source
    top = check_keys(source, key, settings, _TOP)
    entry = Entry(name=key, type="prometheus")
    config = entry.config
    if top.get("base_url"):
        config["base_url"] = str(top["base_url"]).rstrip("/")
    else:
        config["base_url"] = SERVOX_PROMETHEUS_URL
        entry.comment(
            ("config", "base_url"),
            "servox's default, written out (the default here is http://127.0.0.1:9090)",
        )
    metrics = top.get("metrics")
    if not isinstance(metrics, list) or not metrics:
        raise cannot_convert(source, f"{key}.metrics", "servox requires at least one metric")
    config["metrics"] = []
    for index, item in enumerate(metrics):
        where = f"{key}.metrics[{index}]"
        metric = check_keys(source, where, item, _METRIC)
        if not metric.get("name") or not metric.get("query"):
            raise cannot_convert(source, where, "a metric needs a name and a query")
        converted: dict[str, Any] = {"name": str(metric["name"]), "unit": str(metric.get("unit") or "")}
        converted["query"] = str(metric["query"])
        if metric.get("step") is not None:
            converted["step"] = converted_duration(source, f"{where}.step", metric["step"])
        else:
            converted["step"] = SERVOX_METRIC_STEP
            entry.comment(
                ("config", "metrics", index, "step"), "servox's default step, written out (1s here)"
            )
        absent = metric.get("absent", "ignore")
        if absent not in _ABSENT:
            raise cannot_convert(source, f"{where}.absent", f"{absent!r} is not one of {', '.join(_ABSENT)}")
        if absent != "ignore":
            converted["absent"] = absent
        config["metrics"].append(converted)
    if top.get("streaming_interval") is not None:
        conversion.drop(f"{key}.streaming_interval", "metrics are read once, at the end of the measurement")
    if top.get("targets"):
        conversion.drop(f"{key}.targets", "check looks at the queries, not at scrape targets")
    fast_fail = check_keys(source, f"{key}.fast_fail", top.get("fast_fail"), _FAST_FAIL)
    if fast_fail.get("period") is not None:
        config["fast_fail_period"] = converted_duration(
            source, f"{key}.fast_fail.period", fast_fail["period"]
        )
    else:
        config["fast_fail_period"] = "1m"
        entry.comment(
            ("config", "fast_fail_period"), "servox's default fast_fail.period, written out (5s here)"
        )
    if fast_fail.get("disabled"):
        conversion.drop(f"{key}.fast_fail.disabled", "fast fail is on whenever the optimizer sends SLOs")
    span = fast_fail.get("span")
    config["fast_fail_span"] = converted_duration(
        source, f"{key}.fast_fail.span", span or fast_fail.get("period", "1m")
    )
    entry.comment(
        ("config", "fast_fail_span"),
        ("" if span else "servox's default (the period), written out; ")
        + "servox averaged a metric's series together, here the worst series' mean counts",
    )
    if fast_fail.get("skip") is not None and not _same_duration(fast_fail["skip"], 0):
        config["fast_fail_skip"] = converted_duration(source, f"{key}.fast_fail.skip", fast_fail["skip"])
        entry.comment(
            ("config", "fast_fail_skip"),
            "counted from the window's beginning; servox counted it from the warmup's (and judged the warmup)",
        )
    if fast_fail.get("treat_zero_as_missing"):
        config["fast_fail_treat_zero_as_missing"] = True
    return [entry]


def _same_duration(value: Any, default: Any) -> bool:
    try:
        return bool(duration(value) == duration(default))
    except ValueError:
        return False
