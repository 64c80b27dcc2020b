"""``servo-actors check``: every connector's checks, right now or until they pass.

It starts the connectors as ``describe`` does (``operations``' docstring: output, ``--json``
shape, exit codes and signals are the same), asks each for its checks, and shows one row per
check. Which checks count, what ``--halt-on`` skips and how ``--wait`` retries are
``check_rounds``'. With ``--wait`` the connectors are started once and asked again each round.

- ``check CONNECTOR...`` (servox's): only those connectors are started and checked; a name that
  is no connector of the application exits 2 naming it and the configured ones. Without one,
  the ``checks`` section's ``connectors``, else every connector.
- Applications: ``--app ORG/APP`` selects applications only, ``--check-name`` filters checks
  only, and ``-n/--name`` does either: a value that is an application of the file (ORG/APP of
  one of its documents) selects it, any other filters checks; a value that is an application
  and also a check's name (known after the first round) exits 2 saying to use ``--app`` or
  ``--check-name``. The applications selected here (by ``--app`` or ``--name``) replace the
  root's ``--app/-n/--name`` / ``SERVO_NAME``.

``--json``'s ``data`` is ``{"checks": [...], "rounds": N}``: each check as the connector gave it
(``connectors.check_result``: ``connector``, ``name``, ``success``, ``message``, ``id``,
``severity``, ``tags``, ``remedy``) with its ``outcome`` (passed, warning, failed, skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from servo_actors.cli.check_rounds import (
    CHECK_FAILED,
    CheckOptions,
    CheckPolicy,
    checks_table,
    failed_checks,
    policy_options,
    run_rounds,
)
from servo_actors.cli.context import (
    APP_HELP,
    CliState,
    json_option,
    limit_option,
    pass_state,
    watches_stop_signals,
)
from servo_actors.cli.operation_output import (
    connector_placement,
    json_payload,
    placement_text,
    with_placement,
)
from servo_actors.cli.per_app import AppCommand, for_each_app
from servo_actors.cli.started_connectors import only_connectors, running_connectors
from servo_actors.config.checks_section import split_values
from servo_actors.connectors.check_result import check_entry
from servo_actors.durations import format_duration
from servo_actors.errors import ConnectorError, ServoError

if TYPE_CHECKING:
    from servo_actors.actors import OperationResult
    from servo_actors.config import ServoConfig

__all__ = ["check_cmd"]

_NAMED_APP = "--named-app"
"""Hidden: a ``--name`` the first process took as an application, passed to each application's
own process (``per_app``) so that it too refuses a check of that name as ambiguous."""


def _csv(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeatable, and comma-separated as servox took them (a ``/REGEX/`` is kept whole)."""
    return tuple(split_values(list(values)))


@watches_stop_signals
@click.command("check")
@click.argument("connectors", nargs=-1, metavar="[CONNECTOR]...")
@click.option(
    "--name",
    "-n",
    "names_or_apps",
    multiple=True,
    callback=_csv,
    metavar="NAME",
    help="An application (ORG/APP) of servo.yaml: only it; else as --check-name. "
    "Both an application and a check: exit 2.",
)
@click.option(
    "--check-name",
    "names",
    multiple=True,
    callback=_csv,
    metavar="NAME",
    help="Only the checks of this name, or matching /REGEX/ (repeatable, or NAME,NAME).",
)
@click.option("--id", "ids", multiple=True, callback=_csv, metavar="ID", help="Only the checks of this id.")
@click.option(
    "--tag", "-t", "tags", multiple=True, callback=_csv, metavar="TAG", help="Only checks with a tag."
)
@policy_options
@click.option("--verbose/--no-verbose", "-v", default=None, help="Show each check's id, tags and severity.")
@click.option(
    "--quiet/--no-quiet", "-q", default=None, help="Print no table: the exit code (and stderr) says it."
)
@json_option
@click.option("--app", "app_names", multiple=True, metavar="ORG/APP", help=APP_HELP)
@click.option(_NAMED_APP, "named_apps", multiple=True, hidden=True)
@limit_option
@pass_state
def check_cmd(
    state: CliState,
    connectors: tuple[str, ...],
    names_or_apps: tuple[str, ...],
    names: tuple[str, ...],
    ids: tuple[str, ...],
    tags: tuple[str, ...],
    wait: float | None,
    delay: float | str | None,
    halt_on: str | None,
    verbose: bool | None,
    quiet: bool | None,
    as_json: bool,
    app_names: tuple[str, ...],
    named_apps: tuple[str, ...],
    limit: int | None,
) -> None:
    """Run the connectors' checks (all of them, or the CONNECTORs'); exit 1 if any check or
    connector failed.

    A connector without checks shows as one passing row, so every connector is accounted for.
    With an optimizer configured and no CONNECTOR named, one more row (connector ``servo``, check
    ``identity``) says whether a servo of the same identity runs here and reports a conflict. A
    failed check with a remedy shows it (a command or rule for a person to apply; never run
    here). A failed ``warning`` check is shown and fails nothing. With --wait, the checks run
    again (after --delay) until all pass or the time is up, a line on stderr each round.

    servo.yaml's ``checks`` section gives the defaults (connectors, name, id, tag, quiet,
    verbose, wait, delay, halt_on): an option or CONNECTOR given here wins over its value.

    -n/--name NAME: when NAME is an application (ORG/APP) of servo.yaml it selects it, as --app
    does; else it filters checks, as --check-name does. A NAME that is both exits 2.
    """
    known_apps = set(state.apps.names) if names_or_apps else set()
    chosen_apps = tuple(name for name in names_or_apps if name in known_apps)
    given = CheckOptions(
        names=names + tuple(name for name in names_or_apps if name not in known_apps),
        ids=ids,
        tags=tags,
        wait=wait,
        delay=delay,
        halt_on=halt_on,
        quiet=quiet,
        verbose=verbose,
    )
    named = tuple(dict.fromkeys(named_apps + chosen_apps))

    def check(config: ServoConfig) -> tuple[dict[str, Any], ServoError | None]:
        return _check(config, connectors, given.policy(config.checks, named))

    def text(payload: dict[str, Any], config: ServoConfig) -> str:
        quiet, verbose = given.shown(config.checks)
        if quiet:
            return ""
        checks = list((payload.get("data") or {}).get("checks") or [])
        table = checks_table(checks, payload.get("connectors") or {}, verbose=verbose)
        return table + placement_text(payload.get("placement"))

    # A connector's name never starts with '-': the names go first, before the options.
    args = [*connectors, *given.args(), *(f"{_NAMED_APP}={name}" for name in named)]
    selected = app_names + chosen_apps
    for_each_app(state, selected, limit, as_json, AppCommand("check", check, text, args))


