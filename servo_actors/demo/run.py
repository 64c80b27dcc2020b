"""The demo's main flow: the servo against the embedded optimizer, each step printed as it is recorded.

The optimizer runs as its own process (optimizer_process.py) on a free loopback port, so the servo
talks to it over real HTTP exactly as it would to a remote one; the servo runs here, its
connectors in supervised actor processes. Each step is printed as the optimizer records it; at the
end, the recommendation against the baseline (summary.py).

``run_demo`` optimizes the synthetic application by default; a ``DemoSetup`` (setup.py) gives it
another plan and another servo (scripts/kube-demo: a Deployment on the local Kubernetes cluster),
run by the same loop, with the same Abort presses and the same closing summary.

With ``DemoOptions.apps`` above 1 the one servo runs several applications (the synthetic one,
seeded apart: setup.py's ``demo_apps``) from one multi-document servo.yaml, as ``run`` does
(``runner.apps.AppsRunner``: a loop and a supervisor each, one actor system); the one optimizer
process serves them all, each application with its own session (its own plan, commands, cancels
and search). Each application's lines start with its name (``[web-2] ``); each ends its own loop
when its plan is over, and the demo ends once all have, with a summary per application.

What one application's part prints and presses (its steps, Abort every ``abort_every``-th
MEASURE or ADJUST of its own, its summary) is ``app_demo.AppDemo``.

What the demo says goes through ``echo`` (one line each) and, when given, ``status`` (the text
of a progress line, kept up to date every ``STATUS_INTERVAL``; ``""`` clears it). SIGTERM/SIGINT
(signals.py) end it at any moment: the servo says GOODBYE (every application), the optimizer
process is stopped, and the exit code is 128 + the signal.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from servo_actors import signals
from servo_actors.config import ServoConfig, load_apps
from servo_actors.connectors.registry import connector_settings_problems
from servo_actors.demo.app_demo import STATE_TIMEOUT, AppDemo
from servo_actors.demo.errors import DemoError
from servo_actors.demo.optimizer_process import running_optimizer
from servo_actors.demo.setup import DemoOptions, DemoSetup, demo_apps, demo_plan, servo_yaml, synthetic_setup
from servo_actors.protocol.admin_client import OptimizerAdminClient
from servo_actors.runner import Runner
from servo_actors.runner.apps import AppsRunner

__all__ = [
    "STATUS_INTERVAL",
    "STATUS_STOP_TIMEOUT",
    "run_demo",
]

STATUS_INTERVAL = 0.5
"""How often the progress line is brought up to date (from the optimizer's state)."""
STATUS_STOP_TIMEOUT = STATE_TIMEOUT + 1.0
"""Longest the demo waits for the progress line's thread to end."""


def run_demo(
    options: DemoOptions,
    echo: Callable[[str], None] = print,
    *,
    status: Callable[[str], None] | None = None,
    setup: DemoSetup | None = None,
    finished: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Run the demo; the exit code: 0 when every application's plan finished with a
    recommendation, 1 when one did not, 128 + the signal when SIGTERM/SIGINT stopped it.
    ``finished`` is given the optimizer's last record of each plan (``/admin/state``'s ``driver``:
    its steps and ``best``) when the plans ran to their end, before the optimizer stops."""
    if setup is not None and options.apps != 1:
        raise DemoError(f"a demo of {options.apps} applications runs the synthetic application only")
    with signals.watching() as watcher:
        if watcher.stop.is_set():  # during start-up: nothing is started only to be stopped
            echo(f"interrupted by {watcher.stop_signal}: nothing was started")
            return 128 + (watcher.stop_signum or 0)
        with tempfile.TemporaryDirectory(prefix="servo-actors-demo-") as tmp:
            code: int | None = None  # None: a stop signal ended it
            demo: _Demo | _AppsDemo
            if options.apps == 1:
                setup = setup or synthetic_setup(options)
                plans = [_written(Path(tmp, "plan.yaml"), setup.plan)]
                state = Path(tmp, "state.json")
            else:
                plans = [
                    _written(Path(tmp, f"plan-{n}.yaml"), demo_plan(own, app))
                    for n, (app, own) in enumerate(demo_apps(options), 1)
                ]
                state = Path(tmp, "state")
                state.mkdir()  # one state file per application
            with running_optimizer(plans, state, watcher) as url:
                if url is not None:
                    echo(
                        f"embedded optimizer: {url}  (console: {url}/  "
                        f"abort: servo-actors optimizer cancel --url {url}"
                        + (" --app ORG/APP" if options.apps > 1 else "")
                        + ")"
                    )
                    if setup is not None:
                        demo = _Demo(url, setup.config(url), options, echo, status, watcher)
                    else:
                        demo = _AppsDemo(url, Path(tmp, "servo.yaml"), options, echo, status, watcher)
                    code = demo.run()
                    _give_back_stop(watcher)
                    if finished is not None:
                        for final in demo.finals():
                            finished(final)
        if code is None:
            echo(f"interrupted by {watcher.stop_signal}: the servo and the embedded optimizer are stopped")
            return 128 + (watcher.stop_signum or 0)
        return code


def _written(path: Path, plan: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(plan))
    return path


def _give_back_stop(watcher: signals.SignalWatcher) -> None:
    """The demo ends its runner with the watcher's stop event (``Runner.request_stop``); unless a
    signal set it, clear it, so a caller that goes on after the demo is not taken as stopped."""
    if watcher.stop_signal is None:
        watcher.stop.clear()
        watcher.drain_wake()
        if watcher.stop_signal is not None:  # a signal came between the look and the clear
            watcher.stop.set()


class _Demo:
    """One application: one servo loop against the optimizer at ``url``, printing what happens."""

    def __init__(
        self,
        url: str,
        config: ServoConfig,
        options: DemoOptions,
        echo: Callable[[str], None],
        status: Callable[[str], None] | None,
        watcher: signals.SignalWatcher,
    ) -> None:
        self.url = url
        self.status = status
        self.watcher = watcher
        self.app = AppDemo(
            url,
            options,
            echo,
            end_loop=lambda: self.runner.request_stop("shutdown"),
            stopping=watcher.stop,
            status=status,
        )
        self.runner = Runner(config, observer=self.app.observe, signals=watcher)
        self.finished = threading.Event()

    def finals(self) -> list[dict[str, Any]]:
        return [self.app.final] if self.app.final is not None else []

    def run(self) -> int | None:
        """The exit code, or None if a stop signal ended the run (the servo said GOODBYE)."""
        ticker = None
        if self.status is not None:
            ticker = threading.Thread(target=self._keep_status, name="demo-status", daemon=True)
            ticker.start()
        try:
            code = self.runner.run()
        finally:
            self.app.end()
            self.finished.set()
            if ticker is not None:
                ticker.join(STATUS_STOP_TIMEOUT)
                self.status("")  # type: ignore[misc]
        try:
            if self.watcher.stop_signal is not None:
                return None
            if code:
                return code
            return self.app.report()
        finally:
            self.app.close()

    def _keep_status(self) -> None:
        admin = OptimizerAdminClient(self.url, timeout=STATE_TIMEOUT)
        try:
            while not self.finished.wait(STATUS_INTERVAL):
                try:
                    state = self.app.state(admin)
                except DemoError:
                    continue  # the next look may do; the lines say what matters
                self.status(self.app.status_text(state))  # type: ignore[misc]
        finally:
            admin.close()


class _AppsDemo:
    """Several applications: one servo of a loop each (``AppsRunner``, from the multi-document
    ``servo.yaml`` written at ``config_path``), each against its own session of the optimizer at
    ``url``, each line naming its application."""

    def __init__(
        self,
        url: str,
        config_path: Path,
        options: DemoOptions,
        echo: Callable[[str], None],
        status: Callable[[str], None] | None,
        watcher: signals.SignalWatcher,
    ) -> None:
        self.url = url
        self.status = status
        self.watcher = watcher
        self._echo = echo
        self._echo_lock = threading.Lock()  # lines come from every application's loop thread
        config_path.write_text(servo_yaml(url, options))
        configs = load_apps(config_path, connector_check=connector_settings_problems)
        self.apps: dict[str, AppDemo] = {}
        for app, own in demo_apps(options):
            self.apps[app] = AppDemo(
                url,
                own,
                self.echo,
                app=app,
                prefix=f"[{_short(app)}] ",
                end_loop=self._ender(app),
                stopping=watcher.stop,
            )
        self.runner = AppsRunner(
            configs.configs,
            config_path=str(config_path),
            signals=watcher,
            observers={app: demo.observe for app, demo in self.apps.items()},
        )
        self.finished = threading.Event()
        self.began = time.monotonic()
        seeds = ", ".join(f"{app} (seed {demo.options.seed})" for app, demo in self.apps.items())
        self.echo(f"one servo, {len(self.apps)} applications, each its own optimizer session: {seeds}")

    def _ender(self, app: str) -> Callable[[], None]:
        """What ends ``app``'s loop alone (GOODBYE ``shutdown``): the others go on."""
        return lambda: self.runner.request_stop(app)

    def echo(self, text: str) -> None:
        with self._echo_lock:
            self._echo(text)

    def finals(self) -> list[dict[str, Any]]:
        return [demo.final for demo in self.apps.values() if demo.final is not None]

    def run(self) -> int | None:
        """The highest exit code of the applications, or None if a stop signal ended the run
        (every loop said GOODBYE)."""
        ticker = None
        if self.status is not None:
            ticker = threading.Thread(target=self._keep_status, name="demo-status", daemon=True)
            ticker.start()
        try:
            code = self.runner.run()
        finally:
            for demo in self.apps.values():
                demo.end()
            self.finished.set()
            if ticker is not None:
                ticker.join(STATUS_STOP_TIMEOUT)
                self.status("")  # type: ignore[misc]
        try:
            if self.watcher.stop_signal is not None:
                return None
            if code:
                return code
            return max(demo.report() for demo in self.apps.values())
        finally:
            for demo in self.apps.values():
                demo.close()

    def _keep_status(self) -> None:
        admin = OptimizerAdminClient(self.url, timeout=STATE_TIMEOUT)
        try:
            while not self.finished.wait(STATUS_INTERVAL):
                parts = []
                for app, demo in self.apps.items():
                    try:
                        state = demo.state(admin)
                    except DemoError:
                        continue  # the next look may do; the lines say what matters
                    parts.append(f"{_short(app)} {demo.status_text(state, elapsed=False)}")
                took = f"{time.monotonic() - self.began:.0f} s"
                self.status("  ·  ".join([*parts, took]))  # type: ignore[misc]
        finally:
            admin.close()


def _short(app: str) -> str:
    """``web-2`` from ``demo.local/web-2``: how the console names an application."""
    return app.rsplit("/", 1)[-1]
