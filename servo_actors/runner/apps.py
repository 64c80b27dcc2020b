"""A servo of several applications: one control loop per application, one actor system for all.

::

    exit_code = AppsRunner(configs, config_path="servo.yaml", signals=watcher).run()

Each application has its own ``Runner`` (its loop, optimizer session, backoff, token, progress and
recovery) on a thread of its own, with a stop of its own (``SignalWatcher.child``: stopped alone,
or with the whole servo), and its own supervisor in the actor system the tree shares
(``ServoTree``). One application's trouble (a cancel, a crash loop, a hung or hostile optimizer,
its supervisor killed) stays its own: the others' threads, supervisors and connectors are not
touched. Whether and when a lost supervisor is started again (at once, after its backoff, or never:
past its ``supervisor.microreboots``), and the root's restart, are the tree's rules' decisions
(``AppRestarts``, runner/app_restarts.py), carried out by that application's loop on its own
thread. An application whose loop ends (GOODBYE ``failure``) ends alone; the run ends on SIGTERM/SIGINT (GOODBYE from every loop) or once every
loop has ended, with the highest exit code among them.

``observers`` (by ORG/APP) are told of their application's commands and results, on its loop's
thread (``demo --apps``); ``request_stop(app)`` ends one application's loop alone (GOODBYE).

Here, on the main thread: the signals, the metrics endpoint (``settings.metrics`` of the first
document) and SIGHUP. A SIGHUP reads the file again; a broken one is refused (logged) and nothing
changes. Otherwise the tree's rules compare the new set of applications with the running one,
by ORG/APP: an application added starts (its loop says HELLO); one removed
stops (its loop says GOODBYE ``shutdown``, its connectors are stopped); one whose document changed
stops the same way and starts again from the new document; the others are not touched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servo_actors import observability
from servo_actors.actors.rules.tree import StartApp, StopApp
from servo_actors.actors.runtime.servo_tree import ServoTree
from servo_actors.config import ServoConfig
from servo_actors.errors import ConfigError, ServoError
from servo_actors.logs import log_as_app
from servo_actors.observability import events
from servo_actors.runner.app_restarts import AppRestarts, policy_of
from servo_actors.runner.loop import Runner
from servo_actors.runner.state import Observer
from servo_actors.signals import SignalWatcher

__all__ = ["MAIN_WAIT", "AppsRunner"]

log = logging.getLogger(__name__)

MAIN_WAIT = 0.2
"""How often the main thread looks at the loops and at SIGHUP while they run."""
RELOAD_STOP = "shutdown"
"""The GOODBYE reason of an application that a reload removes (or restarts)."""


@dataclass
class _Loop:
    """One application's loop: its runner, its thread, its own stop."""

    runner: Runner
    thread: threading.Thread
    signals: SignalWatcher


