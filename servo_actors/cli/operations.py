"""``describe``, ``measure`` and ``adjust``: one operation on the connectors, right now
(``check``, the fourth, is ``check_cmd``: it shares all that is said here).

Each command starts the connectors exactly as ``run`` does (a ``ServoRuntime``: the supervisor and
one fresh process per connector), runs one operation, prints the result and stops everything
again. Nothing persists between two commands: ``adjust`` prints what is in force after it, and a
later ``describe`` starts fresh connectors that report their own (initial) state.

Output: an aligned table on stdout (colour only on a terminal, never with ``NO_COLOR``), or with
``--json`` one object of a stable shape::

    {"operation": "measure", "status": "ok", "reason": "success", "message": null,
     "data": {...},
     "connectors": {"app": {"status": "ok", "reason": "success", "message": null}}}

``status``/``reason``/``message`` are the aggregated result (docs/protocol.md, "Results");
``data`` is, by operation: describe ``{"components", "metrics"}`` (docs/protocol.md's descriptor
parts), measure ``{"metrics", "annotations"}``, adjust ``{"components"}`` (the components the
adjusted connectors now hold), check ``{"checks": [{"connector", "name", "success", "message",
"id", "severity", "tags", "remedy", "outcome"}], "rounds"}``;
``connectors`` is each connector's own outcome. A ``check`` whose operation ran but one of whose
checks failed says so as the exit code does: status ``failed``, reason ``check-failed``, the
message naming the failed checks (and so does each connector with a failed check).

While ``measure`` or ``adjust`` runs and stderr is a terminal, one self-rewriting progress line
goes to stderr. ``measure`` without ``-d`` measures for ``DEFAULT_MEASURE_DURATION`` (0 s: each
connector reads what it can read at once, e.g. an instant Prometheus query), and it first checks
the requested metric names against ``describe``.

Exit codes: 0 success; 1 when the operation's status is not ``ok`` or a check failed (a line on
stderr names the connector); 2 for bad usage (an unknown metric, component or setting, a value
out of range, off its step or not among its values) or bad configuration. SIGINT or SIGTERM
stops the connectors (graceful, then SIGKILL) and exits 128 + the signal number (130 for Ctrl-C).

The commands' parts live beside them: ``started_connectors`` (the connectors for one operation,
and the signal exit), ``progress_line``, ``operation_output`` (the ``--json`` object and the
tables), ``assignments`` (``adjust``'s arguments checked against describe) and ``check_rounds``
(``check``'s filters, halting and waiting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from servo_actors.cli.assignments import (
    parse_assignments,
    resolve_assignments,
)
from servo_actors.cli.context import (
    CliState,
    app_option,
    json_option,
    limit_option,
    pass_state,
    watches_stop_signals,
)
from servo_actors.cli.operation_output import (
    adjust_rows,
    connector_placement,
    json_payload,
    measure_rows,
    placement_text,
    settings_rows,
    styled_table,
    with_placement,
)
from servo_actors.cli.per_app import AppCommand, for_each_app
from servo_actors.cli.progress_line import progress_line_for
from servo_actors.cli.started_connectors import only_connectors, running_connectors
from servo_actors.durations import format_duration
from servo_actors.errors import ConnectorError, ServoError, UsageError

if TYPE_CHECKING:
    from servo_actors.actors import OperationResult
    from servo_actors.config import ServoConfig

__all__ = ["DEFAULT_MEASURE_DURATION", "adjust_cmd", "describe_cmd", "measure_cmd"]

DEFAULT_MEASURE_DURATION = 0.0
"""Seconds ``measure`` measures without ``-d``: 0 means "now" (one reading per connector)."""


def _failure(result: OperationResult) -> ConnectorError | None:
    """The error a result that is not ``ok`` ends the command with (None when it is ok)."""
    if result.ok:
        return None
    detail = result.message or "no connector gave a reason"
    return ConnectorError(f"{result.operation} {result.status} ({result.reason}): {detail}")


def _raise_unless_ok(result: OperationResult) -> None:
    error = _failure(result)
    if error is not None:
        raise error


# ----- describe ----------------------------------------------------------------------------------


@watches_stop_signals
@click.command("describe")
@json_option
@app_option
@limit_option
@pass_state
def describe_cmd(state: CliState, as_json: bool, app_names: tuple[str, ...], limit: int | None) -> None:
    """Show what the connectors describe: components with their settings, and metrics.

    Exits 1, naming the connector, when one of them fails to describe itself.
    """
    for_each_app(state, app_names, limit, as_json, AppCommand("describe", _describe, _describe_text))


def _describe(config: ServoConfig) -> tuple[dict[str, Any], ServoError | None]:
    with running_connectors(config, "describe") as (runtime, path, _watcher):
        result = path.result("describe")
        placement = connector_placement(runtime, config)
    return with_placement(json_payload(result), placement), _failure(result)


def _describe_text(payload: dict[str, Any], _config: ServoConfig) -> str:
    data = payload.get("data") or {}
    rows = settings_rows(data.get("components") or {})
    text = styled_table(["COMPONENT", "SETTING", "TYPE", "VALUE", "RANGE/VALUES", "UNIT"], rows)
    metrics = [[name, (info or {}).get("unit")] for name, info in (data.get("metrics") or {}).items()]
    return (
        text + "\n\n" + styled_table(["METRIC", "UNIT"], metrics) + placement_text(payload.get("placement"))
    )


# ----- measure -----------------------------------------------------------------------------------


def _duration(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float:
    from servo_actors.durations import parse_duration

    if value is None:
        return DEFAULT_MEASURE_DURATION
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


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
@click.option(
    "--connector",
    "connector_names",
    multiple=True,
    metavar="NAME",
    help="Only this connector takes part (repeat for several); default: every one.",
)
@json_option
@app_option
@limit_option
@pass_state
def measure_cmd(
    state: CliState,
    metrics: tuple[str, ...],
    duration: float,
    connector_names: tuple[str, ...],
    as_json: bool,
    app_names: tuple[str, ...],
    limit: int | None,
) -> None:
    """Measure METRICS (default: every described metric) for DURATION, now.

    Every connector takes part (a load generator runs during each measurement), or those named
    with --connector (servox's --connectors): only they are started. Unknown metric or connector
    names exit 2 before anything is measured. A progress line shows on a terminal (with one
    application).
    """

    def measure(config: ServoConfig) -> tuple[dict[str, Any], ServoError | None]:
        return _measure(config, metrics, duration, connector_names)

    args = [*metrics, "--duration", repr(duration), *(f"--connector={name}" for name in connector_names)]
    for_each_app(state, app_names, limit, as_json, AppCommand("measure", measure, _measure_text, args))


def _measure(
    config: ServoConfig, metrics: Sequence[str], duration: float, connector_names: Sequence[str]
) -> tuple[dict[str, Any], ServoError | None]:
    from servo_actors.connectors.base import Control

    control = Control(duration=duration)
    config = only_connectors(config, connector_names)
    with running_connectors(config, "measure") as (_runtime, path, _watcher):
        wanted = None
        if metrics:
            described = path.result("describe")
            _raise_unless_ok(described)
            wanted = _known_metrics(metrics, described.data.get("metrics") or {})
        progress = progress_line_for("measure", control.expected_seconds)
        result = path.result("measure", reporter=progress, metrics=wanted, control=control)
    return json_payload(result), _failure(result)


def _measure_text(payload: dict[str, Any], _config: ServoConfig) -> str:
    rows = measure_rows((payload.get("data") or {}).get("metrics") or {})
    return styled_table(["METRIC", "SERIES", "POINTS", "MEAN", "LAST", "UNIT"], rows)


def _known_metrics(requested: Sequence[str], described: dict[str, Any]) -> list[str]:
    unknown = [name for name in requested if name not in described]
    if unknown:
        known = ", ".join(described) or "none"
        raise UsageError(f"unknown metric(s) {', '.join(unknown)} (the connectors describe: {known})")
    return list(dict.fromkeys(requested))


# ----- adjust ------------------------------------------------------------------------------------


@watches_stop_signals
@click.command("adjust")
@click.argument("assignments", nargs=-1, required=True, metavar="COMPONENT.SETTING=VALUE...")
@json_option
@app_option
@limit_option
@pass_state
def adjust_cmd(
    state: CliState,
    assignments: tuple[str, ...],
    as_json: bool,
    app_names: tuple[str, ...],
    limit: int | None,
) -> None:
    """Apply settings through the connectors that own them; print what is now in force.

    Each value is checked against describe first: an unknown component or setting, a value out
    of range, off its step or not among its values exits 2 naming it, and nothing is adjusted.
    """
    parsed = parse_assignments(assignments)
    request: dict[str, Any] = {}

    def adjust(config: ServoConfig) -> tuple[dict[str, Any], ServoError | None]:
        with running_connectors(config, "adjust") as (_runtime, path, _watcher):
            described = path.result("describe")
            _raise_unless_ok(described)
            request.update(resolve_assignments(parsed, described.data.get("components") or {}))
            progress = progress_line_for("adjust", 0.0)
            result = path.result("adjust", reporter=progress, components=request)
        return json_payload(result), _failure(result)

    def adjust_text(payload: dict[str, Any], _config: ServoConfig) -> str:
        # The settings asked for show in bold (known here only when this process adjusted).
        rows = adjust_rows((payload.get("data") or {}).get("components") or {}, request)
        return styled_table(["COMPONENT", "SETTING", "VALUE", "UNIT"], rows)

    for_each_app(state, app_names, limit, as_json, AppCommand("adjust", adjust, adjust_text, assignments))
