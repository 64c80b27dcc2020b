"""``servo-actors optimizer ...``: run the embedded optimizer, or cancel its current command.

``serve`` reads one or several plans (``--plan`` repeated, or a folder of ``*.yaml``/``*.yml``/
``*.json`` plans), one application each: a plan with a ``script`` key is played by the scripted
driver (scripted.py); any other is a search plan (plan.py, search.py). ``--state`` is a file for
one search plan, or a folder holding one ``ORG_APP.json`` per search plan. ``--admin-token-file``
makes every ``POST /admin/*`` (Abort) need the token in that file; the console opened without it
is read-only. It prints where it listens and serves until SIGTERM or SIGINT, then exits 0.
``cancel`` asks a running one to cancel an application's command in flight.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from servo_actors import signals
from servo_actors.cli.context import SignalAwareGroup, watches_stop_signals
from servo_actors.errors import ConfigError, OptimizerError, UsageError

__all__ = [
    "CANCEL_TIMEOUT",
    "CANCEL_WAIT_INTERVAL",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_SEARCH_PLAN",
    "DEFAULT_URL",
    "PLAN_SUFFIXES",
    "SERVE_WAKE_INTERVAL",
    "cancel",
    "optimizer",
    "serve",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8085
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
SERVE_WAKE_INTERVAL = 1.0
"""``serve`` waits for SIGTERM/SIGINT in waits this long (a signal ends one at once)."""
CANCEL_TIMEOUT = 5.0
"""Seconds ``optimizer cancel`` waits for the server (connect and read)."""
DEFAULT_SEARCH_PLAN: dict[str, Any] = {"app": "example.com/web", "objective": {"minimize": "cost"}}
"""The plan ``serve`` uses without ``--plan``: search the synthetic application for the lowest cost."""


@click.group("optimizer", cls=SignalAwareGroup)
def optimizer() -> None:
    """The embedded optimizer: serve the servo protocol on loopback, or cancel its current command."""


@watches_stop_signals
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
    "plan_paths",
    type=click.Path(path_type=Path),
    multiple=True,
    help="A plan file (YAML), or a folder of them; repeat for several applications. "
    "A search plan, or a script (a plan with a 'script' key).",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Search plans only: keep the steps in this file (one plan) or folder (one file per app), "
    "and resume from it.",
)
@click.option(
    "--admin-token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="POST /admin/* (Abort) needs the token in this file; GET stays read-only.",
)
def serve(
    host: str,
    port: int,
    plan_paths: tuple[Path, ...],
    state_path: Path | None,
    admin_token_file: Path | None,
) -> None:
    """Serve the optimizer's side of the protocol until SIGTERM or SIGINT."""
    from servo_actors.optimizer.application import Application

    with signals.watching() as watcher:
        if not watcher.stop.is_set():  # a stop during start-up: nothing to load, nothing to serve
            plans = _load_plans(plan_paths)
            admin_token = _read_admin_token(admin_token_file) if admin_token_file is not None else None
            applications = []
            for plan, source in plans:
                state_file = _state_file(state_path, plan, source, len(plans))
                driver, app, token = _driver_for(plan, source, state_file)
                applications.append(Application(driver, app=app, token=token))
            _unique_apps(applications, plans)
            if not watcher.stop.is_set():
                _serve_until_stopped(watcher, applications, admin_token, admin_token_file, host, port)
    click.echo(f"stopped ({watcher.stop_signal or 'done'})")


def _serve_until_stopped(
    watcher: signals.SignalWatcher,
    applications: list[Any],
    admin_token: str | None,
    admin_token_file: Path | None,
    host: str,
    port: int,
) -> None:
    from servo_actors.optimizer.server import OptimizerServer

    try:
        server = OptimizerServer(applications=applications, admin_token=admin_token, host=host, port=port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    app = server.names()
    server.start()
    try:
        click.echo(f"embedded optimizer for {app}: {server.url}")
        for application in server.applications:
            click.echo(f"servo endpoint for {application.app}: {server.url}{application.servo_path}")
        click.echo(f"state: GET {server.url}/admin/state   cancel: POST {server.url}/admin/cancel", nl=True)
        if admin_token is not None:
            # Never the token itself: where it is, and how to hand it to the console.
            click.echo(
                f"console: {server.url}/ is read-only; to Abort, open {server.url}/#admin-token=TOKEN "
                f"with the token in {admin_token_file}"
            )
        else:
            click.echo(f"console: {server.url}/")
        _flush()
        while not watcher.sleep(SERVE_WAKE_INTERVAL):
            pass
    finally:
        server.stop()


@optimizer.command("cancel")
@click.option("--url", default=DEFAULT_URL, show_default=True, help="The embedded optimizer's address.")
@click.option("--reason", default=None, help="One word sent as the cancel's reason (default: cancelled).")
@click.option("--app", default=None, help="ORG/APP whose command to cancel (needed when several are served).")
@click.option(
    "--admin-token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The admin token, when the optimizer was started with one.",
)
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for a command in flight to cancel, then for the servo to post its result "
    "(0: do not wait).",
)
def cancel(
    url: str, reason: str | None, app: str | None, admin_token_file: Path | None, wait_seconds: float
) -> None:
    """Cancel the command in flight: its next progress post is answered ``cancel``.

    With ``--wait SECONDS``: when no command is in flight, it cancels the next one to come; then it
    waits until the servo has posted that command's result and says which status it posted. Exit 1
    if either does not happen within SECONDS.
    """
    from servo_actors.protocol.admin_client import OptimizerAdminClient

    token = _read_admin_token(admin_token_file) if admin_token_file is not None else None
    deadline = time.monotonic() + wait_seconds
    # OptimizerAdminError (an OptimizerError) names the URL and what went wrong: exit 1.
    with OptimizerAdminClient(url, admin_token=token, timeout=CANCEL_TIMEOUT) as admin:
        answer = admin.cancel(app=app, reason=reason)
        while wait_seconds > 0 and not answer.get("armed") and time.monotonic() < deadline:
            _pause(deadline)
            answer = admin.cancel(app=app, reason=reason)
        click.echo(answer.get("message") or json.dumps(answer))
        if wait_seconds > 0:
            if not answer.get("armed"):
                raise OptimizerError(f"no command came in flight within {wait_seconds:g}s: nothing cancelled")
            click.echo(_await_result(admin, app, answer, deadline, wait_seconds))


