"""``command``: describe, measure, adjust and check an application with your own shell commands.

Configuration (every command is optional)::

    - name: app
      type: command
      config:
        timeout: 30s            # per command; see "Timeouts" below
        shell: /bin/sh          # commands run as [shell, "-c", command]
        cwd: /srv/app           # working directory (default: the servo's)
        env: {APP_URL: http://127.0.0.1:8080}
        describe: ./describe.sh
        measure: ./measure.sh
        adjust: ./adjust.sh
        check:                  # a single command, or name: command
          app-up: curl -fsS http://127.0.0.1:8080/health
          disk: test -w /srv/app

What each command receives (environment; values are never pasted into the command string):

- always: ``SERVO_OPERATION`` (describe|measure|adjust|check), ``SERVO_CONNECTOR`` (its name),
  and the ``env`` of the config on top of the servo's environment (``OPSANI_TOKEN`` withheld);
- measure: ``SERVO_METRICS`` (requested names, comma-separated, may be empty),
  ``SERVO_DURATION``, ``SERVO_WARMUP``, ``SERVO_DELAY`` (seconds);
- measure and adjust: ``SERVO_CONTROL_DURATION``, ``SERVO_CONTROL_WARMUP``,
  ``SERVO_CONTROL_DELAY``, ``SERVO_CONTROL_SETTLEMENT`` (seconds), ``SERVO_CONTROL_USERDATA``
  (JSON);
- adjust: ``SERVO_<COMPONENT>_<SETTING>`` for each requested value (names uppercased, every
  other character than A-Z and 0-9 turned into ``_``; strings as they are, numbers and booleans
  as JSON: ``1.5``, ``true``), and ``SERVO_ADJUST`` holding the whole request as JSON
  (``{"web": {"settings": {"cpu": {"value": 1.5}}}}``).

What each command prints on stdout (log to stderr; stderr is only read to explain a failure):

- describe: ``{"components": {...}, "metrics": {...}}``, the two parts exactly as protocol.md's
  ``descriptor.application.components`` and ``descriptor.measurement.metrics``, e.g.
  ``{"components": {"web": {"settings": {"replicas": {"type": "range", "min": 1, "max": 4,
  "step": 1, "value": 2}}}}, "metrics": {"p99_latency": {"unit": "ms"}}}``;
- measure: ``{"metrics": {...}, "annotations": {...}}`` with protocol.md's metric shapes (a
  single reading ``{"unit": "ms", "value": 12.5}`` or time series ``{"unit": "ms", "values":
  [{"id": "...", "data": [[epoch_seconds, value], ...]}]}``; a missing unit is taken from
  describe), or the simple form ``{"p99_latency": 12.5, "throughput": 300}``, which becomes
  single readings with the units from describe. Only requested metrics are returned;
- adjust: nothing (the requested values are then reported as in force), or
  ``{"components": {...}}`` holding the settings now in force, in describe's shape;
- check: nothing; the exit status is the result (0 passes).

A non-zero exit fails the operation with the exit status and the tail of stderr; output that is
not the JSON above fails it with what is wrong.

Timeouts: each command may run for ``timeout``; a measure command for ``timeout`` plus the
control's warmup + duration + delay, an adjust command for ``timeout`` plus its settlement (the
command is expected to wait those out). Every command runs in a process group of its own;
when it overruns, the whole group (its children too) is killed with SIGKILL and the operation
fails with reason ``timeout``. When the command exits, whatever it left running in its group
is killed too: to start something that outlives the command, detach it (``setsid``). On Linux
the command is also killed if the connector's process dies (a cancel kills that process).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from servo_actors.config.models import Duration
from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.connectors.wait import DEFAULT_PROGRESS_INTERVAL
from servo_actors.durations import format_duration

DEFAULT_TIMEOUT = 60.0
"""Seconds a command may run (beyond the time its control asks for) before it is killed."""
REAP_TIMEOUT = 5.0
"""Seconds to wait for a SIGKILLed command to be reaped before giving up on it."""
STDERR_TAIL_LINES = 10
STDERR_TAIL_CHARS = 2000
MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""Largest stdout read from a command; more is a failure rather than a memory blow-up."""
WITHHELD_ENV = ("OPSANI_TOKEN",)
"""The servo's own secrets, not passed on to commands."""


def _stringify_env(value: Any) -> Any:
    # YAML reads `PORT: 8080` as a number; environment values are strings.
    if isinstance(value, dict):
        return {
            key: _env_text(item) if isinstance(item, bool | int | float) else item
            for key, item in value.items()
        }
    return value


def _env_text(value: Any) -> str:
    """A value as an environment variable holds it: strings as they are, the rest as JSON (``true``, ``1.5``)."""
    return value if isinstance(value, str) else json.dumps(value)


