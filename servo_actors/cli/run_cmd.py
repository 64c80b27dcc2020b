"""`servo-actors run`: connect to the optimizer and run the control loop until SIGTERM/SIGINT."""

from __future__ import annotations

import click

from servo_actors.cli.context import CliState, pass_state
from servo_actors.errors import ServoError


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
@pass_state
def run_cmd(state: CliState, check_first: bool, dry_run: bool, metrics_listen: str | None) -> None:
    """Connect to the optimizer and run the control loop until SIGTERM or SIGINT (then GOODBYE, exit 0)."""
    from servo_actors.config.loading import require_optimizer
    from servo_actors.runner import Runner

    config = state.config
    require_optimizer(config)
    if metrics_listen is not None:
        config.settings.metrics = config.settings.metrics.model_copy(update={"listen": metrics_listen})
    if check_first or dry_run:
        _run_checks(config)
        if dry_run:
            return
    exit_code = Runner(config, config_path=state.config_path).run()
    if exit_code:
        raise click.exceptions.Exit(exit_code)


def _run_checks(config: object) -> None:
    from servo_actors.actors import ServoRuntime

    with ServoRuntime(config) as runtime:  # type: ignore[arg-type]  # a ServoConfig: typed object to keep the import lazy
        result = runtime.run("check")
    checks = result.data.get("checks", [])
    for check in checks:
        mark = "ok" if check.get("success") else "FAILED"
        click.echo(
            f"{check.get('connector')}: {check.get('name')}: {mark} {check.get('message') or ''}".rstrip()
        )
    failed = [c for c in checks if not c.get("success")]
    if result.status != "ok" or failed:
        raise ChecksFailed(result.message or f"{len(failed)} check(s) failed")