def _check(
    config: ServoConfig, connectors: Sequence[str], policy: CheckPolicy
) -> tuple[dict[str, Any], ServoError | None]:
    """The checks of ``connectors`` (else the ``checks`` section's, else all), as ``policy`` says;
    only those connectors are started, and the identity row is left out when any are named."""
    named = tuple(connectors) or tuple(config.checks.connectors)
    config = only_connectors(config, named)
    with running_connectors(config, "check") as (runtime, path, watcher):

        def one_round() -> tuple[OperationResult, list[dict[str, Any]]]:
            result = path.result("check")
            checks = list(result.data.get("checks") or [])
            identity = None if named else _identity_check(config)
            return result, checks if identity is None else [*checks, identity]

        result, checks, rounds = run_rounds(policy, one_round, watcher.sleep)
        placement = connector_placement(runtime, config)
    failing = failed_checks(checks)
    failure = _checks_failure(failing, len(checks))
    if failure is not None and policy.wait is not None:
        failure = f"after {rounds} rounds in {format_duration(policy.wait)}: {failure}"
    payload = json_payload(result)
    payload["data"] = {**payload["data"], "checks": checks, "rounds": rounds}
    error: ServoError | None = None
    if not result.ok:
        error = ConnectorError(
            f"check {result.status} ({result.reason}): {result.message or 'no connector gave a reason'}"
        )
    if failure is not None:
        _mark_checks_failed(payload, failing, failure)
        error = error or ConnectorError(failure)
    return with_placement(payload, placement), error


def _checks_failure(failing: Sequence[dict[str, Any]], total: int) -> str | None:
    """The sentence naming every failed check (None when none failed): stderr's line and the JSON's
    message; a check's remedy follows it."""
    if not failing:
        return None
    named = "; ".join(
        f"connector {c.get('connector')!r}: {c.get('name')}: {c.get('message') or 'failed'}"
        + (f" (remedy: {c['remedy']})" if c.get("remedy") else "")
        for c in failing
    )
    return f"{len(failing)} of {total} checks failed: {named}"


def _mark_checks_failed(payload: dict[str, Any], failing: Sequence[dict[str, Any]], failure: str) -> None:
    """A failed check fails the result, as the exit code says: the aggregate and each connector with
    a failed check say ``failed`` (reason ``check-failed``) unless they already failed otherwise."""
    if payload["status"] == "ok":
        payload.update(status="failed", reason=CHECK_FAILED, message=failure)
    for name, part in payload["connectors"].items():
        mine = [c for c in failing if c.get("connector") == name]
        if mine and part["status"] == "ok":
            message = "; ".join(f"{c.get('name')}: {c.get('message') or 'failed'}" for c in mine)
            part.update(status="failed", reason=CHECK_FAILED, message=message)


def _identity_check(config: ServoConfig) -> dict[str, Any] | None:
    """The identity line of ``check`` (None without an optimizer): a conflict the running servo reports."""
    if config.optimizer is None:
        return None
    from servo_actors.identity import check_identity

    success, message = check_identity(config)
    entry = check_entry({"name": "identity", "success": success, "message": message})
    return {"connector": "servo", **entry}
