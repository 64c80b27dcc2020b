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

``status``/``reason``/``message`` are the aggregated result (docs/protocol.md, "Results");
``data`` is, by operation: describe ``{"components", "metrics"}`` (docs/protocol.md's descriptor
parts), measure ``{"metrics", "annotations"}``, adjust ``{"components"}`` (the components the
adjusted connectors now hold), check ``{"checks": [{"connector", "name", "success", "message"}]}``;
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
tables) and ``assignments`` (``adjust``'s arguments checked against describe).
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
    json_payload,
    measure_rows,
    settings_rows,
    status_word,
    styled_table,
)
from servo_actors.cli.per_app import AppCommand, for_each_app
from servo_actors.cli.progress_line import progress_line_for
from servo_actors.cli.started_connectors import running_connectors
from servo_actors.durations import format_duration
from servo_actors.errors import ConnectorError, ServoError, UsageError

if TYPE_CHECKING:
    from servo_actors.actors import OperationResult, ServoRuntime
    from servo_actors.config import ServoConfig

__all__ = ["DEFAULT_MEASURE_DURATION", "adjust_cmd", "check_cmd", "describe_cmd", "measure_cmd"]

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
    with running_connectors(config, "describe") as (runtime, path):
        result = path.result("describe")
        placement = _placement(runtime, config)
    return _with_placement(json_payload(result), placement), _failure(result)


def _describe_text(payload: dict[str, Any]) -> str:
    data = payload.get("data") or {}
    rows = settings_rows(data.get("components") or {})
    text = styled_table(["COMPONENT", "SETTING", "TYPE", "VALUE", "RANGE/VALUES", "UNIT"], rows)
    metrics = [[name, (info or {}).get("unit")] for name, info in (data.get("metrics") or {}).items()]
    return (
        text + "\n\n" + styled_table(["METRIC", "UNIT"], metrics) + _placement_text(payload.get("placement"))
    )


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


def _placement_text(placement: dict[str, str] | None) -> str:
    if placement is None:
        return ""
    return "\n\n" + styled_table(
        ["CONNECTOR", "RUNS ON"], [[name, where] for name, where in placement.items()]
    )


# ----- check -------------------------------------------------------------------------------------


@watches_stop_signals
@click.command("check")
@json_option
@app_option
@limit_option
@pass_state
def check_cmd(state: CliState, as_json: bool, app_names: tuple[str, ...], limit: int | None) -> None:
    """Run every connector's checks; exit 1 if any check or connector failed.

    A connector without checks shows as one passing row, so every connector is accounted for.
    With an optimizer configured, one more row (connector ``servo``, check ``identity``) says
    whether a servo of the same identity runs here and reports a conflict (``identity.py``).
    """
    for_each_app(state, app_names, limit, as_json, AppCommand("check", _check, _check_text))


def _check(config: ServoConfig) -> tuple[dict[str, Any], ServoError | None]:
    with running_connectors(config, "check") as (runtime, path):
        result = path.result("check")
        placement = _placement(runtime, config)
    checks = list(result.data.get("checks") or [])
    identity = _identity_check(config)
    if identity is not None:
        checks.append(identity)
    failed_checks = [c for c in checks if not c.get("success")]
    failure = _checks_failure(failed_checks, len(checks))
    payload = json_payload(result)
    payload["data"] = {**payload["data"], "checks": checks}
    error: ServoError | None = _failure(result)
    if failure is not None:
        _mark_checks_failed(payload, failed_checks, failure)
        error = error or ConnectorError(failure)
    return _with_placement(payload, placement), error