def _checks_by_name(value: Any) -> Any:
    return {"check": value} if isinstance(value, str) else value


class CommandConfig(BaseModel):
    """Configuration of ``command``: a shell command per operation, all optional."""

    model_config = ConfigDict(extra="forbid")

    describe: str | None = None
    measure: str | None = None
    adjust: str | None = None
    check: Annotated[dict[str, str], BeforeValidator(_checks_by_name)] = Field(default_factory=dict)
    timeout: Duration = DEFAULT_TIMEOUT
    env: Annotated[dict[str, str], BeforeValidator(_stringify_env)] = Field(default_factory=dict)
    cwd: str | None = None
    shell: str = "/bin/sh"
    # How often measure and adjust report progress while their command runs.
    progress_interval: Duration = DEFAULT_PROGRESS_INTERVAL

    @field_validator("timeout", "progress_interval")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be more than 0")
        return value

    @field_validator("describe", "measure", "adjust")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an empty command; leave the key out instead")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not name or "=" in name or "\0" in name or "\0" in item:
                raise ValueError(f"{name!r} cannot be an environment variable (name or value)")
        return value


class CommandConnector(Connector):
    """Runs the configured shell commands; see the module docstring for the contract."""

    config_model = CommandConfig
    config: CommandConfig

    def __init__(self, name: str, config: Any = None) -> None:
        super().__init__(name, config)
        self._description: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        if self.config.describe is None:
            description: dict[str, Any] = {"components": {}, "metrics": {}}
        else:
            stdout = _run(self._spec("describe", self.config.describe), self.config.timeout, {})
            description = _parse_description(_json("describe", stdout))
        self._description = description
        return description

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        if self.config.measure is None:
            return {"metrics": {}, "annotations": {}}
        env = {
            "SERVO_METRICS": ",".join(metrics),
            "SERVO_DURATION": _seconds(control.duration),
            "SERVO_WARMUP": _seconds(control.warmup),
            "SERVO_DELAY": _seconds(control.delay),
            **_control_env(control),
        }
        expected = control.warmup + control.duration + control.delay
        stdout = self._run_reporting("measure", self.config.measure, expected, env, progress)
        return _parse_measurement(_json("measure", stdout), self._units(), metrics)

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        if not components:
            return {}
        if self.config.adjust is None:
            raise ConnectorFailure(
                f"{self.name}: no adjust command configured", status="rejected", reason="not-adjustable"
            )
        env = {**_settings_env(components), "SERVO_ADJUST": json.dumps(components), **_control_env(control)}
        stdout = self._run_reporting("adjust", self.config.adjust, control.settlement, env, progress)
        if not stdout.strip():
            return self._echo(components)
        return _parse_adjusted(_json("adjust", stdout))

    def check(self) -> list[dict[str, Any]]:
        results = []
        for check_name, command in self.config.check.items():
            try:
                _run(self._spec("check", command), self.config.timeout, {})
            except ConnectorFailure as failure:
                results.append({"name": check_name, "success": False, "message": failure.message})
            else:
                results.append({"name": check_name, "success": True, "message": "exited with status 0"})
        return results

    def _run_reporting(
        self, operation: str, command: str, expected: float, env: dict[str, str], progress: ProgressFn
    ) -> str:
        """Run with ``timeout + expected`` seconds, reporting progress against ``expected``."""

        def tick(elapsed: float) -> None:
            # Capped below 100: the command, not the clock, says when it is done.
            percent = min(99, round(100 * elapsed / expected)) if expected > 0 else 0
            progress(percent, f"{operation} command running for {format_duration(elapsed)}")

        progress(0, f"{operation} command started")
        stdout = _run(
            self._spec(operation, command),
            self.config.timeout + expected,
            env,
            on_tick=tick,
            tick_interval=self.config.progress_interval,
        )
        progress(100, f"{operation} command finished")
        return stdout

    def _spec(self, operation: str, command: str) -> _CommandSpec:
        env = {key: value for key, value in os.environ.items() if key not in WITHHELD_ENV}
        env.update(self.config.env)
        env.update({"SERVO_OPERATION": operation, "SERVO_CONNECTOR": self.name})
        return _CommandSpec(operation, command, self.config.shell, self.config.cwd, env)

    def _units(self) -> dict[str, str | None]:
        if self._description is None and self.config.describe is not None:
            self.describe()
        metrics = (self._description or {}).get("metrics", {})
        return {name: (spec or {}).get("unit") for name, spec in metrics.items()}

    def _echo(self, components: dict[str, Any]) -> dict[str, Any]:
        """The requested values as in force, with bounds from the last describe when known."""
        described = (self._description or {}).get("components", {})
        echoed: dict[str, Any] = {}
        for component, body in components.items():
            known = described.get(component, {}).get("settings", {})
            settings = {}
            for setting, wanted in body["settings"].items():
                settings[setting] = {**known.get(setting, {}), "value": wanted["value"]}
            echoed[component] = {"settings": settings}
        return echoed


