"""The root of a servo of several applications, run by the tree's rules: who restarts, when, and
who gives up.

::

    restarts = AppRestarts(tree, {"acme.com/web": policy_of(web), ...}, root_max_restarts=3, root_period=300)
    for app in restarts.start(): ...            # start each application's loop
    # on an application's loop's thread, its actor system lost:
    if restarts.lost(app, why, stop):           # waits out its backoff (its own thread only)
        runtime.reboot(...); restarts.up(app)

The decisions are ``TreeSupervision``'s (``actors/rules/tree.py``: pure, tested on a fake clock);
this object only feeds it events with the time and carries out its effects:

- ``StartApp``: that application's loop may start its subtree (a permit its ``lost`` takes).
- ``KillApp``: nothing more to do: the application's runtime killed its subtree when it noticed
  the loss (``SystemLink.kill``).
- ``GiveUp`` (past its ``supervisor.microreboots``): that application's ``lost`` raises
  ``SupervisorError``, so its loop says GOODBYE ``failure``; the others go on.
- ``StopAll`` (the root lost: the actor system's admin or logger gone): the shared actor system is
  killed and started afresh (``ServoTree.restart``), and every application's loop rejoins it.
- ``GiveUpAll`` (the root past its intensity): every application's ``lost`` raises.
- ``StopApp`` (a reload removed or changed it): returned to the caller (``AppsRunner``), who stops
  that loop and reports ``stopped`` once it has ended.

Thread-safe: each application's loop calls ``lost`` and ``up`` from its own thread, and waits
there alone, so one application's backoff never delays another's commands. Every wait ends within
``STOP_CHECK`` of its stop event being set, and at the latest at the backoff's end.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from servo_actors.actors.rules.tree import (
    AppLost,
    AppPolicy,
    AppState,
    AppStopped,
    AppUp,
    GiveUp,
    GiveUpAll,
    Reconfigured,
    RootLost,
    StartApp,
    StopAll,
    StopApp,
    TreeSupervision,
    TreeTick,
)
from servo_actors.actors.runtime.servo_tree import ServoTree
from servo_actors.actors.transport.system import ActorSystemHandle
from servo_actors.config import ServoConfig
from servo_actors.errors import SupervisorError

__all__ = ["STOP_CHECK", "AppRestarts", "policy_of"]

log = logging.getLogger(__name__)

STOP_CHECK = 0.1
"""Longest a loop waiting out its backoff goes without looking at its stop event."""


def policy_of(config: ServoConfig) -> AppPolicy:
    """The root's policy for one application: its restart intensity from ``supervisor.microreboots``,
    the backoff between its restarts from ``supervisor.restart_backoff``; its configuration, so a
    reload that changes it restarts that application only."""
    supervisor = config.supervisor
    return AppPolicy(
        max_restarts=supervisor.microreboots.max,
        period=supervisor.microreboots.period,
        backoff_min=supervisor.restart_backoff.min,
        backoff_max=supervisor.restart_backoff.max,
        jitter=supervisor.restart_backoff.jitter,
        config=config.model_dump(mode="json"),
    )


class AppRestarts:
    """The tree's rules carried out for the running servo (module docstring). Also the root system
    every application's runtime joins (``RootSystem``): the shared actor system, refused while it
    is lost, since only the rules restart it."""

    def __init__(
        self,
        tree: ServoTree,
        policies: Mapping[str, AppPolicy],
        *,
        root_max_restarts: int,
        root_period: float,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self._tree = tree
        self._clock = clock
        self._rules = TreeSupervision(
            dict(policies), root_max_restarts, root_period, rng=rng or random.Random()
        )
        self._cond = threading.Condition()
        self._permits: set[str] = set()
        self._gave_up: dict[str, str] = {}
        self._joined: dict[str, int] = {}  # the root's generation each application last started in

    def running_system(self) -> ActorSystemHandle:
        """The shared actor system (``ServoTree.running_system``)."""
        return self._tree.running_system()

    def state(self, app: str) -> AppState | None:
        """Where ``app``'s subtree is, as the rules see it (None: not in the tree)."""
        with self._cond:
            return self._rules.state(app)

    def start(self) -> list[str]:
        """The applications to start, in the configuration's order."""
        with self._cond:
            effects = self._rules.start()
            started = [effect.app for effect in effects if isinstance(effect, StartApp)]
            for app in started:
                self._joined[app] = self._tree.restarts
            return started

    def up(self, app: str) -> None:
        """``app``'s connectors answer (or are known not to be up): its subtree runs."""
        with self._cond:
            self._rules.handle(AppUp(app), self._clock())

    def lost(self, app: str, why: str, stop: threading.Event) -> bool:
        """``app``'s subtree was lost (and killed): True once the rules say to start it again (at
        once, or after its backoff), False once ``stop`` is set first (or ``app`` is no longer in
        the tree). SupervisorError when the
        rules give up on it (or on the whole tree)."""
        with self._cond:
            if self._rules.state(app) is None:
                return False  # removed from the tree (a reload): its loop is stopping
            now = self._clock()
            if self._tree.root_lost():
                effects = self._rules.handle(RootLost(why), now)
            elif self._joined.get(app, 0) < self._tree.restarts:
                effects = []  # lost with the root, already restarted: its start is granted
            else:
                effects = self._rules.handle(AppLost(app, why), now)
            self._perform(effects)
            due = self._rules.next_wakeup()
            if app not in self._permits and app not in self._gave_up and due is not None:
                log.warning("%s: its subtree restarts in %.2fs (supervisor.restart_backoff)", app, due - now)
            while True:
                if app in self._gave_up:
                    raise SupervisorError(self._gave_up[app])
                if stop.is_set():
                    return False
                if app in self._permits:
                    self._permits.discard(app)
                    self._joined[app] = self._tree.restarts
                    return True
                now = self._clock()
                self._perform(self._rules.handle(TreeTick(), now))
                due = self._rules.next_wakeup()
                wait = STOP_CHECK if due is None else min(STOP_CHECK, max(0.0, due - now))
                self._cond.wait(wait)

    def reconfigured(self, policies: Mapping[str, AppPolicy]) -> list[Any]:
        """A new configuration (SIGHUP): the ``StartApp`` and ``StopApp`` effects for the caller to
        carry out (an application added starts, one removed or changed stops)."""
        with self._cond:
            effects = self._rules.handle(Reconfigured(dict(policies)), self._clock())
            self._perform(effects)
            for effect in effects:
                if isinstance(effect, StartApp):
                    self._permits.discard(app := effect.app)  # its loop is started by the caller
                    self._gave_up.pop(app, None)
                    self._joined[app] = self._tree.restarts
            return [effect for effect in effects if isinstance(effect, (StartApp, StopApp))]

    def stopped(self, app: str) -> bool:
        """``app``'s loop, stopped by a ``StopApp``, has ended: True if the rules start it again
        (its configuration changed), for the caller to do."""
        with self._cond:
            effects = self._rules.handle(AppStopped(app), self._clock())
            self._permits.discard(app)  # its new loop starts afresh, not on a permit of the old one
            start = any(isinstance(effect, StartApp) for effect in effects)
            if start:
                self._gave_up.pop(app, None)
                self._joined[app] = self._tree.restarts
            return start

    def _perform(self, effects: list[Any]) -> None:
        """Carry out the rules' effects (module docstring); wake every waiting loop."""
        for effect in effects:
            if isinstance(effect, StartApp):
                self._permits.add(effect.app)
            elif isinstance(effect, GiveUp):
                self._gave_up[effect.app] = effect.message
            elif isinstance(effect, GiveUpAll):
                for app in self._rules.states:
                    self._gave_up[app] = effect.message
            elif isinstance(effect, StopAll) and not any(isinstance(e, GiveUpAll) for e in effects):
                try:
                    self._tree.restart()
                except SupervisorError as exc:  # no actor system to rejoin: every loop ends
                    for app in self._rules.states:
                        self._gave_up[app] = f"the servo's actor system cannot be started again: {exc}"
        if effects:
            self._cond.notify_all()