def _check_text(payload: dict[str, Any]) -> str:
    checks = list((payload.get("data") or {}).get("checks") or [])
    parts: dict[str, Any] = payload.get("connectors") or {}
    rows = []
    for name, part in parts.items():
        mine = [c for c in checks if c.get("connector") == name]
        if part.get("status") != "ok" and part.get("reason") != CHECK_FAILED:
            rows.append([name, "-", status_word(False), part.get("message")])
        elif not mine:
            rows.append([name, "-", status_word(True), "no checks"])
        rows += [[name, c.get("name"), status_word(bool(c.get("success"))), c.get("message")] for c in mine]
    rows += [
        [c.get("connector"), c.get("name"), status_word(bool(c.get("success"))), c.get("message")]
        for c in checks
        if c.get("connector") not in parts
    ]
    table = styled_table(["CONNECTOR", "CHECK", "RESULT", "MESSAGE"], rows)
    return table + _placement_text(payload.get("placement"))


CHECK_FAILED = "check-failed"
"""The reason ``check --json`` gives when the operation ran but one of its checks failed."""


def _checks_failure(failed_checks: Sequence[dict[str, Any]], total: int) -> str | None:
    """The sentence naming every failed check (None when none failed): stderr's line and the JSON's message."""
    if not failed_checks:
        return None
    named = "; ".join(
        f"connector {c.get('connector')!r}: {c.get('name')}: {c.get('message') or 'failed'}"
        for c in failed_checks
    )
    return f"{len(failed_checks)} of {total} checks failed: {named}"


def _mark_checks_failed(
    payload: dict[str, Any], failed_checks: Sequence[dict[str, Any]], failure: str
) -> None:
    """A failed check fails the result, as the exit code says: the aggregate and each connector with
    a failed check say ``failed`` (reason ``check-failed``) unless they already failed otherwise."""
    if payload["status"] == "ok":
        payload.update(status="failed", reason=CHECK_FAILED, message=failure)
    for name, part in payload["connectors"].items():
        mine = [c for c in failed_checks if c.get("connector") == name]
        if mine and part["status"] == "ok":
            message = "; ".join(f"{c.get('name')}: {c.get('message') or 'failed'}" for c in mine)
            part.update(status="failed", reason=CHECK_FAILED, message=message)


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
    config = _only_connectors(config, connector_names)
    with running_connectors(config, "measure") as (_runtime, path):
        wanted = None
        if metrics:
            described = path.result("describe")
            _raise_unless_ok(described)
            wanted = _known_metrics(metrics, described.data.get("metrics") or {})
        progress = progress_line_for("measure", control.expected_seconds)
        result = path.result("measure", reporter=progress, metrics=wanted, control=control)
    return json_payload(result), _failure(result)


def _measure_text(payload: dict[str, Any]) -> str:
    rows = measure_rows((payload.get("data") or {}).get("metrics") or {})
    return styled_table(["METRIC", "SERIES", "POINTS", "MEAN", "LAST", "UNIT"], rows)


def _only_connectors(config: ServoConfig, names: Sequence[str]) -> ServoConfig:
    """``config`` with only the connectors ``names`` (all of them when none is named)."""
    if not names:
        return config
    known = [spec.name for spec in config.connectors]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(
            f"unknown connector(s) {', '.join(unknown)} (configured: {', '.join(known) or 'none'})"
        )
    return config.model_copy(
        update={"connectors": [spec for spec in config.connectors if spec.name in names]}
    )


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
        with running_connectors(config, "adjust") as (_runtime, path):
            described = path.result("describe")
            _raise_unless_ok(described)
            request.update(resolve_assignments(parsed, described.data.get("components") or {}))
            progress = progress_line_for("adjust", 0.0)
            result = path.result("adjust", reporter=progress, components=request)
        return json_payload(result), _failure(result)

    def adjust_text(payload: dict[str, Any]) -> str:
        # The settings asked for show in bold (known here only when this process adjusted).
        rows = adjust_rows((payload.get("data") or {}).get("components") or {}, request)
        return styled_table(["COMPONENT", "SETTING", "VALUE", "UNIT"], rows)

    for_each_app(state, app_names, limit, as_json, AppCommand("adjust", adjust, adjust_text, assignments))