@dataclass(frozen=True)
class _CommandSpec:
    """What to run and how: the operation (for messages), the command, shell, cwd, environment."""

    operation: str
    command: str
    shell: str
    cwd: str | None
    env: dict[str, str]


def _run(
    spec: _CommandSpec,
    timeout: float,
    extra_env: dict[str, str],
    *,
    on_tick: Callable[[float], None] | None = None,
    tick_interval: float = DEFAULT_PROGRESS_INTERVAL,
) -> str:
    """Run ``spec`` with ``extra_env`` added; its stdout, or ConnectorFailure saying what went wrong.

    ``on_tick(elapsed_seconds)`` is called every ``tick_interval`` while the command runs.

    The command gets its own process group; that group is SIGKILLed when the command overruns
    ``timeout`` and again when it exits (so nothing it started outlives it). stdout and stderr
    go to temporary files, not pipes, so a background child holding them open cannot stall us.
    """
    op = spec.operation
    env = {**spec.env, **extra_env}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                [spec.shell, "-c", spec.command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                cwd=spec.cwd,
                process_group=0,
                preexec_fn=_die_with_parent,
            )
        except (OSError, ValueError) as exc:
            # ValueError: an embedded NUL byte in a value; OSError: no such shell or cwd.
            raise ConnectorFailure(f"{op} command could not start: {exc}", reason="start-failed") from None
        try:
            finished = _wait_for_exit(proc, timeout, tick_interval, on_tick)
        finally:
            # Kill before reaping: the zombie leader keeps the group id from being reused.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=REAP_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise ConnectorFailure(
                    f"{op} command (pid {proc.pid}) did not die within {format_duration(REAP_TIMEOUT)} of SIGKILL",
                    reason="timeout",
                ) from None
        if not finished:
            raise ConnectorFailure(
                f"{op} command timed out after {format_duration(timeout)}; killed it and its process group",
                reason="timeout",
            )
        if proc.returncode != 0:
            raise ConnectorFailure(
                f"{op} command {_exit_text(proc.returncode)}{_tail(err)}", reason="command-failed"
            )
        out.seek(0)
        data = out.read(MAX_OUTPUT_BYTES + 1)
    if len(data) > MAX_OUTPUT_BYTES:
        raise ConnectorFailure(
            f"{op} command printed more than {MAX_OUTPUT_BYTES} bytes", reason="bad-output"
        )
    return data.decode("utf-8", errors="replace")


def _wait_for_exit(
    proc: subprocess.Popen[Any], timeout: float, tick_interval: float, on_tick: Callable[[float], None] | None
) -> bool:
    """True when the command's process exits within ``timeout``; it is left unreaped (Linux)."""
    began = time.monotonic()
    deadline = began + timeout
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None  # not Linux, or an old kernel: fall back to Popen.wait, which reaps
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            step = min(tick_interval, remaining)
            if pidfd is not None:
                if select.select([pidfd], [], [], step)[0]:
                    return True
            else:
                try:
                    proc.wait(timeout=step)
                    return True
                except subprocess.TimeoutExpired:
                    pass
            if on_tick is not None and time.monotonic() < deadline:
                on_tick(time.monotonic() - began)
    finally:
        if pidfd is not None:
            os.close(pidfd)


if sys.platform == "linux":
    import ctypes

    _LIBC = ctypes.CDLL(None, use_errno=True)
    _PR_SET_PDEATHSIG = 1

    def _die_with_parent() -> None:
        # Runs in the child between fork and exec. A cancel SIGKILLs the connector's process,
        # which cannot then kill this group: the kernel does it for the direct child.
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

else:  # pragma: no cover - only Linux has PR_SET_PDEATHSIG

    def _die_with_parent() -> None:
        pass


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _tail(err_file: Any) -> str:
    err_file.seek(0, os.SEEK_END)
    size = err_file.tell()
    err_file.seek(max(0, size - STDERR_TAIL_CHARS))
    text = err_file.read().decode("utf-8", errors="replace")
    lines = text.strip().splitlines()[-STDERR_TAIL_LINES:]
    return ": " + " | ".join(lines) if lines else " (no stderr)"


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _control_env(control: Control) -> dict[str, str]:
    return {
        "SERVO_CONTROL_DURATION": _seconds(control.duration),
        "SERVO_CONTROL_WARMUP": _seconds(control.warmup),
        "SERVO_CONTROL_DELAY": _seconds(control.delay),
        "SERVO_CONTROL_SETTLEMENT": _seconds(control.settlement),
        "SERVO_CONTROL_USERDATA": json.dumps(control.userdata),
    }


