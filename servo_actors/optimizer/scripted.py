"""ScriptedDriver: the embedded optimizer plays a fixed script. For tests, drills and demos of faults.

A plan (YAML, or the same as a dict)::

    app: example.com/web
    token: null                   # when set, requests must carry it
    sleep: 120s                   # SLEEP duration once the script is done (default 120s)
    script:
      - cmd: DESCRIBE
      - cmd: MEASURE
        param: {metrics: [throughput], control: {duration: 2s}}
        progress: [ok, cancel]    # answers to its progress posts, in turn; ok after the list ends
        result_reply: ok          # answer to its result post (default ok)
      - fault: {status: 503, for: 10s}                 # every request gets 503 for 10 s
      - fault: {status: 401, times: 3}                 # the next 3 requests get 401
      - fault: {status: 410, detail: unexpected servo_uid}
      - fault: {stall: 3s}                             # hold one request 3 s, then answer it
      - fault: {body: not json}                        # a 200 whose body is not JSON
      - fault: {json: [1, 2, 3]}                       # a 200 whose body is JSON, not an object
      - fault: {status: 503, for: 2s, events: [MEASUREMENT]}   # only these events are hit
      - cmd: SLEEP
        param: {duration: 5s}

Command steps are sent, in order, in answer to WHATS_NEXT. ``param`` is checked as the servo
would read it (a bad duration is an error in the plan, not on the wire). ``progress`` and
``result_reply`` entries are ``ok``, ``cancel``, ``invalid`` (reason ``unexpected cmd_uid``),
``unexpected-event``, or a full status mapping such as ``{status: cancel, reason: slo-violation}``.

Fault steps misanswer requests at the HTTP level. One becomes active when the script reaches it,
that is once the command before it was sent: a fault right after a command hits that command's
progress and result posts. It hits every request (or those of ``events``) until ``for`` has passed
since the first request it hit, or it has hit ``times`` requests (default 1); then the script goes
on. A WHATS_NEXT that a pending fault does not hit skips it. Fault keys:

- ``status``: answer with this HTTP status, body ``{"detail": ...}`` (``detail`` sets its text);
- ``body``: answer with this raw text; ``json``: with this JSON value (status 200 unless given);
- ``stall``: hold the request this long first (then the fault's answer, or the normal one).

When the script is done, every WHATS_NEXT gets ``SLEEP`` for ``sleep``.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from servo_actors.config.fields import Duration, StrictModel, split_optimizer_id
from servo_actors.errors import ConfigError, ProtocolError
from servo_actors.optimizer.application import Fault
from servo_actors.protocol.commands import OptimizerStatus
from servo_actors.protocol.reading import parse_reply, to_wire
from servo_actors.protocol.wire_types import Event
from servo_actors.vocabulary import SLEEP

__all__ = [
    "CommandStep",
    "DEFAULT_SLEEP",
    "FaultStep",
    "ScriptedDriver",
    "Step",
]

DEFAULT_SLEEP = 120.0
"""SLEEP duration once the script is done, unless the plan says ``sleep``."""

_NAMED_REPLIES: dict[str, dict[str, Any] | None] = {
    "ok": None,
    "cancel": {"status": "cancel", "reason": "cancelled", "message": "cancelled by the script"},
    "invalid": {
        "status": "invalid",
        "reason": "unexpected cmd_uid",
        "message": "the script no longer wants this command",
    },
    "unexpected-event": {"status": "unexpected-event", "message": "the script did not expect this event"},
}


def _reply(value: Any) -> dict[str, Any] | None:
    """A scripted answer: a name from ``_NAMED_REPLIES`` or a status mapping."""
    if isinstance(value, str):
        if value not in _NAMED_REPLIES:
            raise ValueError(f"{value!r} is not one of {', '.join(_NAMED_REPLIES)} (or a status mapping)")
        return copy.deepcopy(_NAMED_REPLIES[value])
    if isinstance(value, dict):
        try:
            return to_wire(OptimizerStatus.model_validate(value))
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"not an optimizer status: {where}: {first['msg']}") from None
    raise ValueError(f"expected a reply name or a status mapping, not {value!r}")


class _FaultSpec(StrictModel):
    model_config = ConfigDict(populate_by_name=True)

    status: int | None = Field(None, ge=100, le=599)
    detail: str | None = None
    body: str | None = None
    json_value: Any = Field(None, alias="json")
    stall: Duration = 0.0
    for_: Duration | None = Field(None, alias="for")
    times: int | None = Field(None, ge=1)
    events: list[Event] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> _FaultSpec:
        answers = [name for name in ("detail", "body", "json_value") if name in self.model_fields_set]
        if len(answers) > 1:
            raise ValueError("give at most one of detail, body and json")
        if self.for_ is not None and self.times is not None:
            raise ValueError("give for or times, not both")
        if self.status is None and not answers and self.stall <= 0:
            raise ValueError("a fault needs status, body, json, detail or stall")
        return self

    def fault(self) -> Fault:
        raw: bytes | None = None
        content_type = "application/json"
        if self.body is not None:
            raw, content_type = self.body.encode(), "text/plain; charset=utf-8"
        elif "json_value" in self.model_fields_set:
            raw = json.dumps(self.json_value).encode()
        elif self.detail is not None:
            raw = json.dumps({"detail": self.detail}).encode()
        status = self.status if self.status is not None else (200 if raw is not None else None)
        return Fault(stall=self.stall, status=status, body=raw, content_type=content_type)


class _CommandSpec(StrictModel):
    model_config = ConfigDict(populate_by_name=True)

    cmd: str
    param: dict[str, Any] | None = None
    progress: list[Any] = Field(default_factory=list)
    result_reply: Any = "ok"

    @field_validator("progress")
    @classmethod
    def _progress_replies(cls, values: list[Any]) -> list[Any]:
        for value in values:
            _reply(value)
        return values

    @field_validator("result_reply")
    @classmethod
    def _result_reply(cls, value: Any) -> Any:
        _reply(value)
        return value


class _Plan(StrictModel):
    model_config = ConfigDict(populate_by_name=True)

    app: str
    token: SecretStr | None = None
    sleep: Duration = DEFAULT_SLEEP
    script: list[Any]

    @field_validator("app")
    @classmethod
    def _org_app(cls, value: str) -> str:
        split_optimizer_id(value)
        return value


@dataclass
class CommandStep:
    """Send ``command``; answer its progress posts with ``progress`` in turn, its result with ``result_reply``."""

    command: dict[str, Any]
    progress: list[dict[str, Any] | None] = field(default_factory=list)
    result_reply: dict[str, Any] | None = None


@dataclass
class FaultStep:
    """Misanswer requests (of ``events``, or all) with ``fault`` for ``seconds`` or ``times`` requests."""

    fault: Fault
    seconds: float | None = None
    times: int = 1
    events: frozenset[str] | None = None
    started_at: float | None = None
    hits: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "fault": {"stall": self.fault.stall, "status": self.fault.status},
            "for": self.seconds,
            "times": None if self.seconds is not None else self.times,
            "hits": self.hits,
        }


Step = CommandStep | FaultStep


def _config_error(exc: ValidationError, source: str, prefix: str) -> ConfigError:
    first = exc.errors(include_url=False, include_input=False)[0]
    key = ".".join(str(part) for part in (prefix, *first["loc"]) if part != "")
    message = first["msg"].removeprefix("Value error, ")
    return ConfigError(message, source=source, key=key or None)


class ScriptedDriver:
    """A ``Driver`` (driver.py) that plays ``steps``; also a fault source for the server.

    Build it with ``from_plan``; the constructor takes already checked steps.
    """

    def __init__(
        self,
        steps: list[Step],
        *,
        app: str | None = None,
        token: SecretStr | None = None,
        sleep: float = DEFAULT_SLEEP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.token = token
        self.sleep = sleep
        self._steps = steps
        self._clock = clock
        self._position = 0
        self._active: CommandStep | None = None
        self._progress_seen = 0
        self._sent: list[dict[str, Any]] = []
        self._progress: list[dict[str, Any]] = []
        self._results: list[dict[str, Any]] = []
        self._cancelled: list[dict[str, Any]] = []
        self._faults_hit = 0
        self._faults_skipped = 0

    def __repr__(self) -> str:
        return f"ScriptedDriver(app={self.app!r}, steps={len(self._steps)}, position={self._position})"

    @classmethod
    def from_plan(
        cls, plan: Mapping[str, Any], *, source: str = "plan", clock: Callable[[], float] = time.monotonic
    ) -> ScriptedDriver:
        """Check a plan (see the module docstring); ConfigError naming ``source`` and the key at fault."""
        if not isinstance(plan, Mapping):
            raise ConfigError(
                f"a plan is a mapping with app and script, not {type(plan).__name__}", source=source
            )
        try:
            checked = _Plan.model_validate(dict(plan))
        except ValidationError as exc:
            raise _config_error(exc, source, "") from None
        steps = [_step(raw, source, f"script.{index}") for index, raw in enumerate(checked.script)]
        return cls(steps, app=checked.app, token=checked.token, sleep=checked.sleep, clock=clock)

    # --- Driver ----------------------------------------------------------------------------------

    def next_command(self) -> dict[str, Any]:
        while self._position < len(self._steps) and isinstance(self._steps[self._position], FaultStep):
            # fault_for would have answered this WHATS_NEXT if the fault hit it: the servo moved on.
            self._position += 1
            self._faults_skipped += 1
        if self._position >= len(self._steps):
            self._active = None
            return {
                "cmd": SLEEP,
                "param": {"duration": self.sleep, "data": {"reason": "the script is done"}},
            }
        step = self._steps[self._position]
        assert isinstance(step, CommandStep)
        self._position += 1
        self._active = step if step.command["cmd"] != SLEEP else None
        self._progress_seen = 0
        command = copy.deepcopy(step.command)
        self._sent.append(copy.deepcopy(command))
        return command

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        self._progress.append({"cmd_uid": command.get("cmd_uid"), "progress": progress})
        if self._active is None or self._progress_seen >= len(self._active.progress):
            self._progress_seen += 1
            return None
        reply = self._active.progress[self._progress_seen]
        self._progress_seen += 1
        return copy.deepcopy(reply)

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        self._results.append(
            {"cmd_uid": command.get("cmd_uid"), "cmd": command.get("cmd"), "event": event, "result": result}
        )
        reply = self._active.result_reply if self._active is not None else None
        self._active = None
        return copy.deepcopy(reply)

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        self._cancelled.append(
            {"cmd_uid": command.get("cmd_uid"), "cmd": command.get("cmd"), "reason": reason}
        )

    def state(self) -> dict[str, Any]:
        return {
            "kind": "script",
            "position": self._position,
            "steps": len(self._steps),
            "done": self._position >= len(self._steps),
            "sent": copy.deepcopy(self._sent),
            "progress": copy.deepcopy(self._progress),
            "results": copy.deepcopy(self._results),
            "cancelled": copy.deepcopy(self._cancelled),
            "faults_hit": self._faults_hit,
            "faults_skipped": self._faults_skipped,
        }

    # --- faults (the server asks before answering any request) -----------------------------------

    def fault_for(self, event: str, param: Any) -> Fault | None:
        while self._position < len(self._steps):
            step = self._steps[self._position]
            if not isinstance(step, FaultStep):
                return None
            if step.events is not None and event not in step.events:
                return None
            now = self._clock()
            if step.seconds is not None:
                if step.started_at is None:
                    step.started_at = now
                if now - step.started_at >= step.seconds:
                    self._position += 1
                    continue
            step.hits += 1
            self._faults_hit += 1
            if step.seconds is None and step.hits >= step.times:
                self._position += 1
            return step.fault
        return None


def _step(raw: Any, source: str, key: str) -> Step:
    if not isinstance(raw, dict):
        raise ConfigError(f"a step is a mapping with cmd or fault, not {raw!r}", source=source, key=key)
    if "fault" in raw:
        if set(raw) != {"fault"}:
            raise ConfigError("a fault step has only the fault key", source=source, key=key)
        if not isinstance(raw["fault"], dict):
            raise ConfigError("fault must be a mapping", source=source, key=f"{key}.fault")
        try:
            spec = _FaultSpec.model_validate(raw["fault"])
        except ValidationError as exc:
            raise _config_error(exc, source, f"{key}.fault") from None
        events = frozenset(str(event) for event in spec.events) if spec.events is not None else None
        times = spec.times if spec.times is not None else 1
        return FaultStep(fault=spec.fault(), seconds=spec.for_, times=times, events=events)
    try:
        command_spec = _CommandSpec.model_validate(raw)
    except ValidationError as exc:
        raise _config_error(exc, source, key) from None
    command: dict[str, Any] = {"cmd": command_spec.cmd}
    if command_spec.param is not None:
        command["param"] = command_spec.param
    try:
        parsed = parse_reply(command)
    except ProtocolError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ") if exc.field else str(exc)
        raise ConfigError(message, source=source, key=f"{key}.{exc.field}" if exc.field else key) from None
    return CommandStep(
        command=to_wire(parsed),
        progress=[_reply(value) for value in command_spec.progress],
        result_reply=_reply(command_spec.result_reply),
    )
