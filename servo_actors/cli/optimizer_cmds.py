"""``servo-actors optimizer ...``: run the embedded optimizer, or cancel its current command.

``serve`` reads a plan: one with a ``script`` key is played by the scripted driver (scripted.py);
any other is a search plan (plan.py, search.py). It prints where it listens and serves until
SIGTERM or SIGINT, then exits 0. ``cancel`` asks a running one to cancel its command in flight.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import click

from servo_actors.errors import ConfigError, OptimizerError, UsageError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8085
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
SERVE_WAKE_INTERVAL = 1.0
"""``serve`` waits for SIGTERM/SIGINT in sleeps this long."""
CANCEL_TIMEOUT = 5.0
"""Seconds ``optimizer cancel`` waits for the server (connect and read)."""
DEFAULT_SEARCH_PLAN: dict[str, Any] = {"app": "example.com/web", "objective": {"minimize": "cost"}}
"""The plan ``serve`` uses without ``--plan``: search the synthetic application for the lowest cost."""


@click.group("optimizer")
def optimizer() -> None:
    """The embedded optimizer: serve the servo protocol on loopback, or cancel its current command."""


class _Stop(Exception):
    """Raised by the signal handler to end ``serve``'s wait at once."""


@optimizer.command("serve")
@click.option(
    "--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on (keep it loopback)."
)
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="0 picks a free port.",
)
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Plan file (YAML): a search plan, or a script (a plan with a 'script' key).",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Search plans only: keep the steps in this file, and resume from it.",
)
def serve(host: str, port: int, plan_path: Path | None, state_path: Path | None) -> None:
    """Serve the optimizer's side of the protocol until SIGTERM or SIGINT."""
    from servo_actors.optimizer.server import OptimizerServer

    plan, source = _load_plan(plan_path)
    driver, app, token = _driver_for(plan, source, state_path)
    try:
        server = OptimizerServer(driver, app=app, token=token, host=host, port=port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    stopping: list[str] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stopping:  # raise once: the second signal must not interrupt the clean stop
            stopping.append(signal.Signals(signum).name)
            raise _Stop

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.start()
        click.echo(f"embedded optimizer for {app}: {server.url}")
        click.echo(f"servo endpoint: {server.servo_url}")
        click.echo(f"state: GET {server.url}/admin/state   cancel: POST {server.url}/admin/cancel", nl=True)
        _flush()
        while True:
            # Our handlers raise _Stop out of the sleep; the slice bounds the rare signal that lands
            # just before a sleep begins.
            time.sleep(SERVE_WAKE_INTERVAL)
    except _Stop:
        pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo(f"stopped ({stopping[0] if stopping else 'done'})")


@optimizer.command("cancel")
@click.option("--url", default=DEFAULT_URL, show_default=True, help="The embedded optimizer's address.")
@click.option("--reason", default=None, help="One word sent as the cancel's reason (default: cancelled).")
def cancel(url: str, reason: str | None) -> None:
    """Cancel the command in flight: its next progress post is answered ``cancel``."""
    import requests

    target = url.rstrip("/") + "/admin/cancel"
    body = {"reason": reason} if reason else {}
    try:
        response = requests.post(target, json=body, timeout=(CANCEL_TIMEOUT, CANCEL_TIMEOUT))
    except requests.RequestException as exc:
        raise OptimizerError(
            f"cannot reach the optimizer at {target}: {type(exc).__name__}", url=target
        ) from None
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if response.status_code != 200 or not isinstance(answer, dict):
        detail = answer.get("detail") if isinstance(answer, dict) else response.text[:200]
        raise OptimizerError(
            f"{target} answered HTTP {response.status_code}: {detail}",
            url=target,
            status=response.status_code,
        )
    click.echo(answer.get("message") or json.dumps(answer))


def _flush() -> None:
    # Whoever started `serve` (a test, a script) reads the URL line from a pipe: send it now.
    click.get_text_stream("stdout").flush()


def _load_plan(path: Path | None) -> tuple[dict[str, Any], str]:
    import yaml

    if path is None:
        return dict(DEFAULT_SEARCH_PLAN), "the default plan"
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the plan: {getattr(exc, 'strerror', None) or exc}", source=source
        ) from None
    try:
        plan = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source=source) from None
    if plan is None:
        raise ConfigError("the plan is empty", source=source)
    if not isinstance(plan, dict):
        raise ConfigError(f"a plan is a mapping (app, ...), not {type(plan).__name__}", source=source)
    return plan, source


def _driver_for(plan: dict[str, Any], source: str, state_path: Path | None) -> tuple[Any, str, str | None]:
    """The driver for ``plan``, its app (ORG/APP) and its token (None: no token required)."""
    if "script" in plan:
        from servo_actors.optimizer.scripted import ScriptedDriver

        if state_path is not None:
            raise UsageError("--state is for search plans; this plan is a script")
        scripted = ScriptedDriver.from_plan(plan, source=source)
        token = scripted.token.get_secret_value() if scripted.token is not None else None
        return scripted, str(scripted.app), token
    try:
        from servo_actors.optimizer.search import SearchDriver
    except ModuleNotFoundError as exc:
        if exc.name not in ("servo_actors.optimizer.search", "servo_actors.optimizer.plan"):
            raise
        raise ConfigError(
            "this is a search plan (it has no 'script' key), but this installation has no search driver",
            source=source,
        ) from None
    from servo_actors.optimizer.plan import parse_plan

    checked = parse_plan(plan, source=source)
    driver = SearchDriver.from_plan(checked, state_path)
    token = checked.token.get_secret_value() if checked.token is not None else None
    return driver, checked.app, token
