"""One servox document (or a file of several) as servo-actors' configuration.

The top of a servox document: ``optimizer`` (``id``, ``token``, ``base_url``, ``url``), ``servo_uid``,
``settings`` (``backoff``, ``timeouts``, ``proxies``, ``ssl_verify``), ``checks`` (servo.yaml's
``checks`` section, servox's default wait written out), ``name``,
``description``, ``no_diagnostics``, the ``connectors`` descriptor and a key per connector.

Which connectors a document has (servox's rules): with a ``connectors`` list, those (by name, or by
class name such as ``VegetaConnector``); with a ``connectors`` mapping, each key is a connector's
name and its value the connector type; without ``connectors``, every known connector type whose
key is present. Each becomes a connector of that name here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from servo_actors.durations import parse_duration
from servo_actors.errors import ConfigError
from servo_actors.servox_import.conversion import (
    Conversion,
    Entry,
    add_entry,
    cannot_convert,
    check_keys,
    converted_duration,
)
from servo_actors.servox_import.kubernetes import convert_kubernetes
from servo_actors.servox_import.opsani_dev import convert_opsani_dev
from servo_actors.servox_import.prometheus import convert_prometheus
from servo_actors.servox_import.simple import convert_kube_metrics, convert_wait
from servo_actors.servox_import.vegeta import convert_vegeta

__all__ = ["CONVERTERS", "convert_document", "convert_file", "read_documents"]

Converter = Callable[[Conversion, str, Any], list[Entry]]
CONVERTERS: dict[str, Converter] = {
    "kubernetes": convert_kubernetes,
    "prometheus": convert_prometheus,
    "vegeta": convert_vegeta,
    "wait": convert_wait,
    "kube_metrics": convert_kube_metrics,
    "opsani_dev": convert_opsani_dev,
}
"""servox connector type -> its converter."""
_CLASS_NAMES = {
    "KubernetesConnector": "kubernetes",
    "PrometheusConnector": "prometheus",
    "VegetaConnector": "vegeta",
    "WaitConnector": "wait",
    "KubeMetricsConnector": "kube_metrics",
    "OpsaniDevConnector": "opsani_dev",
}
_OTHER_SERVOX_TYPES = {"scripts": "ScriptsConnector"}
_TOP = {"name", "description", "servo_uid", "optimizer", "connectors", "no_diagnostics", "settings", "checks"}
_OPTIMIZER = {"id", "token", "base_url", "url"}
_APPDYNAMICS = {"optimizer_id", "tenant_id", "client_id", "client_secret", "token_url", "connection_file"}
_SETTINGS = {"backoff", "proxies", "timeouts", "ssl_verify"}
_SERVOX_BASE_URL = "https://api.opsani.com"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def read_documents(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of a servox file (an empty file is one empty document)."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", source=source) from None
    try:
        documents = [document for document in yaml.safe_load_all(text)]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(
            f"{where}not valid YAML: {getattr(exc, 'problem', None) or exc}", source=source
        ) from None
    documents = [document for document in documents if document is not None] or [{}]
    for index, document in enumerate(documents):
        if not isinstance(document, dict):
            raise ConfigError(f"document {index + 1} is not a mapping of keys", source=source)
    return documents


def convert_file(path: Path) -> list[Conversion]:
    """Every document of the servox file at ``path``, converted (ConfigError, exit 2, naming the key)."""
    documents = read_documents(path)
    if len(documents) > 1:
        missing = [index + 1 for index, document in enumerate(documents) if not document.get("optimizer")]
        if missing:
            raise ConfigError(
                f"document(s) {', '.join(map(str, missing))}: several documents need an optimizer each (as servox requires)",
                source=str(path),
            )
    if len(documents) == 1:
        return [convert_document(documents[0], str(path))]
    return [
        convert_document(document, f"{path} (document {index + 1})")
        for index, document in enumerate(documents)
    ]


def convert_document(document: dict[str, Any], source: str) -> Conversion:
    """One servox document as a ``Conversion``."""
    conversion = Conversion(source=source)
    top = document
    if top.get("name"):
        conversion.notes.append(
            f"servox's name {top['name']!r}: servo-actors names a configuration by its file"
        )
    if top.get("description"):
        conversion.notes.append(f"servox's description: {' '.join(str(top['description']).split())}")
    _optimizer(conversion, top.get("optimizer"))
    if top.get("servo_uid") is not None:
        conversion.data["servo_uid"] = str(top["servo_uid"])
    _settings(conversion, top.get("settings"))
    if top.get("no_diagnostics") is False:
        conversion.drop("no_diagnostics", "servo-actors does not poll the optimizer for diagnostics")
    for name, kind in _active_connectors(source, document):
        settings = document.get(name)
        if settings is None and kind != "wait":
            raise cannot_convert(source, name, f"the {kind} connector is active but has no settings")
        if not _NAME.fullmatch(name):
            raise cannot_convert(
                source, name, "a connector name here is letters, digits, '_', '.', '-' (at most 63)"
            )
        entries = CONVERTERS[kind](conversion, name, settings)
        description = settings.get("description") if isinstance(settings, dict) else None
        for entry in entries:
            if description and ("name",) not in entry.comments:
                entry.comment(("name",), f"servox: {description}")
            add_entry(conversion, entry)
    _checks(conversion, top.get("checks"))
    return conversion


def _active_connectors(source: str, document: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, servox type) of each active connector, in the document's order."""
    descriptor = document.get("connectors")
    if descriptor is None:
        active = [(key, key) for key in document if key in CONVERTERS]
        for key in document:
            if key not in CONVERTERS and key not in _TOP:
                raise cannot_convert(source, key, _unknown(key))
        return active
    if isinstance(descriptor, list):
        pairs = []
        for index, item in enumerate(descriptor):
            kind = _CLASS_NAMES.get(str(item), str(item))
            if kind not in CONVERTERS:
                raise cannot_convert(source, f"connectors[{index}]", _unknown(str(item)))
            pairs.append((kind, kind))
    elif isinstance(descriptor, dict):
        pairs = []
        for name, item in descriptor.items():
            kind = _CLASS_NAMES.get(str(item), str(item))
            if kind not in CONVERTERS:
                raise cannot_convert(source, f"connectors.{name}", _unknown(str(item)))
            pairs.append((str(name), kind))
    else:
        raise cannot_convert(
            source, "connectors", "must be a list of connector names or a mapping of name: type"
        )
    named = {name for name, _ in pairs}
    for key in document:
        if key not in _TOP and key not in named:
            raise cannot_convert(
                source, key, f"not an active connector (connectors lists {', '.join(sorted(named))})"
            )
    return pairs


