"""servox's ``vegeta`` connector as this project's ``loadgen`` connector.

- ``rate`` (``50/1s``, ``600/1m``, ``50``) becomes requests per second.
- ``target`` in vegeta's http format (``METHOD URL``, then ``Header: value`` lines) or json format
  (``{"method", "url", "header", "body"}``, the body base64) becomes ``method``, ``url``,
  ``headers`` and ``body``; ``targets`` (a file) becomes ``targets_file`` (and ``targets_format``).
  Several targets, or a body read from a file (``@file``), written inline in ``target`` cannot be
  converted (exit 2 naming the key): loadgen takes those from a targets file.
- ``insecure`` and ``keepalive`` are loadgen's own.
- ``workers`` / ``max_workers``: vegeta starts ``workers`` and adds more to hold the rate (up to
  ``max_workers``, unbounded by default): loadgen's ``concurrency`` and ``max_concurrency`` (at
  most 256; unbounded becomes 256, commented).
- The metrics differ (commented on the connector's line): vegeta reported ``throughput`` in
  requests per minute, ``error_rate`` in percent and ``latency_50th``... in ms; loadgen reports
  ``throughput`` in rps, ``error_rate`` as a ratio 0-1 and ``latency_p50``, ``latency_p90``,
  ``latency_p99``, ``latency_max`` (ms). The optimizer's SLOs that name them change with them.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from servo_actors.connectors.loadgen import MAX_CONCURRENCY
from servo_actors.connectors.loadgen_targets import METHODS
from servo_actors.servox_import.conversion import Conversion, Entry, cannot_convert, check_keys
from servo_actors.servox_import.quantities import duration, requests_per_second

__all__ = ["convert_vegeta"]

_TOP = {
    "description", "rate", "format", "target", "targets", "connections", "workers", "max_workers",
    "max_body", "http2", "keepalive", "insecure", "reporting_interval",
}  # fmt: skip
VEGETA_WORKERS = 10
METRICS_NOTE = (
    "servox's vegeta reported throughput (rpm), error_rate (%), latency_50th/90th/95th/99th/max/mean/total; "
    "loadgen reports throughput (rps), error_rate (ratio 0-1), latency_p50/p90/p99/max (ms): "
    "SLOs naming the old ones must change"
)


def convert_vegeta(conversion: Conversion, key: str, settings: Any) -> list[Entry]:
    source = conversion.source
    top = check_keys(source, key, settings, _TOP)
    entry = Entry(name=key, type="loadgen")
    entry.comment(("type",), METRICS_NOTE)
    target_format = top.get("format", "http")
    if target_format not in ("http", "json"):
        raise cannot_convert(source, f"{key}.format", f"{target_format!r} is not http or json")
    config = entry.config
    target = top.get("target")
    if top.get("targets") is not None:
        config["targets_file"] = str(top["targets"])
        entry.comment(
            ("config", "targets_file"),
            "read relative to the working directory, as vegeta did; a body file (@PATH) relative to it",
        )
        if target_format == "json":
            config["targets_format"] = "json"
    elif not isinstance(target, str) or not target.strip():
        raise cannot_convert(source, f"{key}.target", "servox requires target or targets")
    else:
        if target_format == "http":
            method, url, headers, body = _http_target(source, f"{key}.target", target)
        else:
            method, url, headers, body = _json_target(source, f"{key}.target", target)
        config["url"] = url
        config["method"] = method
        if headers:
            config["headers"] = headers
        if body is not None:
            config["body"] = body
    if "rate" not in top:
        raise cannot_convert(source, f"{key}.rate", "servox requires it")
    try:
        config["rate"] = requests_per_second(top["rate"])
    except ValueError as exc:
        raise cannot_convert(source, f"{key}.rate", str(exc)) from None
    if config["rate"] == 0:
        entry.comment(
            ("config", "rate"), "vegeta's 0 (as fast as max_workers allow): as fast as concurrency allows"
        )
    workers = _count(source, f"{key}.workers", top.get("workers", VEGETA_WORKERS))
    config["concurrency"] = min(workers, MAX_CONCURRENCY)
    if workers > MAX_CONCURRENCY:
        entry.comment(
            ("config", "concurrency"), f"vegeta's {workers} workers: loadgen runs at most {MAX_CONCURRENCY}"
        )
    if top.get("max_workers") is not None:
        most = _count(source, f"{key}.max_workers", top["max_workers"])
        config["max_concurrency"] = max(config["concurrency"], min(most, MAX_CONCURRENCY))
        if most > MAX_CONCURRENCY:
            entry.comment(
                ("config", "max_concurrency"), f"vegeta's {most}: loadgen runs at most {MAX_CONCURRENCY}"
            )
    elif config["rate"] > 0:
        config["max_concurrency"] = MAX_CONCURRENCY
        entry.comment(
            ("config", "max_concurrency"),
            f"vegeta's max_workers was unbounded (workers added while the rate is not held); {MAX_CONCURRENCY} here",
        )
    if top.get("reporting_interval") is not None:
        try:
            config["progress_interval"] = duration(top["reporting_interval"])
        except ValueError as exc:
            raise cannot_convert(source, f"{key}.reporting_interval", str(exc)) from None
    for field in ("insecure", "keepalive"):
        if field in top:
            if not isinstance(top[field], bool):
                raise cannot_convert(source, f"{key}.{field}", f"must be true or false, not {top[field]!r}")
            config[field] = top[field]
    for field, default, why in (
        ("http2", True, "loadgen speaks HTTP/1.1"),
        ("max_body", -1, "loadgen reads every response body whole"),
        ("connections", 10000, "loadgen holds one connection per thread"),
    ):
        if field in top and top[field] != default:
            conversion.drop(f"{key}.{field}", why)
    return [entry]


def _http_target(source: str, where: str, text: str) -> tuple[str, str, dict[str, str], str | None]:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    method, _, url = lines[0].partition(" ")
    if method.upper() not in METHODS or not url.strip().startswith(("http://", "https://")):
        raise cannot_convert(source, where, f"{lines[0]!r} is not METHOD URL")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line.startswith("@"):
            raise cannot_convert(
                source,
                where,
                f"a body read from a file ({line}): put the target in a targets file (vegeta's targets)",
            )
        first = line.split(" ", 1)[0]
        if first.upper() in METHODS:
            raise cannot_convert(
                source, where, "several targets: put them in a targets file (vegeta's targets)"
            )
        name, colon, value = line.partition(":")
        if not colon:
            raise cannot_convert(source, where, f"{line!r} is not a header (Name: value)")
        headers[name.strip()] = value.strip()
    return method.upper(), url.strip(), headers, None


def _json_target(source: str, where: str, text: str) -> tuple[str, str, dict[str, str], str | None]:
    try:
        targets = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise cannot_convert(source, where, f"not JSON: {exc.msg}") from None
    if len(targets) != 1 or not isinstance(targets[0], dict):
        raise cannot_convert(
            source, where, "several JSON targets: put them in a targets file (vegeta's targets)"
        )
    target = targets[0]
    method, url = str(target.get("method", "")), str(target.get("url", ""))
    if method.upper() not in METHODS or not url.startswith(("http://", "https://")):
        raise cannot_convert(source, where, "a JSON target needs a method and an http(s) url")
    headers: dict[str, str] = {}
    for name, values in (target.get("header") or {}).items():
        items = values if isinstance(values, list) else [values]
        headers[str(name)] = ", ".join(str(item) for item in items)
    body = None
    if target.get("body"):
        try:
            body = base64.b64decode(str(target["body"]), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise cannot_convert(source, where, "the body is not base64 of UTF-8 text") from None
    return method.upper(), url, headers, body


def _count(source: str, where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise cannot_convert(source, where, f"must be a whole number above 0, not {value!r}")
    return value
