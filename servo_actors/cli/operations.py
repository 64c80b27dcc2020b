"""``check``, ``describe``, ``measure`` and ``adjust``: one operation on the connectors, right now.

Each command starts the connectors exactly as ``run`` does (a ``ServoRuntime``: the supervisor and
one fresh process per connector), runs one operation, prints the result and stops everything
again. Nothing persists between two commands: ``adjust`` prints what is in force after it, and a
later ``describe`` starts fresh connectors that report their own (initial) state.

Output: an aligned table on stdout (colour only on a terminal, never with ``NO_COLOR``), or with
``--json`` one object of a stable shape::

    {"operation": "measure", "status": "ok", "reason": "success", "message": null,
     "data": {...},
     "connectors": {"app": {"status": "ok", "reason": "success", "message": null}}}

``status``/``reason``/``message`` are the aggregated result (protocol.md's status fields);
``data`` is, by operation: describe ``{"components", "metrics"}`` (protocol.md's descriptor
parts), measure ``{"metrics", "annotations"}``, adjust ``{"components"}`` (the components the
adjusted connectors now hold), check ``{"checks": [{"connector", "name", "success", "message"}]}``;
``connectors`` is each connector's own outcome.

While ``measure`` or ``adjust`` runs and stderr is a terminal, one self-rewriting progress line
goes to stderr. ``measure`` without ``-d`` measures for ``DEFAULT_MEASURE_DURATION`` (0 s: each
connector reads what it can read at once, e.g. an instant Prometheus query), and it first checks
the requested metric names against ``describe``.

Exit codes: 0 success; 1 when the operation's status is not ``ok`` or a check failed (a line on
stderr names the connector); 2 for bad usage (an unknown metric, component or setting, a value
out of range, off its step or not among its values) or bad configuration. SIGINT or SIGTERM
stops the connectors (graceful, then SIGKILL) and exits 128 + the signal number (130 for Ctrl-C).
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import click

from servo_actors import signals
from servo_actors.cli.context import (
    CliState,
    color_enabled,
    echo_json,
    format_table,
    is_terminal,
    json_option,
    pass_state,
    watches_stop_signals,
)
from servo_actors.durations import format_duration
from servo_actors.errors import ConnectorError, UsageError

if TYPE_CHECKING:
    from servo_actors.actors import Operation, OperationResult, ServoRuntime
    from servo_actors.actors.operation_path import InFlight, OperationPath
    from servo_actors.config import ServoConfig

__all__ = [
    "BAR_WIDTH",
    "DEFAULT_MEASURE_DURATION",
    "REFRESH_INTERVAL",
    "SIGNAL_EXIT_BASE",
    "STEP_TOLERANCE",
    "adjust_cmd",
    "check_cmd",
    "convert_value",
    "describe_cmd",
    "measure_cmd",
    "parse_assignments",
    "resolve_assignments",
]

DEFAULT_MEASURE_DURATION = 0.0
"""Seconds ``measure`` measures without ``-d``: 0 means "now" (one reading per connector)."""
REFRESH_INTERVAL = 0.2
"""Seconds between two redraws of the progress line (the path looks at a stop more often)."""
SIGNAL_EXIT_BASE = 128
STEP_TOLERANCE = 1e-6
"""How far from the step grid (in steps) a value may be: absorbs float error such as 0.1 + 0.2."""
BAR_WIDTH = 24
"""Characters of the progress bar itself."""


# ----- running one operation ----------------------------------------------------------------------


@contextlib.contextmanager
def _connectors(
    config: ServoConfig, operation: str
) -> Iterator[tuple[ServoRuntime, OperationPath[Operation]]]:
    """The started runtime and the operation path (``OperationPath``) on it, watching the stop
    signals; on every way out the runtime is stopped, and a stop signal becomes a clean exit.

    The signal handler only records the signal (signals.py): the start and every wait of the path
    look at it, so a signal at any moment abandons the operation within one wait slice, and a
    second one changes nothing (the stop is bounded on its own).
    """
    from servo_actors.actors import ServoRuntime
    from servo_actors.actors.operation_path import OperationPath

    interrupted: int | None = None
    with signals.watching() as watcher:
        runtime = ServoRuntime(config)
        path = OperationPath(runtime, stop=watcher.stop)
        try:
            path.check_stop()
            if not runtime.start(stop=watcher.stop):  # False: stopped while the connectors started
                raise signals.StopRequested("stop")
            yield runtime, path
        except signals.StopRequested:
            interrupted = watcher.stop_signum or signal.SIGTERM
        finally:
            runtime.stop()
    if interrupted is not None:
        click.echo(
            f"interrupted by {signal.Signals(interrupted).name}: {operation} abandoned, "
            "its connectors were stopped",
            err=True,
        )
        raise click.exceptions.Exit(SIGNAL_EXIT_BASE + interrupted)


def _payload(result: OperationResult) -> dict[str, Any]:
    """The ``--json`` shape (module docstring)."""
    return {
        "operation": result.operation,
        "status": result.status,
        "reason": result.reason,
        "message": result.message,
        "data": result.data,
        "connectors": {
            name: {"status": part.status, "reason": part.reason, "message": part.message}
            for name, part in result.parts.items()
        },
    }


def _raise_unless_ok(result: OperationResult) -> None:
    if not result.ok:
        detail = result.message or "no connector gave a reason"
        raise ConnectorError(f"{result.operation} {result.status} ({result.reason}): {detail}")


# ----- progress ----------------------------------------------------------------------------------


class _ProgressLine:
    """One line on stderr, rewritten in place: ``measure [#####-----]  45%  13s/30s  message``;
    redrawn after each wait of the operation path that brought no result (a ``Reporter``, see
    actors/operation_path.py: the CLI imports the actors only when a command needs them).

    With a known duration the bar follows the clock (the runtime reports the furthest connector,
    which says little about the slowest); otherwise it shows what the connectors report.
    """

    def __init__(self, label: str, expected_seconds: float) -> None:
        self._label = label
        self._expected = expected_seconds
        self._began = time.monotonic()
        self._drawn = 0
        self._color = color_enabled(sys.stderr)

    def draw(self, reported: float, message: str) -> None:
        elapsed = time.monotonic() - self._began
        if self._expected > 0:
            percent = min(99.0, 100.0 * elapsed / self._expected)
            clock = f"{elapsed:.0f}s/{self._expected:.0f}s"
        else:
            percent, clock = reported, f"{elapsed:.0f}s"
        filled = round(BAR_WIDTH * percent / 100)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        if self._color:
            bar = click.style("#" * filled, fg="green") + "-" * (BAR_WIDTH - filled)
        text = f"{self._label} [{bar}] {percent:3.0f}%  {clock}  {message}".rstrip()
        # Never wrap: a wrapped line cannot be rewritten with a carriage return.
        width = shutil.get_terminal_size().columns - 1
        visible = len(click.unstyle(text))
        if visible > width:
            text = click.unstyle(text)[:width]
            visible = width
        click.echo("\r" + text + " " * max(0, self._drawn - visible), err=True, nl=False)
        self._drawn = visible

    def next_wait(self, op: InFlight, now: float) -> float:
        return REFRESH_INTERVAL

    def verdict(self) -> None:
        return None

    def report(self, op: InFlight, now: float) -> None:
        self.draw(op.progress, op.message)

    def settle(self) -> None:
        return None

    def cancelled(self, op: InFlight, verdict: Any) -> None:
        pass

    def close(self) -> None:
        if self._drawn:
            click.echo("\r" + " " * self._drawn + "\r", err=True, nl=False)
            self._drawn = 0


def _progress_for(label: str, expected_seconds: float) -> _ProgressLine | None:
    return _ProgressLine(label, expected_seconds) if is_terminal(sys.stderr) else None


# ----- formatting --------------------------------------------------------------------------------


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def _bounds(setting: dict[str, Any]) -> str | None:
    if setting.get("type") == "enum" or "values" in setting:
        return "|".join(str(v) for v in setting.get("values") or [])
    if "min" in setting or "max" in setting:
        step = f" step {_number(setting['step'])}" if setting.get("step") is not None else ""
        return f"{_number(setting.get('min'))}..{_number(setting.get('max'))}{step}"
    return None


def _settings_rows(components: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for component, body in components.items():
        for name, setting in ((body or {}).get("settings") or {}).items():
            kind = setting.get("type") or "-"
            if setting.get("pinned"):
                kind += " (pinned)"
            rows.append(
                [component, name, kind, _number(setting.get("value")), _bounds(setting), setting.get("unit")]
            )
    return rows


class _Styled(str):
    """A table cell with a colour: ``format_table`` sees plain text, ``_table`` adds the colour."""

    style: dict[str, Any]

    def __new__(cls, text: str, **style: Any) -> _Styled:
        cell = super().__new__(cls, text)
        cell.style = style
        return cell


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``format_table``, then colour for ``_Styled`` cells (after aligning: escapes have no width)."""
    text = format_table(headers, rows)
    if not color_enabled(sys.stdout):
        return text
    lines = text.split("\n")
    columns = [(match.start(), match.end()) for match in re.finditer(r"-+", lines[1])]
    for number, row in enumerate(rows, start=2):
        line = lines[number]
        for (start, end), cell in reversed(list(zip(columns, row, strict=True))):
            if isinstance(cell, _Styled) and cell:
                plain = line[start:end].rstrip()
                line = line[:start] + click.style(plain, **cell.style) + line[start + len(plain) :]
        lines[number] = line
    return "\n".join(lines)


def _status_word(ok: bool) -> _Styled:
    return _Styled("ok", fg="green") if ok else _Styled("FAILED", fg="red", bold=True)


# ----- describe ----------------------------------------------------------------------------------


@watches_stop_signals
@click.command("describe")
@json_option
@pass_state
def describe_cmd(state: CliState, as_json: bool) -> None:
    """Show what the connectors describe: components with their settings, and metrics.

    Exits 1, naming the connector, when one of them fails to describe itself.
    """
    with _connectors(state.config, "describe") as (runtime, path):
        result = path.result("describe")
        placement = _placement(runtime, state.config)
    if as_json:
        echo_json(_with_placement(_payload(result), placement))
    else:
        data = result.data
        rows = _settings_rows(data.get("components") or {})
        click.echo(_table(["COMPONENT", "SETTING", "TYPE", "VALUE", "RANGE/VALUES", "UNIT"], rows))
        metrics = [[name, (info or {}).get("unit")] for name, info in (data.get("metrics") or {}).items()]
        click.echo()
        click.echo(_table(["METRIC", "UNIT"], metrics))
        _echo_placement(placement)
    _raise_unless_ok(result)


def _placement(runtime: ServoRuntime, config: ServoConfig) -> dict[str, str] | None:
    """Where each connector runs (``local``, a member's ``HOST:PORT``, or what it waits for), in
    convention mode only (None otherwise: the output stays as it always was)."""
    if config.supervisor.convention is None:
        return None
    status = runtime.status()
    return {child.name: getattr(child, "where", None) or "local" for child in status.children}


def _with_placement(payload: dict[str, Any], placement: dict[str, str] | None) -> dict[str, Any]:
    if placement is not None:
        payload["placement"] = placement
    return payload


def _echo_placement(placement: dict[str, str] | None) -> None:
    if placement is not None:
        click.echo()
        click.echo(_table(["CONNECTOR", "RUNS ON"], [[name, where] for name, where in placement.items()]))


# ----- check -------------------------------------------------------------------------------------


@watches_stop_signals
@click.command("check")
@json_option
@pass_state
def check_cmd(state: CliState, as_json: bool) -> None:
    """Run every connector's checks; exit 1 if any check or connector failed.

    A connector without checks shows as one passing row, so every connector is accounted for.
    With an optimizer configured, one more row (connector ``servo``, check ``identity``) says
    whether a servo of the same identity runs here and reports a conflict (``identity.py``).
    """
    with _connectors(state.config, "check") as (runtime, path):
        result = path.result("check")
        placement = _placement(runtime, state.config)
    checks = list(result.data.get("checks") or [])
    identity = _identity_check(state.config)
    if identity is not None:
        checks.append(identity)
    failed_checks = [c for c in checks if not c.get("success")]
    if as_json:
        payload = _payload(result)
        payload["data"] = {**payload["data"], "checks": checks}
        echo_json(_with_placement(payload, placement))
    else:
        rows = []
        for name, part in result.parts.items():
            mine = [c for c in checks if c.get("connector") == name]
            if not part.ok:
                rows.append([name, "-", _status_word(False), part.message])
            elif not mine:
                rows.append([name, "-", _status_word(True), "no checks"])
            rows += [
                [name, c.get("name"), _status_word(bool(c.get("success"))), c.get("message")] for c in mine
            ]
        if identity is not None:
            rows.append(["servo", "identity", _status_word(identity["success"]), identity["message"]])
        click.echo(_table(["CONNECTOR", "CHECK", "RESULT", "MESSAGE"], rows))
        _echo_placement(placement)
    _raise_unless_ok(result)
    if failed_checks:
        named = "; ".join(
            f"connector {c.get('connector')!r}: {c.get('name')}: {c.get('message') or 'failed'}"
            for c in failed_checks
        )
        raise ConnectorError(f"{len(failed_checks)} of {len(checks)} checks failed: {named}")


def _identity_check(config: ServoConfig) -> dict[str, Any] | None:
    """The identity line of ``check`` (None without an optimizer): a conflict the running servo reports."""
    if config.optimizer is None:
        return None
    from servo_actors.identity import check_identity

    success, message = check_identity(config)
    return {"connector": "servo", "name": "identity", "success": success, "message": message}


# ----- measure -----------------------------------------------------------------------------------


def _duration(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float:
    from servo_actors.durations import parse_duration

    if value is None:
        return DEFAULT_MEASURE_DURATION
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _measure_rows(metrics: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for name, metric in metrics.items():
        unit = (metric or {}).get("unit") or None
        if metric.get("values") is None:
            value = _number(metric.get("value"))
            rows.append([name, "-", 1, value, value, unit])
            continue
        for series in metric.get("values") or []:
            values = [point[1] for point in series.get("data") or []]
            mean = _number(sum(values) / len(values)) if values else None
            last = _number(values[-1]) if values else None
            rows.append([name, series.get("id"), len(values), mean, last, unit])
    return rows


@watches_stop_signals
@click.command("measure")
@click.argument("metrics", nargs=-1)
@click.option(
    "-d",
    "--duration",
    callback=_duration,
    metavar="DURATION",
    help=(
        "How long to measure: seconds, or e.g. 30s, 5m, 1m30s."
        f"  [default: {format_duration(DEFAULT_MEASURE_DURATION)}, measure now]"
    ),
)
@json_option
@pass_state
def measure_cmd(state: CliState, metrics: tuple[str, ...], duration: float, as_json: bool) -> None:
    """Measure METRICS (default: every described metric) for DURATION, now.

    Every connector takes part (a load generator runs during each measurement). Unknown metric
    names exit 2 before anything is measured. A progress line shows on a terminal.
    """
    from servo_actors.connectors.base import Control

    control = Control(duration=duration)
    with _connectors(state.config, "measure") as (_runtime, path):
        wanted = None
        if metrics:
            described = path.result("describe")
            _raise_unless_ok(described)
            wanted = _known_metrics(metrics, described.data.get("metrics") or {})
        progress = _progress_for("measure", control.expected_seconds)
        result = path.result("measure", reporter=progress, metrics=wanted, control=control)
    if as_json:
        echo_json(_payload(result))
    else:
        rows = _measure_rows(result.data.get("metrics") or {})
        click.echo(_table(["METRIC", "SERIES", "POINTS", "MEAN", "LAST", "UNIT"], rows))
    _raise_unless_ok(result)


def _known_metrics(requested: Sequence[str], described: dict[str, Any]) -> list[str]:
    unknown = [name for name in requested if name not in described]
    if unknown:
        known = ", ".join(described) or "none"
        raise UsageError(f"unknown metric(s) {', '.join(unknown)} (the connectors describe: {known})")
    return list(dict.fromkeys(requested))


# ----- adjust ------------------------------------------------------------------------------------


def parse_assignments(arguments: Sequence[str]) -> list[tuple[str, str]]:
    """``["web.cpu=1.5"]`` -> ``[("web.cpu", "1.5")]``; UsageError for anything else or a repeat.

    >>> parse_assignments(["web.cpu=1.5", "web.gc=g1"])
    [('web.cpu', '1.5'), ('web.gc', 'g1')]
    """
    found: list[tuple[str, str]] = []
    for argument in arguments:
        target, equals, raw = argument.partition("=")
        component, dot, setting = target.strip().rpartition(".")
        if not equals or not dot or not component or not setting:
            raise UsageError(f"{argument!r} is not COMPONENT.SETTING=VALUE (e.g. web.cpu=1.5)")
        if any(target.strip() == seen for seen, _ in found):
            raise UsageError(f"{target.strip()} is given more than once")
        found.append((target.strip(), raw.strip()))
    return found


def _locate(target: str, components: dict[str, Any]) -> tuple[str, str]:
    """Split ``target`` at the dot that names a described component and setting (names may hold dots)."""
    parts = target.split(".")
    for index in range(len(parts) - 1, 0, -1):
        component, setting = ".".join(parts[:index]), ".".join(parts[index:])
        if setting in ((components.get(component) or {}).get("settings") or {}):
            return component, setting
    for index in range(len(parts) - 1, 0, -1):
        component, setting = ".".join(parts[:index]), ".".join(parts[index:])
        if component in components:
            known = ", ".join((components[component] or {}).get("settings") or {}) or "none"
            raise UsageError(f"unknown setting {setting!r} in {target} (settings of {component}: {known})")
    component = target.rpartition(".")[0]
    raise UsageError(
        f"unknown component {component!r} in {target} (known: {', '.join(components) or 'none'})"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def convert_value(where: str, setting: dict[str, Any], raw: str) -> Any:
    """``raw`` as the value ``setting`` (a described setting) accepts, or UsageError naming ``where``.

    Range: a number within [min, max] on the grid min + k * step, an int when min and step are
    ints. Enum: one of its values (as declared). Any other type: a number if it reads as one,
    else the text.
    """
    if setting.get("pinned"):
        raise UsageError(f"{where} is pinned: it cannot be adjusted")
    kind = setting.get("type")
    if kind == "enum":
        for value in setting.get("values") or []:
            if str(value) == raw:
                return value
        choices = ", ".join(str(v) for v in setting.get("values") or [])
        raise UsageError(f"{where}={raw!r} is not one of its values: {choices}")
    try:
        number = float(raw)
    except ValueError:
        if kind == "range":
            raise UsageError(f"{where}={raw!r} is not a number") from None
        return raw
    if not math.isfinite(number):
        raise UsageError(f"{where}={raw!r} is not a finite number")
    if kind != "range":
        return int(number) if number.is_integer() and "." not in raw else number
    low, high, step = setting.get("min"), setting.get("max"), setting.get("step")
    if (low is not None and number < low) or (high is not None and number > high):
        raise UsageError(f"{where}={raw} is outside its range {_number(low)}..{_number(high)}")
    if step and low is not None:
        steps = (number - low) / step
        if abs(steps - round(steps)) > STEP_TOLERANCE:
            raise UsageError(f"{where}={raw} is not on the step {_number(step)} from {_number(low)}")
    if _is_int(step) and (low is None or _is_int(low)):
        return int(round(number))
    return number


def resolve_assignments(assignments: Sequence[tuple[str, str]], components: dict[str, Any]) -> dict[str, Any]:
    """The ADJUST request ``{component: {"settings": {setting: {"value": v}}}}`` for ``assignments``,
    checked against the described ``components``; UsageError names the first one that is wrong."""
    request: dict[str, Any] = {}
    for target, raw in assignments:
        component, setting = _locate(target, components)
        value = convert_value(target, components[component]["settings"][setting], raw)
        request.setdefault(component, {"settings": {}})["settings"][setting] = {"value": value}
    return request


def _adjust_rows(components: dict[str, Any], request: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for component, body in components.items():
        asked = (request.get(component) or {}).get("settings") or {}
        for name, setting in ((body or {}).get("settings") or {}).items():
            value = _number(setting.get("value"))
            rows.append(
                [component, name, _Styled(value, bold=True) if name in asked else value, setting.get("unit")]
            )
    return rows


@watches_stop_signals
@click.command("adjust")
@click.argument("assignments", nargs=-1, required=True, metavar="COMPONENT.SETTING=VALUE...")
@json_option
@pass_state
def adjust_cmd(state: CliState, assignments: tuple[str, ...], as_json: bool) -> None:
    """Apply settings through the connectors that own them; print what is now in force.

    Each value is checked against describe first: an unknown component or setting, a value out
    of range, off its step or not among its values exits 2 naming it, and nothing is adjusted.
    """
    parsed = parse_assignments(assignments)
    with _connectors(state.config, "adjust") as (_runtime, path):
        described = path.result("describe")
        _raise_unless_ok(described)
        request = resolve_assignments(parsed, described.data.get("components") or {})
        progress = _progress_for("adjust", 0.0)
        result = path.result("adjust", reporter=progress, components=request)
    if as_json:
        echo_json(_payload(result))
    else:
        rows = _adjust_rows(result.data.get("components") or {}, request)
        click.echo(_table(["COMPONENT", "SETTING", "VALUE", "UNIT"], rows))
    _raise_unless_ok(result)