def _unknown(kind: str) -> str:
    if kind in _OTHER_SERVOX_TYPES or kind in _OTHER_SERVOX_TYPES.values():
        return f"servox's {kind} connector has no converter (write a command connector for it)"
    return f"{kind!r} is not a servox connector this converter knows ({', '.join(CONVERTERS)})"


def _optimizer(conversion: Conversion, value: Any) -> None:
    source = conversion.source
    if value is None:
        conversion.notes.append(
            "no optimizer in the file: set OPSANI_OPTIMIZER and OPSANI_TOKEN (or add one) for run"
        )
        return
    if isinstance(value, dict) and set(value) & _APPDYNAMICS:
        key = sorted(set(value) & _APPDYNAMICS)[0]
        raise cannot_convert(
            source,
            f"optimizer.{key}",
            "the AppDynamics optimizer (OAuth client credentials) is not spoken here",
        )
    optimizer = check_keys(source, "optimizer", value, _OPTIMIZER)
    result: dict[str, Any] = {}
    if "id" not in optimizer:
        raise cannot_convert(source, "optimizer.id", "servox requires it (or OPSANI_OPTIMIZER)")
    result["id"] = str(optimizer["id"])
    base_url = str(optimizer.get("base_url") or _SERVOX_BASE_URL).rstrip("/")
    if base_url != _SERVOX_BASE_URL:
        result["base_url"] = base_url
    url = optimizer.get("url")
    if url:
        org, _, app = result["id"].partition("/")
        if str(url).rstrip("/") == f"{base_url}/accounts/{org}/applications/{app}":
            conversion.notes.append("optimizer.url is the URL computed from id and base_url: left out")
        else:
            result["url"] = str(url).rstrip("/")
    if optimizer.get("token") is not None:
        result["token"] = str(optimizer["token"])
    conversion.data["optimizer"] = result


