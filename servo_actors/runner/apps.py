"""A servo of several applications: one control loop per application, one actor system for all.

::

    exit_code = AppsRunner(configs, config_path="servo.yaml", signals=watcher).run()

Each application has its own ``Runner`` (its loop, optimizer session, backoff, token, progress and
recovery) on a thread of its own, and its own supervisor in the actor system the tree shares
(``ServoTree``). One application's trouble (a cancel, a crash loop, a hung or hostile optimizer,
its supervisor killed) stays its own: the others' threads, supervisors and connectors are not
touched. An application whose loop ends (past its ``supervisor.microreboots``: GOODBYE
``failure``) ends alone; the run ends on SIGTERM/SIGINT (GOODBYE from every loop) or once every
loop has ended, with the highest exit code among them.

Here, on the main thread: the signals (every loop watches the same stop), the metrics endpoint
(``settings.metrics`` of the first document) and SIGHUP, which for now is refused with a warning
(the configuration stays the running one).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from servo_actors import observability
from servo_actors.actors.servo_tree import ServoTree
from servo_actors.config import ServoConfig
from servo_actors.errors import ServoError
from servo_actors.logs import log_as_app
from servo_actors.runner.loop import Runner
from servo_actors.signals import SignalWatcher

__all__ = ["MAIN_WAIT", "AppsRunner"]

log = logging.getLogger(__name__)

MAIN_WAIT = 0.2
"""How often the main thread looks at the loops and at SIGHUP while they run."""


class AppsRunner:
    """Runs every application of ``configs`` in one servo (module docstring)."""

    def __init__(
        self, configs: Sequence[ServoConfig], *, config_path: str | None = None, signals: SignalWatcher
    ) -> None:
        self.configs = tuple(configs)
        self.signals = signals
        self.tree = ServoTree()
        self.runners = [
            Runner(config, config_path=config_path, signals=signals, root=self.tree)
            for config in self.configs
        ]
        self._codes: dict[str, int] = {}

    def run(self) -> int:
        metrics = self.configs[0].settings.metrics
        apps = {config.app or "": [spec.name for spec in config.connectors] for config in self.configs}
        self.signals.install(reload=True)
        try:
            with observability.serving_apps(metrics, apps):
                # Started here, on the main thread, before any loop's thread exists (a fork).
                self.tree.running_system()
                threads = [
                    threading.Thread(target=self._run_one, args=(runner,), name=f"app {runner.config.app}")
                    for runner in self.runners
                ]
                for thread in threads:
                    thread.start()
                while any(thread.is_alive() for thread in threads):
                    self.signals.stop.wait(MAIN_WAIT)
                    if self.signals.stop.is_set():
                        break
                    if self.signals.take_reload():
                        log.warning(
                            "SIGHUP: a servo of several applications does not reload its file yet; "
                            "the running configuration stays (restart the servo to apply the file)"
                        )
                    self.signals.drain_wake()
                for thread in threads:
                    thread.join()
        finally:
            self.tree.stop()
            self.signals.restore()
        return max(self._codes.values(), default=0)

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
        self._codes[app] = code