def setting_env_name(component: str, setting: str) -> str:
    """``SERVO_WEB_CPU`` for ``("web", "cpu")``; ``SERVO_MY_APP_GC_TYPE`` for ``("my-app", "gc.type")``."""
    return re.sub(r"[^A-Z0-9]", "_", f"SERVO_{component}_{setting}".upper())


def _settings_env(components: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    origin: dict[str, str] = {}
    for component, body in components.items():
        settings = body.get("settings") if isinstance(body, dict) else None
        if not isinstance(settings, dict):
            raise _rejected(f"adjust: {component}: expected {{'settings': {{name: {{'value': v}}}}}}")
        for setting, wanted in settings.items():
            where = f"{component}.{setting}"
            if not isinstance(wanted, dict) or "value" not in wanted:
                raise _rejected(f"adjust: {where}: expected {{'value': v}}, got {wanted!r}")
            name = setting_env_name(component, setting)
            if name in env:
                raise _rejected(f"adjust: {where} and {origin[name]} would both be passed as {name}")
            text = _env_text(wanted["value"])
            if "\0" in text:
                raise _rejected(f"adjust: {where}: a value cannot contain a NUL byte")
            env[name], origin[name] = text, where
    return env


def _rejected(message: str) -> ConnectorFailure:
    return ConnectorFailure(message, status="rejected", reason="invalid-value")


def _bad_output(operation: str, what: str) -> ConnectorFailure:
    return ConnectorFailure(f"{operation} command printed {what}", reason="bad-output")


def _json(operation: str, stdout: str) -> Any:
    if not stdout.strip():
        raise _bad_output(operation, "nothing; expected a JSON object on stdout")
    try:
        return json.loads(stdout)
    except json.JSONDecodeError as exc:
        excerpt = stdout.strip()[:80]
        raise _bad_output(
            operation, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): {excerpt!r}"
        ) from None


def _object(operation: str, value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad_output(operation, f"{where} as {type(value).__name__}; expected a JSON object")
    return value


def _parse_components(operation: str, value: Any) -> dict[str, Any]:
    components = _object(operation, value, '"components"')
    for component, body in components.items():
        settings = _object(operation, body, f'component "{component}"').get("settings")
        for setting, spec in _object(operation, settings, f'"{component}.settings"').items():
            _object(operation, spec, f'setting "{component}.{setting}"')
    return components


def _parse_description(document: Any) -> dict[str, Any]:
    document = _object("describe", document, "its output")
    extra = set(document) - {"components", "metrics"}
    if extra:
        raise _bad_output("describe", f"unexpected keys {sorted(extra)}; expected components and metrics")
    components = _parse_components("describe", document.get("components", {}))
    metrics = _object("describe", document.get("metrics", {}), '"metrics"')
    for name, spec in metrics.items():
        _object("describe", spec, f'metric "{name}"')
    return {"components": components, "metrics": metrics}


def _parse_adjusted(document: Any) -> dict[str, Any]:
    document = _object("adjust", document, "its output")
    if "components" not in document:
        raise _bad_output(
            "adjust", 'a JSON object without "components"; print nothing or {"components": {...}}'
        )
    return _parse_components("adjust", document["components"])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _parse_measurement(document: Any, units: dict[str, str | None], requested: list[str]) -> dict[str, Any]:
    document = _object("measure", document, "its output")
    wanted = set(requested)
    if isinstance(document.get("metrics"), dict):
        annotations = _object("measure", document.get("annotations", {}), '"annotations"')
        metrics: dict[str, Any] = {}
        for name, reading in document["metrics"].items():
            reading = _object("measure", reading, f'metric "{name}"')
            if "value" in reading:
                if not _is_number(reading["value"]):
                    raise _bad_output("measure", f'metric "{name}" with a value that is not a number')
            elif not isinstance(reading.get("values"), list):
                raise _bad_output("measure", f'metric "{name}" without "value" or a "values" list')
            if name in wanted:
                metrics[name] = {"unit": units.get(name), **reading}
        return {"metrics": metrics, "annotations": annotations}
    metrics = {}
    for name, value in document.items():
        if not _is_number(value):
            raise _bad_output(
                "measure",
                f'"{name}": {value!r}; expected {{"metrics": {{...}}, "annotations": {{...}}}} or {{"name": number}}',
            )
        if name in wanted:
            metrics[name] = {"unit": units.get(name), "value": value}
    return {"metrics": metrics, "annotations": {}}