def _settings(conversion: Conversion, value: Any) -> None:
    source = conversion.source
    settings = check_keys(source, "settings", value, _SETTINGS)
    result: dict[str, Any] = {}
    backoff = settings.get("backoff")
    if isinstance(backoff, dict):
        default = backoff.get("__default__") or {}
        if isinstance(default, dict) and default.get("max_time") is not None:
            result["backoff"] = {
                "max_time": converted_duration(
                    source, "settings.backoff.__default__.max_time", default["max_time"]
                )
            }
            conversion.comment(
                ("settings", "backoff", "max_time"),
                "servox gave up on any request after it; here only a result post gives up, polling never does",
            )
        for context, policy in backoff.items():
            if not isinstance(policy, dict):
                continue
            if context != "__default__" and policy.get("max_time") is not None:
                conversion.drop(
                    f"settings.backoff.{context}", "one backoff here (settings.backoff), no per-context ones"
                )
            if policy.get("max_tries") is not None:
                conversion.drop(
                    f"settings.backoff.{context}.max_tries", "retries here are bounded by time, not count"
                )
    timeouts = settings.get("timeouts")
    if timeouts is not None:
        if isinstance(timeouts, dict):
            parts = check_keys(source, "settings.timeouts", timeouts, {"connect", "read", "write", "pool"})
        else:
            parts = {"connect": timeouts, "read": timeouts}
        converted = {
            part: converted_duration(source, f"settings.timeouts.{part}", parts[part])
            for part in ("connect", "read")
            if parts.get(part) is not None
        }
        if converted:
            result["timeouts"] = converted
        for part in ("write", "pool"):
            if parts.get(part) is not None:
                conversion.drop(f"settings.timeouts.{part}", "connect and read only")
    if settings.get("proxies") is not None:
        conversion.drop(
            "settings.proxies",
            "the optimizer client takes its proxy from HTTPS_PROXY / HTTP_PROXY / NO_PROXY in the environment",
        )
    verify = settings.get("ssl_verify")
    if verify is False:
        result["ssl_verify"] = False
    elif isinstance(verify, str):
        result["ca_bundle"] = verify
        conversion.comment(
            ("settings", "ca_bundle"), "servox's ssl_verify: PATH (relative paths: to this file here)"
        )
    if result:
        conversion.data["settings"] = result


_CHECKS_KEPT = ("connectors", "name", "id", "tag", "quiet", "verbose", "delay", "halt_on")
"""servox's ``checks:`` keys kept as they are (``wait`` is written on its own)."""
_CHECKS_DROPPED = {
    "remedy": "servox ran a failed check's remedy with it; here a remedy is shown beside the check, never run",
    "progressive": "checks here show as a table when each round ends",
    "check_halting": "only changed what servox logged after a failure; here halt_on decides which checks count",
}
_SERVOX_CHECKS_WAIT = "30m"
"""servox's default ``checks.wait``: its ``run --check`` waited this long for the checks to pass."""


def _checks(conversion: Conversion, value: Any) -> None:
    """servox's ``checks:`` section as servo.yaml's (``config.checks_section``): the same keys
    where they mean the same here, a comment where the meaning changed, and servox's own wait
    written out (here the default is one round). Run after the connectors: a connector it names
    that the converted file has not (left out, or converted under another name) is listed."""
    if value is None:
        conversion.notes.append(
            f"servox's run --check waited up to {_SERVOX_CHECKS_WAIT} for the checks to pass; here one round "
            f"runs unless servo.yaml says checks: {{wait: {_SERVOX_CHECKS_WAIT}}} (or --wait)"
        )
        return
    source = conversion.source
    given = check_keys(source, "checks", value, {*_CHECKS_KEPT, "wait", *_CHECKS_DROPPED})
    result: dict[str, Any] = {}
    for key in _CHECKS_KEPT:
        if given.get(key) is not None:
            result[key] = given[key]
    if "delay" in result and result["delay"] != "expo":
        result["delay"] = converted_duration(source, "checks.delay", result["delay"])
    if result.get("delay") == "expo":
        conversion.comment(("checks", "delay"), "servox's expo began at 8s; here at 1s, doubling up to 30s")
    if result.get("connectors"):
        listed = result["connectors"] if isinstance(result["connectors"], list) else [result["connectors"]]
        converted = [entry["name"] for entry in conversion.data.get("connectors", [])]
        for name in listed:
            if name not in converted:
                conversion.drop(
                    f"checks.connectors: {name}", "no connector of that name in the converted file"
                )
        result["connectors"] = [name for name in listed if name in converted]
    if result.get("connectors"):
        conversion.comment(
            ("checks", "connectors"),
            "the default of check's CONNECTOR arguments; run --check runs every connector's checks, "
            "as servox's did despite this list",
        )
    wait = given.get("wait", _SERVOX_CHECKS_WAIT)
    written = converted_duration(source, "checks.wait", wait) if wait not in (None, "") else 0
    if parse_duration(written) > 0:
        result["wait"] = written
        if "wait" not in given:
            conversion.comment(
                ("checks", "wait"), "servox's default, written out: here the default is one round"
            )
    elif "wait" in given:
        conversion.comment(("checks",), "servox's wait of 0: one round, the default here")
    for key, why in _CHECKS_DROPPED.items():
        if given.get(key):
            conversion.drop(f"checks.{key}", why)
    conversion.data["checks"] = result
