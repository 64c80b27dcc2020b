"""The supervision tree of a servo of several applications, as a pure state machine.

::

    root (the servo's runtime)              one_for_one over the applications
     +- application supervisor "acme.com/web"   today's policy over its connectors (supervision.py)
     |   +- connector processes ...
     +- application supervisor "acme.com/db"
         +- connector processes ...

``TreeSupervision.handle(event, now)`` takes one event and returns a list of effects; it never
touches a process or the clock (the caller passes ``now``), so it is tested on a fake clock like
the connectors' rules (``tests/actors/test_tree_rules.py``). The shell performs the effects: it
starts an application's subtree (its supervisor, which starts its connectors), kills one (the
supervisor with every connector process of that application, nothing else), stops one in order
(its loop says GOODBYE first), and reports back what happened.

The rules, after Erlang/OTP's ``supervisor`` with ``one_for_one`` at the top:

- An application supervisor that is lost (died, stopped, stopped answering) is killed with its
  subtree and started again: that application only. The others are never named by an effect.
- Restart intensity per application (its ``supervisor.microreboots``): more than ``max_restarts``
  within ``period`` and that application gives up (``GiveUp``: its loop says GOODBYE ``failure``)
  while the others go on. A restart after the first of a streak waits an exponential backoff.
- The root lost (the actor system's admin or logger dead): every application's subtree is killed
  and the whole tree started again; more than the root's intensity and the servo gives up
  (``GiveUpAll``).
- A new configuration (SIGHUP): an application added is started, one removed is stopped with
  GOODBYE, one whose configuration changed is stopped (no GOODBYE: it comes straight back) and
  started again; the others are untouched, even mid-restart.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from servo_actors.actors.rules.restart_policy import RestartBackoff, RestartIntensity

__all__ = [
    "AppLost",
    "AppPolicy",
    "AppState",
    "AppStopped",
    "AppUp",
    "GiveUp",
    "GiveUpAll",
    "KillApp",
    "Reconfigured",
    "RootLost",
    "StartApp",
    "StopApp",
    "StopAll",
    "TreeSupervision",
    "TreeTick",
]


class AppState(StrEnum):
    """Where one application's subtree is."""

    STARTING = "starting"  # StartApp sent; its supervisor has not said Ready yet
    RUNNING = "running"
    RESTARTING = "restarting"  # killed; started again once its backoff is over
    STOPPING = "stopping"  # StopApp sent (removed, changed, or the servo stopping)
    FAILED = "failed"  # gave up past its restart intensity; its loop said GOODBYE failure


@dataclass(frozen=True)
class AppPolicy:
    """How one application's subtree is supervised from the root, and what its configuration is
    (``config``: anything comparable; a change restarts the subtree on ``Reconfigured``)."""

    max_restarts: int = 3
    period: float = 300.0
    backoff_min: float = 0.1
    backoff_max: float = 30.0
    jitter: float = 0.2
    config: Any = None


# ----- events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppUp:
    """The application's supervisor answered Ready: its connectors answer or are known not to."""

    app: str


@dataclass(frozen=True)
class AppLost:
    """The application's supervisor died, stopped or stopped answering."""

    app: str
    why: str


@dataclass(frozen=True)
class AppStopped:
    """A ``StopApp`` is done: the application's subtree is gone (and its GOODBYE sent, if asked)."""

    app: str


@dataclass(frozen=True)
class RootLost:
    """The root itself (the actor system's admin or logger) is lost: the whole tree goes."""

    why: str


@dataclass(frozen=True)
class Reconfigured:
    """A new configuration: every application it holds, with its policy (SIGHUP)."""

    apps: Mapping[str, AppPolicy]


@dataclass(frozen=True)
class TreeTick:
    """Time passed: restarts whose backoff is over are due."""


# ----- effects -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartApp:
    """Start the application's supervisor (which starts its connectors) and its loop."""

    app: str


@dataclass(frozen=True)
class KillApp:
    """SIGKILL the application's supervisor and every connector process of that application."""

    app: str


@dataclass(frozen=True)
class StopApp:
    """Stop the application in order: its loop (GOODBYE ``goodbye`` unless None), then its subtree."""

    app: str
    goodbye: str | None


@dataclass(frozen=True)
class GiveUp:
    """The application restarted too often: its loop says GOODBYE ``failure``; the others go on."""

    app: str
    message: str


@dataclass(frozen=True)
class GiveUpAll:
    """The root restarted too often: every loop says GOODBYE ``failure`` and the servo exits 1."""

    message: str


@dataclass(frozen=True)
class StopAll:
    """Kill every application's subtree (the root is being restarted or the servo is stopping)."""


# ----- the machine -------------------------------------------------------------------------------


@dataclass
class _App:
    policy: AppPolicy
    state: AppState
    intensity: RestartIntensity
    backoff: RestartBackoff
    restart_at: float | None = None
    then_start: bool = False  # a StopApp of a changed application: start it again once stopped
    restarts: int = 0

    @classmethod
    def new(cls, policy: AppPolicy) -> _App:
        return cls(
            policy,
            AppState.STARTING,
            RestartIntensity(policy.max_restarts, policy.period),
            RestartBackoff(policy.backoff_min, policy.backoff_max, policy.jitter, quiet_period=policy.period),
        )


