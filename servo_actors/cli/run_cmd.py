"""`servo-actors run`: connect to the optimizer and run the control loop until SIGTERM/SIGINT.

The whole command runs in ``signals.watching``: a signal during the checks of ``--check`` ends
them (their connectors killed) and the run exits 0, as a signal during the run itself does.

``--check`` (or ``SERVO_RUN_CHECK=true``, servox's) runs the checks as ``check`` does, with its
``--wait``, ``--delay`` and ``--halt-on`` (``check_rounds``), on connectors started for them
alone; the loop starts only when no check failed, else the table shows and the command exits 1
naming the failed checks. servo.yaml's ``checks`` section gives the defaults as for ``check``
(an option given wins), apart from its ``connectors``: every connector's checks run here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import click

from servo_actors import signals
from servo_actors.cli.check_rounds import (
    CheckOptions,
    CheckPolicy,
    checks_table,
    failed_checks,
    policy_options,
    run_rounds,
)
from servo_actors.cli.context import CliState, app_option, pass_state, watches_stop_signals
from servo_actors.errors import ServoError, UsageError

if TYPE_CHECKING:
    from servo_actors.actors import OperationResult
    from servo_actors.config import ServoConfig

__all__ = [
    "ChecksFailed",
    "run_cmd",
]

log = logging.getLogger(__name__)


class ChecksFailed(ServoError):
    """``run --check`` / ``--dry-run``: a connector check failed (exit 1)."""


def _listen_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--metrics-listen`` as ``settings.metrics.listen`` would take it; a usage error if it is bad."""
    if value is None:
        return None
    from servo_actors.config.listen import format_listen, parse_listen

    try:
        return format_listen(*parse_listen(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@watches_stop_signals
@click.command("run")
@click.option(
    "--check",
    "check_first",
    is_flag=True,
    envvar="SERVO_RUN_CHECK",
    show_envvar=True,
    help="Run the connectors' checks first; stop if any fails.",
)
@click.option("--dry-run", is_flag=True, help="Run the checks and exit (0 if all pass, 1 if not).")
@policy_options
@click.option(
    "--metrics-listen",
    metavar="HOST:PORT",
    callback=_listen_option,
    help="Serve /metrics, /healthz and /readyz here (overrides settings.metrics.listen).",
)
@app_option
@pass_state
def run_cmd(
    state: CliState,
    check_first: bool,
    dry_run: bool,
    wait: float | None,
    delay: float | str | None,
    halt_on: str | None,
    metrics_listen: str | None,
    app_names: tuple[str, ...],
) -> None:
    """Connect to the optimizer and run the control loop until SIGTERM or SIGINT (then GOODBYE, exit 0).

    With a servo.yaml of several applications it runs every one (a loop each, one actor system);
    ``--app ORG/APP`` (repeatable) picks which.
    """
    from servo_actors.config.loading import require_optimizer
    from servo_actors.runner import Runner

    if not (check_first or dry_run):
        given = [
            f"--{name}"
            for name, value in (("wait", wait), ("delay", delay), ("halt-on", halt_on))
            if value is not None
        ]
        if given:
            raise UsageError(f"{', '.join(given)} only go with --check or --dry-run")
    configs = state.select(app_names)
    for config in configs:
        require_optimizer(config)
    if len(configs) > 1:
        if check_first or dry_run:
            raise UsageError("--check and --dry-run take one application: choose it with --app ORG/APP")
        _run_several(configs, state, metrics_listen)
        return
    (config,) = configs
    if metrics_listen is not None:
        config.settings.metrics = config.settings.metrics.model_copy(update={"listen": metrics_listen})
    with signals.watching(reload=True) as watcher:
        if watcher.stop.is_set():  # during start-up: no actor system is started only to be stopped
            log.info("stopped (%s) before the connectors started", watcher.stop_signal)
            return
        if check_first or dry_run:
            options = CheckOptions(wait=wait, delay=delay, halt_on=halt_on)
            checked = _checks(config, watcher, options.policy(config.checks))
            if checked is None:
                log.info("stopped (%s) during the checks", watcher.stop_signal or "shutdown")
                return
            _report_checks(*checked, *options.shown(config.checks))
            if dry_run:
                return
        exit_code = Runner(config, config_path=state.config_path, signals=watcher).run()
    if exit_code:
        raise click.exceptions.Exit(exit_code)


def _run_several(configs: tuple[ServoConfig, ...], state: CliState, metrics_listen: str | None) -> None:
    """Every application in one servo: a loop each, one actor system (``runner.apps``)."""
    from servo_actors.runner.apps import AppsRunner

    if metrics_listen is not None:
        first = configs[0]
        first.settings.metrics = first.settings.metrics.model_copy(update={"listen": metrics_listen})
    with signals.watching(reload=True) as watcher:
        if watcher.stop.is_set():
            log.info("stopped (%s) before the connectors started", watcher.stop_signal)
            return
        exit_code = AppsRunner(configs, config_path=state.config_path, signals=watcher).run()
    if exit_code:
        raise click.exceptions.Exit(exit_code)


def _checks(
    config: ServoConfig, watcher: signals.SignalWatcher, policy: CheckPolicy
) -> tuple[OperationResult, list[dict[str, Any]]] | None:
    """Every connector's checks, through the operation path, as ``policy`` says: the last result
    and its judged checks; None if a stop signal came first (the connectors are stopped)."""
    from servo_actors.actors import ServoRuntime
    from servo_actors.actors.runtime.operation_path import OperationPath

    runtime = ServoRuntime(config)
    try:
        if not runtime.start(stop=watcher.stop):
            return None
        path = OperationPath(runtime, stop=watcher.stop)

        def one_round() -> tuple[OperationResult, list[dict[str, Any]]]:
            result = path.result("check")
            return result, list(result.data.get("checks") or [])

        result, checks, _rounds = run_rounds(policy, one_round, watcher.sleep)
        return result, checks
    except signals.StopRequested:
        return None
    finally:
        runtime.stop()


def _report_checks(result: OperationResult, checks: list[dict[str, Any]], quiet: bool, verbose: bool) -> None:
    parts = {
        name: {"status": part.status, "reason": part.reason, "message": part.message}
        for name, part in result.parts.items()
    }
    if not quiet:
        click.echo(checks_table(checks, parts, verbose=verbose))
    failing = failed_checks(checks)
    if result.status != "ok" or failing:
        named = "; ".join(
            f"connector {c.get('connector')!r}: {c.get('name')}: {c.get('message') or 'failed'}"
            for c in failing
        )
        raise ChecksFailed(named or result.message or f"check {result.status} ({result.reason})")
