"""One operation command (``check``, ``describe``, ``measure``, ``adjust``) over the applications
``--app`` selects, at most ``--limit`` at once, and its output per application.

One application (a one-document file, or one selected) runs here and prints exactly as the command
always did: a table, or one indented JSON object. Several print, in the file's order, one table per
application under a ``== ORG/APP ==`` line, or with ``--json`` one compact JSON object per
application per line, each with an ``app`` key. A failure of one application does not stop the
others: each of its error lines goes to stderr as ``error: ORG/APP: ...``, and the command exits
with the highest exit code among them.

With several, each application's operation is a run of this same command for that application
alone, in a process of its own (``python -m servo_actors ... COMMAND --json --app ORG/APP``): an
actor system's start changes process-wide state (Thespian's address and log file in the
environment, the message key, the sessions it forks), so two cannot start at once in one process,
and a process per application also keeps one application's hung or crashing connectors from ever
touching another's command. At most ``--limit`` run at once. A stop signal (SIGTERM, SIGINT) is
passed on to each of them, which stop their connectors and exit; then this one exits 128 + the
signal's number.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from servo_actors import signals
from servo_actors.cli.context import APP_ENV, CliState, echo_json
from servo_actors.errors import ServoError
from servo_actors.logs import redact

if TYPE_CHECKING:
    from servo_actors.config import ServoConfig

__all__ = ["AppCommand", "CHILD_STOP_TIMEOUT", "STOP_POLL", "for_each_app"]

CHILD_STOP_TIMEOUT = 30.0
"""Seconds an application's process gets to stop its connectors after a stop signal is passed on
(each stops within its connectors' shutdown timeouts); then it is killed."""
STOP_POLL = 0.1
"""How often the wait for the applications' processes looks at the stop signals."""
SIGNAL_EXIT_BASE = 128


@dataclass
class AppCommand:
    """An operation command as ``for_each_app`` runs it."""

    name: str
    """The command's name (``describe``), for an application's own process."""
    work: Callable[[ServoConfig], tuple[dict[str, Any], ServoError | None]]
    """The operation on one application's connectors, here: its ``--json`` object, and the error
    that fails the command once the output is shown (None when it succeeded)."""
    render: Callable[[dict[str, Any], ServoConfig], str]
    """The table(s) of a ``--json`` object, for the application it came from."""
    args: Sequence[str] = field(default_factory=tuple)
    """The command's own arguments, for an application's own process."""


def for_each_app(
    state: CliState, app_names: Sequence[str], limit: int | None, as_json: bool, command: AppCommand
) -> None:
    """``command`` on each selected application, its output shown, the worst failure as the exit."""
    configs = state.select(app_names)
    if len(configs) == 1:
        payload, error = command.work(configs[0])
        if as_json:
            echo_json(payload)
        elif text := command.render(payload, configs[0]):  # empty: nothing to show (check --quiet)
            click.echo(text)
        if error is not None:
            raise error
        return
    with signals.watching() as watcher:
        runs = [_AppProcess(state, config, command) for config in configs]
        with ThreadPoolExecutor(max_workers=limit or len(runs), thread_name_prefix="app") as pool:
            futures = [pool.submit(run.run, watcher.stop) for run in runs]
            while not all(future.done() for future in futures):
                watcher.stop.wait(STOP_POLL)
                if watcher.stop.is_set():
                    for run in runs:
                        run.signal(watcher.stop_signum or signal.SIGTERM)
            for future in futures:
                future.result()
        interrupted = watcher.stop_signum if watcher.stop.is_set() else None
    exit_code = 0
    for run in runs:
        if run.payload is not None:
            if as_json:
                click.echo(json.dumps({"app": run.app, **run.payload}, default=str))
            else:
                click.echo(f"== {run.app} ==")
                click.echo(command.render(run.payload, run.config))
                click.echo()
        for line in run.stderr_lines:
            click.echo(line, err=True)
        exit_code = max(exit_code, run.exit_code)
    if interrupted is not None:
        exit_code = SIGNAL_EXIT_BASE + interrupted
    if exit_code:
        raise click.exceptions.Exit(exit_code)


class _AppProcess:
    """One application's run of the command, in a process of its own (module docstring)."""

    def __init__(self, state: CliState, config: ServoConfig, command: AppCommand) -> None:
        self.app = config.app or "-"
        self.config = config
        self._name = command.name
        self._argv = [
            sys.executable,
            "-m",
            "servo_actors",
            "-c",
            config.source or "servo.yaml",
            "-l",
            state.log_level,
            "--log-format",
            state.log_format,
            command.name,
            *command.args,
            "--json",
            "--app",
            self.app,
        ]
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._signalled = False
        self.payload: dict[str, Any] | None = None
        self.stderr_lines: list[str] = []
        self.exit_code = 0

    def run(self, stop: threading.Event) -> None:
        with self._lock:
            if stop.is_set():  # stopped before its turn: it never starts
                return
            env = {name: value for name, value in os.environ.items() if name != APP_ENV}
            self._process = subprocess.Popen(
                self._argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
        try:
            stdout, stderr = self._process.communicate()
        except BaseException:
            self._process.kill()
            self._process.wait()
            raise
        code = self._process.returncode
        self.exit_code = SIGNAL_EXIT_BASE - code if code < 0 else code  # killed by a signal: 128 + it
        try:
            payload = json.loads(stdout) if stdout.strip() else None
        except json.JSONDecodeError:
            payload = None
        self.payload = payload if isinstance(payload, dict) else None
        self.stderr_lines = [_prefixed(self.app, line) for line in stderr.splitlines() if line.strip()]
        if self.exit_code and not self.stderr_lines:
            self.stderr_lines.append(f"error: {self.app}: {self._name} exited {self.exit_code}")

    def signal(self, signum: int) -> None:
        """Pass a stop signal on (once); kill the process if it does not end in time."""
        with self._lock:
            process, self._signalled = (None if self._signalled else self._process), True
        if process is None or process.poll() is not None:
            return
        try:
            process.send_signal(signum)
            threading.Thread(target=self._kill_late, args=(process,), daemon=True).start()
        except ProcessLookupError:
            pass

    @staticmethod
    def _kill_late(process: subprocess.Popen[str]) -> None:
        try:
            process.wait(CHILD_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()


def _prefixed(app: str, line: str) -> str:
    line = redact(line)
    if line.startswith("error: "):
        return f"error: {app}: {line.removeprefix('error: ')}"
    return f"{app}: {line}"