@dataclass
class TreeSupervision:
    """The root's rules (module docstring). ``start`` gives the first effects; then ``handle``."""

    apps: Mapping[str, AppPolicy]
    root_max_restarts: int = 3
    root_period: float = 300.0
    rng: random.Random = field(default_factory=random.Random)
    _apps: dict[str, _App] = field(default_factory=dict, init=False)
    _root: RestartIntensity = field(init=False)
    _gave_up: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._root = RestartIntensity(self.root_max_restarts, self.root_period)

    # ----- what the shell asks -------------------------------------------------------------------

    def start(self) -> list[Any]:
        """Every application started, in the configuration's order."""
        self._apps = {app: _App.new(policy) for app, policy in self.apps.items()}
        return [StartApp(app) for app in self._apps]

    def state(self, app: str) -> AppState | None:
        """Where ``app`` is (None: not an application of the tree, or removed)."""
        entry = self._apps.get(app)
        return entry.state if entry is not None else None

    @property
    def states(self) -> dict[str, AppState]:
        return {app: entry.state for app, entry in self._apps.items()}

    def restarts(self, app: str) -> int:
        """How often ``app``'s subtree was restarted by the root (not counting the first start)."""
        return self._apps[app].restarts

    def next_wakeup(self) -> float | None:
        """The earliest time a ``TreeTick`` has something to do, or None."""
        due = [entry.restart_at for entry in self._apps.values() if entry.restart_at is not None]
        return min(due, default=None)

    # ----- events --------------------------------------------------------------------------------

    def handle(self, event: object, now: float) -> list[Any]:
        if self._gave_up:
            return []
        if isinstance(event, AppUp):
            return self._up(event.app)
        if isinstance(event, AppLost):
            return self._lost(event.app, event.why, now)
        if isinstance(event, AppStopped):
            return self._stopped(event.app)
        if isinstance(event, RootLost):
            return self._root_lost(event.why, now)
        if isinstance(event, Reconfigured):
            return self._reconfigured(event.apps)
        if isinstance(event, TreeTick):
            return self._tick(now)
        raise TypeError(f"not an event of the tree: {event!r}")

    def _up(self, app: str) -> list[Any]:
        entry = self._apps.get(app)
        if entry is not None and entry.state is AppState.STARTING:
            entry.state = AppState.RUNNING
        return []

    def _lost(self, app: str, why: str, now: float) -> list[Any]:
        entry = self._apps.get(app)
        if entry is None or entry.state in (AppState.RESTARTING, AppState.FAILED):
            return []  # a loss already handled, or of an application no longer in the tree
        if entry.state is AppState.STOPPING:
            return [KillApp(app)]  # stopping anyway: the kill finishes the stop
        if entry.intensity.record(now):
            entry.state, entry.restart_at = AppState.FAILED, None
            policy = entry.policy
            message = (
                f"{app}: {why}; more than {policy.max_restarts} restarts within {policy.period:g}s "
                "(supervisor.microreboots): giving up on this application"
            )
            return [KillApp(app), GiveUp(app, message)]
        delay = entry.backoff.next_delay(now, self.rng)
        entry.state, entry.restart_at = AppState.RESTARTING, now + delay
        effects: list[Any] = [KillApp(app)]
        if delay <= 0.0:
            effects += self._restart(app, entry)
        return effects

    def _restart(self, app: str, entry: _App) -> list[Any]:
        entry.state, entry.restart_at = AppState.STARTING, None
        entry.restarts += 1
        return [StartApp(app)]

    def _tick(self, now: float) -> list[Any]:
        effects: list[Any] = []
        for app, entry in self._apps.items():
            if (
                entry.state is AppState.RESTARTING
                and entry.restart_at is not None
                and entry.restart_at <= now
            ):
                effects += self._restart(app, entry)
        return effects

    def _stopped(self, app: str) -> list[Any]:
        entry = self._apps.get(app)
        if entry is None or entry.state is not AppState.STOPPING:
            return []
        if entry.then_start:
            self._apps[app] = _App.new(entry.policy)
            return [StartApp(app)]
        del self._apps[app]
        return []

    def _root_lost(self, why: str, now: float) -> list[Any]:
        if self._root.record(now):
            self._gave_up = True
            return [
                StopAll(),
                GiveUpAll(
                    f"{why}; more than {self.root_max_restarts} restarts of the whole tree within "
                    f"{self.root_period:g}s: giving up"
                ),
            ]
        effects: list[Any] = [StopAll()]
        for app, entry in list(self._apps.items()):
            if entry.state is AppState.FAILED:
                continue  # gave up already: it stays down
            if entry.state is AppState.STOPPING and not entry.then_start:
                del self._apps[app]  # was being removed: the kill removed it
                continue
            entry.state, entry.restart_at, entry.then_start = AppState.STARTING, None, False
            entry.restarts += 1
            effects.append(StartApp(app))
        return effects

    def _reconfigured(self, apps: Mapping[str, AppPolicy]) -> list[Any]:
        effects: list[Any] = []
        for app, entry in list(self._apps.items()):
            if app not in apps and entry.state is not AppState.STOPPING:
                entry.state, entry.then_start, entry.restart_at = AppState.STOPPING, False, None
                effects.append(StopApp(app, goodbye="shutdown"))
        for app, policy in apps.items():
            current = self._apps.get(app)
            if current is None:
                self._apps[app] = _App.new(policy)
                effects.append(StartApp(app))
            elif current.policy != policy:
                was = current.state
                current.policy = policy
                current.state, current.then_start, current.restart_at = AppState.STOPPING, True, None
                if was is AppState.STOPPING:
                    continue  # its stop is under way: it starts with the new policy once stopped
                if was is AppState.FAILED or was is AppState.RESTARTING:
                    # Nothing runs to stop: a changed configuration is a fresh chance at once.
                    self._apps[app] = _App.new(policy)
                    effects.append(StartApp(app))
                else:
                    effects.append(StopApp(app, goodbye=None))
        return effects
