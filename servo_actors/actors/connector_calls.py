"""Calling a host's plain connector and making what it returns plain data of the wire's shape.

Apart from the actor (``host``) and its worker thread (``host_worker``): this is plain Python on
the connector alone, no actor state, no thread, no Thespian. Whatever the connector returns goes
through ``plain_data`` (refused first when it pickles to more than the byte limit) and a shape
check, so what leaves is plain data or an ``InvalidResult`` saying what is wrong where; a
``ConnectorFailure`` it raises becomes the part it asks for (``failure_outcome``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import NOT_INVOLVED, ConnectorOutcome
from servo_actors.actors.transport.plain_data import (
    NotPlainData,
    PlainConverter,
    refuse_oversize,
    safe_text,
    to_plain,
    type_name,
)
from servo_actors.connectors.base import Connector, ConnectorFailure, Control
from servo_actors.connectors.check_result import check_entry
from servo_actors.connectors.registry import connector_class_at
from servo_actors.errors import ConnectorError

__all__ = [
    "ConnectorCalls",
    "InvalidResult",
    "WORD_LIMIT",
    "build_connector",
    "connector_class",
    "failure_outcome",
]

WORD_LIMIT = 64
"""Most characters of a status or reason word taken from a ConnectorFailure."""


def connector_class(spec: m.ChildSpec) -> type[Connector]:
    """The class of ``spec``: by the import path the servo resolved (already imported, as the host
    is forked from it), else by resolving the type (which scans installed entry points: slow)."""
    return connector_class_at(spec.import_path, spec.type)


def build_connector(spec: m.ChildSpec) -> Connector:
    """The connector of ``spec``, its config validated by the class's model when it has one."""
    cls = connector_class(spec)
    config = cls.config_model.model_validate(spec.config) if cls.config_model else dict(spec.config)
    return cls(spec.name, config)


class InvalidResult(ConnectorError, ValueError):
    """A connector returned something of the wrong shape or that is not plain data.

    ``call``: the connector's method whose result it was (``describe()``, which measure and adjust
    call first to learn what the connector owns), None for the operation's own method."""

    def __init__(self, message: str, call: str | None = None) -> None:
        super().__init__(message)
        self.call = call


def _mapping(value: Any, what: str, *, none_ok: bool = True) -> dict[str, Any]:
    if value is None and none_ok:
        return {}
    if not isinstance(value, dict):
        raise InvalidResult(f"{what} is a {type_name(value)}, not a mapping")
    return value


def _check_entry(converter: PlainConverter, item: Any, where: str) -> dict[str, Any]:
    plain = _mapping(converter.convert(item, where), where, none_ok=False)
    # Plain data already: str() of it cannot raise (nor be cut: the result's byte limit applies).
    return check_entry(plain)


class ConnectorCalls:
    """What the worker thread does for each operation: plain Python, no actor state.

    Everything the connector returns goes through ``to_plain`` and a shape check, so what leaves
    is plain data of the wire shape or an InvalidResult saying what is wrong where.
    """

    def __init__(self, connector: Connector, byte_limit: int | None = None) -> None:
        self.connector = connector
        self.byte_limit = byte_limit
        self._description: dict[str, Any] | None = None

    def plain(self, value: Any, where: str) -> Any:
        refuse_oversize(value, self.byte_limit)  # before any other work
        return to_plain(value, where=where, byte_limit=self.byte_limit)

    def description(self) -> dict[str, Any]:
        """The connector's describe() of this process (cached: ownership of metrics and components)."""
        if self._description is None:
            try:
                described = _mapping(self.plain(self.connector.describe(), "describe()"), "describe()")
                self._description = {
                    "components": _mapping(described.get("components"), "describe().components"),
                    "metrics": _mapping(described.get("metrics"), "describe().metrics"),
                }
            except (NotPlainData, InvalidResult) as exc:
                expected = "a mapping {components: {...}, metrics: {...}}"
                raise InvalidResult(f"{safe_text(exc)} (expected {expected})", call="describe()") from None
        return self._description

    def run(
        self, call: m.HostCall, progress: Callable[..., None]
    ) -> tuple[dict[str, Any], tuple[str, ...], str]:
        """``(data, claimed components, reason)`` of one operation; exceptions propagate."""
        if call.operation == "describe":
            self._description = None
            return self.description(), (), "success"
        if call.operation == "measure":
            owned = list(self.description()["metrics"])
            wanted = owned if call.metrics is None else [name for name in call.metrics if name in owned]
            returned = self.connector.measure(wanted, call.control or Control(), progress)
            measured = _mapping(self.plain(returned, "measure()"), "measure()")
            found = _mapping(measured.get("metrics"), "measure().metrics")
            annotations = _mapping(measured.get("annotations"), "measure().annotations")
            metrics = {k: v for k, v in found.items() if k in wanted}
            return {"metrics": metrics, "annotations": annotations}, (), "success"
        if call.operation == "adjust":
            owned = self.description()["components"]
            mine = {name: value for name, value in (call.components or {}).items() if name in owned}
            if not mine:
                return {"components": {}}, (), NOT_INVOLVED
            returned = self.connector.adjust(mine, call.control or Control(), progress)
            return (
                {"components": _mapping(self.plain(returned, "adjust()"), "adjust()")},
                tuple(mine),
                "success",
            )
        if call.operation == "check":
            checks = self.connector.check()
            if checks is None:
                return {"checks": []}, (), "success"
            if isinstance(checks, (str, bytes, Mapping)) or not isinstance(checks, Iterable):
                raise InvalidResult(f"check() returned a {type_name(checks)}, not a list of checks")
            refuse_oversize(checks, self.byte_limit)  # a generator passes: the budget below stops it
            # One byte budget for all entries: a generator that never ends is stopped by it.
            converter = PlainConverter(self.byte_limit)
            entries = [
                _check_entry(converter, item, f"check()[{index}]") for index, item in enumerate(checks)
            ]
            return {"checks": entries}, (), "success"
        raise ValueError(f"unknown operation {call.operation!r}")


def failure_outcome(name: str, failure: ConnectorFailure) -> ConnectorOutcome:
    """The part a ConnectorFailure asks for; its fields are connector-supplied, so made text."""
    status, reason = getattr(failure, "status", None), getattr(failure, "reason", None)
    status = safe_text(status, WORD_LIMIT) if isinstance(status, str) else "failed"
    reason = safe_text(reason, WORD_LIMIT) if isinstance(reason, str) else "failed"
    message = safe_text(getattr(failure, "message", ""))
    return ConnectorOutcome(name, status, reason, f"connector {name!r}: {message}")