CANCEL_WAIT_INTERVAL = 0.2
"""Seconds between two looks at the optimizer while ``optimizer cancel --wait`` waits."""


def _pause(deadline: float) -> None:
    time.sleep(min(CANCEL_WAIT_INTERVAL, max(0.0, deadline - time.monotonic())))


def _await_result(
    admin: Any, app: str | None, answer: dict[str, Any], deadline: float, wait_seconds: float
) -> str:
    """Wait until the cancelled command is no longer in flight; a line naming the status its
    result carried. OptimizerError when it is still in flight at ``deadline``."""
    uid, cmd = answer.get("cmd_uid"), answer.get("cmd")
    while True:
        state = admin.state(app)
        if (state.get("current") or {}).get("cmd_uid") != uid:
            return _outcome(state, cmd, uid)
        if time.monotonic() >= deadline:
            raise OptimizerError(
                f"{cmd} {uid} is still in flight after {wait_seconds:g}s: the servo has not posted its "
                "result (it answers a cancel at its next progress post; is it running?)"
            )
        _pause(deadline)


def _outcome(state: dict[str, Any], cmd: Any, uid: Any) -> str:
    """What became of the cancelled command, from ``/admin/state``: the result the servo posted,
    and whether the cancel reached it while it ran or only as it finished."""
    posted = [
        entry["param"]
        for entry in state.get("history") or []
        if isinstance(entry.get("param"), dict)
        and entry["param"].get("cmd_uid") == uid
        and "status" in entry["param"]
    ]
    answered = [c for c in state.get("cancels") or [] if c.get("cmd_uid") == uid]
    if not posted:
        return f"{cmd} {uid} is no longer in flight"
    result = posted[-1]
    said = f"{result['status']} ({result.get('reason') or '-'})"
    if answered and answered[-1].get("answered_to") == "result":
        # The cancel came after its last progress post: its result was answered cancel instead.
        return f"{cmd} {uid} had finished when the cancel reached it: its result {said} was answered cancel"
    return f"{cmd} {uid}: the servo posted {said}"


def _flush() -> None:
    # Whoever started `serve` (a test, a script) reads the URL line from a pipe: send it now.
    # sys.stdout, not click.get_text_stream (deprecated in click 8.5, removed in 9): the same stream.
    sys.stdout.flush()


PLAN_SUFFIXES = (".yaml", ".yml", ".json")
"""Files of a ``--plan`` folder that are read as plans."""


def _load_plans(paths: tuple[Path, ...]) -> list[tuple[dict[str, Any], str]]:
    """Every plan of ``--plan`` (files, and the plan files of folders, sorted), with its source."""
    if not paths:
        return [(dict(DEFAULT_SEARCH_PLAN), "the default plan")]
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in PLAN_SUFFIXES and p.is_file())
            if not found:
                raise ConfigError(
                    f"no plan files ({', '.join(PLAN_SUFFIXES)}) in this folder", source=str(path)
                )
            files.extend(found)
        else:
            files.append(path)
    return [_load_plan(path) for path in files]


def _unique_apps(applications: list[Any], plans: list[tuple[dict[str, Any], str]]) -> None:
    seen: dict[str, str] = {}
    for application, (_, source) in zip(applications, plans, strict=True):
        if application.app in seen:
            raise ConfigError(
                f"application {application.app} is also in {seen[application.app]}: one plan per application",
                source=source,
                key="app",
            )
        seen[application.app] = source


def _state_file(state: Path | None, plan: dict[str, Any], source: str, plans: int) -> Path | None:
    """The state file of one plan: ``--state`` itself for one plan, else ``ORG_APP.json`` in it."""
    if state is None:
        return None
    if "script" in plan:
        if plans == 1:
            raise UsageError("--state is for search plans; this plan is a script")
        return None  # a folder's files are for the search plans among several
    if plans == 1 and not state.is_dir():
        return state
    if not state.is_dir():
        raise UsageError(f"--state {state}: with several plans, --state must be an existing folder")
    app = plan.get("app")
    if not isinstance(app, str):
        return None  # the plan's own check names the missing app
    return state / (re.sub(r"[^A-Za-z0-9_.-]", "_", app) + ".json")


def _read_admin_token(path: Path) -> str:
    """The admin token in ``path`` (stripped); ConfigError naming the file, never its contents."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the admin token: {getattr(exc, 'strerror', None) or exc}", source=str(path)
        ) from None
    if not token:
        raise ConfigError("the admin token file is empty", source=str(path))
    if any(c.isspace() for c in token):
        raise ConfigError("the admin token must be one word (no spaces or line breaks)", source=str(path))
    return token


def _load_plan(path: Path) -> tuple[dict[str, Any], str]:
    import yaml

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
