"""`servo-actors run`: connect to the optimizer and run the control loop until SIGTERM/SIGINT.

The whole command runs in ``signals.watching``: a signal during the checks of ``--check`` ends
them (their connectors killed) and the run exits 0, as a signal during the run itself does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import click

from servo_actors import signals
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
    "--check", "check_first", is_flag=True, help="Run the connectors' checks first; stop if any fails."
)
@click.option("--dry-run", is_flag=True, help="Run the checks and exit (0 if all pass, 1 if not).")
@click.option(
    "--metrics-listen",
    metavar="HOST:PORT",
    callback=_listen_option,
    help="Serve /metrics, /healthz and /readyz here (overrides settings.metrics.listen).",
)
@app_option
@pass_state
def run_cmd(
    state: CliState, check_first: bool, dry_run: bool, metrics_listen: str | None, app_names: tuple[str, ...]
) -> None:
    """Connect to the optimizer and run the control loop until SIGTERM or SIGINT (then GOODBYE, exit 0).

    With a servo.yaml of several applications it runs every one (a loop each, one actor system);
    ``--app ORG/APP`` (repeatable) picks which.
    """
    from servo_actors.config.loading import require_optimizer
    from servo_actors.runner import Runner

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
            result = _checks(config, watcher)
            if result is None:
                log.info("stopped (%s) during the checks", watcher.stop_signal or "shutdown")
                return
            _report_checks(result)
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


def _checks(config: ServoConfig, watcher: signals.SignalWatcher) -> OperationResult | None:
    """Every connector's checks, through the operation path; None if a stop signal came first
    (the connectors are stopped)."""
    from servo_actors.actors import ServoRuntime
    from servo_actors.actors.runtime.operation_path import OperationPath

    runtime = ServoRuntime(config)
    try:
        if not runtime.start(stop=watcher.stop):
            return None
        return OperationPath(runtime, stop=watcher.stop).result("check")
    except signals.StopRequested:
        return None
    finally:
        runtime.stop()


def _report_checks(result: OperationResult) -> None:
    checks = result.data.get("checks", [])
    for check in checks:
        mark = "ok" if check.get("success") else "FAILED"
        click.echo(
            f"{check.get('connector')}: {check.get('name')}: {mark} {check.get('message') or ''}".rstrip()
        )
    failed = [c for c in checks if not c.get("success")]
    if result.status != "ok" or failed:
        raise ChecksFailed(result.message or f"{len(failed)} check(s) failed")