class AppsRunner:
    """Runs every application of ``configs`` in one servo (module docstring)."""

    def __init__(
        self,
        configs: Sequence[ServoConfig],
        *,
        config_path: str | None = None,
        signals: SignalWatcher,
        observers: Mapping[str, Observer] | None = None,
    ) -> None:
        self.configs = {config.app or "": config for config in configs}
        self.observers = dict(observers or {})  # by ORG/APP: told of that application's commands
        self.config_path = config_path
        self.signals = signals
        self.tree = ServoTree()
        first = next(iter(self.configs.values()))
        root = first.supervisor.microreboots
        # The tree's rules: each application's microreboots and backoff, the root's intensity
        # (the first document's supervisor.microreboots).
        self.restarts = AppRestarts(
            self.tree,
            {app: policy_of(config) for app, config in self.configs.items()},
            root_max_restarts=root.max,
            root_period=root.period,
        )
        self.loops: dict[str, _Loop] = {}
        self._ending: list[_Loop] = []  # stopped by a reload, finishing their GOODBYE
        self._waiters: list[threading.Thread] = []  # each starts a changed application again
        self._lock = threading.Lock()  # the three above: a waiter starts a loop from its thread
        self._codes: dict[str, int] = {}

    def run(self) -> int:
        first = next(iter(self.configs.values()))
        apps = {app: [spec.name for spec in config.connectors] for app, config in self.configs.items()}
        self.signals.install(reload=True)
        try:
            with observability.serving_apps(first.settings.metrics, apps):
                # Started here, on the main thread, before any loop's thread exists (a fork).
                self.tree.running_system()
                for app in self.restarts.start():
                    self._start(self.configs[app])
                while any(thread.is_alive() for thread in self._threads()):
                    self.signals.stop.wait(MAIN_WAIT)
                    if self.signals.stop.is_set():
                        break
                    if self.signals.take_reload():
                        self._reload()
                    self.signals.drain_wake()
                while any(thread.is_alive() for thread in self._threads()):
                    for thread in self._threads():
                        thread.join()
                with self._lock:
                    for loop in [*self.loops.values(), *self._ending]:
                        loop.signals.close()
        finally:
            self.tree.stop()
            self.signals.restore()
        return max(self._codes.values(), default=0)

    def _threads(self) -> list[threading.Thread]:
        with self._lock:
            return [loop.thread for loop in [*self.loops.values(), *self._ending]] + list(self._waiters)

    def _start(self, config: ServoConfig) -> None:
        app = config.app or ""
        signals = self.signals.child()
        runner = Runner(
            config,
            config_path=self.config_path,
            signals=signals,
            root=self.restarts,
            observer=self.observers.get(app),
        )
        thread = threading.Thread(target=self._run_one, args=(runner,), name=f"app {app}")
        with self._lock:
            self.loops[app] = _Loop(runner, thread, signals)
        thread.start()

    def request_stop(self, app: str, reason: str = "shutdown") -> None:
        """End one application's loop as a signal would, with GOODBYE ``reason``; the others go
        on (safe from any thread, an observer's included)."""
        with self._lock:
            loop = self.loops.get(app)
        if loop is not None:
            loop.runner.request_stop(reason)

    def _stop(self, app: str) -> _Loop:
        with self._lock:
            loop = self.loops.pop(app)
            self._ending.append(loop)
        loop.runner.request_stop(RELOAD_STOP)  # its own stop only: GOODBYE, then its connectors
        return loop

    def _reload(self) -> None:
        """SIGHUP (module docstring)."""
        from servo_actors.config.loading import load_apps
        from servo_actors.connectors.registry import connector_settings_problems

        source = self.config_path or "servo.yaml"
        try:
            apps = load_apps(self.config_path, connector_check=connector_settings_problems)
            new = {config.app or "": config for config in apps}
            for config in new.values():
                if config.optimizer is None:
                    raise ConfigError("no optimizer is configured", source=source, key="optimizer")
        except ConfigError as exc:
            log.error("configuration reload refused, keeping the running applications: %s", exc)
            return
        running = self.configs
        effects = self.restarts.reconfigured({app: policy_of(config) for app, config in new.items()})
        log.info(
            "configuration reload from %s: %d applications, %d to start, %d to stop",
            source,
            len(new),
            sum(isinstance(effect, StartApp) for effect in effects),
            sum(isinstance(effect, StopApp) for effect in effects),
        )
        for effect in effects:
            app = effect.app
            if app not in new:  # removed: its loop says GOODBYE and ends
                if app in self.loops:
                    self._stop(app)
                running.pop(app, None)
            elif app in running:  # changed: stopped, started again from the new document once ended
                old = self._stop(app) if app in self.loops else None
                self._restart_after(old, new[app])
            else:  # added
                self.configs[app] = new[app]
                self._start(new[app])

    def _restart_after(self, old: _Loop | None, config: ServoConfig) -> None:
        """Start ``config``'s loop once the old one of its application has ended (its GOODBYE sent,
        its connectors stopped: two loops of one application never run at once)."""
        app = config.app or ""
        self.configs[app] = config

        def restart() -> None:
            if old is not None:
                old.thread.join()
            self.restarts.stopped(app)  # the rules start it again (StartApp) or already have
            if not self.signals.stop.is_set():
                self._start(config)

        waiter = threading.Thread(target=restart, name=f"restart {app}")
        with self._lock:
            self._waiters.append(waiter)
        waiter.start()

    def _run_one(self, runner: Runner) -> None:
        app = runner.config.app or "-"
        log_as_app(app)  # every line of this loop (and of its workers) names its application
        try:
            code = runner.run()
        except ServoError as exc:
            log.error("%s: %s", app, exc)
            code = exc.exit_code
        except Exception:  # a bug in one loop must not take the others down
            log.exception("%s: the loop ended on an internal error", app)
            code = 1
        if code:
            log.error("%s: its loop ended (exit code %d); the other applications go on", app, code)
        self._codes[app] = max(code, self._codes.get(app, 0))
        if (runner.config.app or "") not in self.configs:
            self.restarts.stopped(runner.config.app or "")
            events.app_removed(runner.config.app or "")  # a reload removed it: no probe answers for it
