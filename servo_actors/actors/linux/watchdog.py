"""Watchdog: decides when the servo's own actor-system processes are lost. Pure: no I/O, no clock.

The runtime feeds it the state of the processes it watches (the supervisor, Thespian's admin and
logger) and tells it about liveness pings (a ``GetStatus`` the supervisor answers at once in every
state); ``verdict`` names what is wrong, or None while all is well:

- a watched process is gone (or a zombie): at once. The verdict names the process whose death
  explains the others: a process watched as ``depends_on`` another cannot outlive it (Thespian's
  admin ends when its logger dies, the supervisor when the admin dies), so when both are gone the
  one depended on is named, with the others that went with it;
- a watched process has been stopped (SIGSTOP, state ``T``) for ``timeout`` seconds, or, while
  something waits on it (``hurry``: a cancel), for that wait's own ``patience``, counted from the
  look that found it stopped; the verdict says how long it has been stopped as the looks bound it
  (from that look, and from the last moment it was known to run);
- a ping has gone unanswered for ``timeout`` seconds (the supervisor is hung or unreachable).
  The runtime counts any message from the supervisor as the answer (``answered``).

Pings go out every ``interval`` seconds, one at a time. So a death is noticed at the next check,
and a hang within ``interval + timeout`` seconds. While the servo is ``idle`` (a SLEEP, nothing in
flight) they go out every ``idle_interval`` seconds instead, so an idle servo wakes rarely: a hang
is then noticed within ``idle_interval + timeout`` (a death still at once: the runtime waits on the
processes' pidfds). Going busy again brings the next ping back to ``interval`` after the last.

>>> from servo_actors.actors.linux.processes import ProcStat
>>> dog = Watchdog(interval=1.0, timeout=3.0)
>>> dog.watch("supervisor", 42)
>>> running = {42: ProcStat(42, "S", 1, 42, 7, 100)}
>>> dog.verdict(0.0, running.get) is None
True
>>> dog.ping_due(0.0), dog.ping_sent("ping-1", 0.0), dog.ping_due(0.5)
(True, None, False)
>>> dog.verdict(3.0, running.get)
'the supervisor (pid 42) did not answer a liveness check within 3s'
>>> dog.watch("Thespian admin", 41)
>>> dog.watch("supervisor", 42, depends_on="Thespian admin")
>>> dog.verdict(3.1, {}.get)
'the Thespian admin (pid 41) died, and the supervisor (pid 42) with it'
>>> lazy = Watchdog(interval=1.0, timeout=3.0, idle_interval=5.0)
>>> lazy.watch("supervisor", 42)
>>> lazy.idle = True
>>> lazy.ping_sent("ping-2", 0.0), lazy.answered("ping-2", 0.01), lazy.next_check(0.01)
(None, None, 5.0)
>>> lazy.idle = False
>>> lazy.next_check(0.01)
1.0
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from servo_actors.actors.linux.processes import ProcStat

__all__ = [
    "Hurry",
    "STOPPED_STATES",
    "STOP_TIME_RESOLUTION",
    "Watchdog",
]

STOPPED_STATES = ("T", "t")
"""/proc states of a process that is stopped by a signal or by a tracer."""
STOP_TIME_RESOLUTION = 0.05
"""Seconds below which the two ends of a stop's length (found stopped, last seen running) are one."""


@dataclass(frozen=True)
class Hurry:
    """Something waits on one watched process (``role``) since ``since``: stopped, it is lost after
    ``patience`` seconds instead of the watchdog's ``timeout``; ``what`` names the wait in verdicts."""

    role: str
    since: float
    patience: float
    what: str


@dataclass
class Watchdog:
    interval: float
    timeout: float
    idle_interval: float | None = None
    """The ping interval while ``idle`` (None: ``interval`` always)."""
    watched: dict[str, int] = field(default_factory=dict)
    _depends_on: dict[str, str] = field(default_factory=dict)
    _stopped_since: dict[int, float] = field(default_factory=dict)
    """When each stopped process was first found stopped (a look: it may have stopped earlier)."""
    _running_at: dict[int, float] = field(default_factory=dict)
    """The last moment each process was known to run (a look, a ping's answer): a stop came later."""
    _ping: tuple[str, float] | None = None
    _next_ping: float = 0.0
    _hurry: Hurry | None = None
    _idle: bool = False
    _last_ping_at: float | None = None

    @property
    def idle(self) -> bool:
        """Whether the servo is idle (a SLEEP): pings go out every ``idle_interval``."""
        return self._idle

    @idle.setter
    def idle(self, idle: bool) -> None:
        if self._idle and not idle and self._ping is None and self._last_ping_at is not None:
            # Busy again: the next ping is due an (ordinary) interval after the last, not an idle one.
            self._next_ping = min(self._next_ping, self._last_ping_at + self.interval)
        self._idle = idle

    @property
    def current_interval(self) -> float:
        """The ping interval now: ``idle_interval`` while idle (if set), else ``interval``."""
        if self._idle and self.idle_interval is not None:
            return self.idle_interval
        return self.interval

    def watch(self, role: str, pid: int, *, depends_on: str | None = None) -> None:
        """Watch process ``pid``, named ``role`` in verdicts (e.g. ``the Thespian admin``).

        ``depends_on``: the role of a watched process whose death ends this one too, so that when
        both are gone, that one is named as what died.
        """
        self.watched[role] = pid
        if depends_on is not None:
            self._depends_on[role] = depends_on

    def reset(self) -> None:
        """Forget everything (a new actor system is about to be watched)."""
        self.watched.clear()
        self._depends_on.clear()
        self._stopped_since.clear()
        self._running_at.clear()
        self._ping, self._next_ping = None, 0.0
        self._hurry = None
        self._last_ping_at = None

    def hurry(self, role: str, now: float, patience: float, what: str) -> None:
        """From ``now``, ``what`` (e.g. ``a cancel``) waits on ``role``: should that process be or
        become stopped, it is lost once stopped for ``patience`` seconds counted from the later of
        ``now`` and the stop (if shorter than ``timeout``). Until ``calm``."""
        self._hurry = Hurry(role, now, patience, what)

    def calm(self) -> None:
        """Nothing waits any longer (the cancel was answered): a stop has ``timeout`` again."""
        self._hurry = None

    def ping_due(self, now: float) -> bool:
        return self._pinging() and now >= self._next_ping

    def _pinging(self) -> bool:
        """Pings go out: none outstanding, and the supervisor known and not stopped (it could not
        answer; its stop has its own deadline)."""
        return self._ping is None and "supervisor" in self.watched and not self.stopped("supervisor")

    def ping_sent(self, request_id: str, now: float) -> None:
        self._ping = (request_id, now)
        self._last_ping_at = now

    @property
    def ping_id(self) -> str | None:
        return self._ping[0] if self._ping else None

    def answered(self, request_id: str, now: float) -> None:
        """An answer to ``request_id`` arrived: if it was the ping, the next is due an interval after
        it went out (at once if the answer was read later than that: a SLEEP reads it late)."""
        if self._ping is not None and self._ping[0] == request_id:
            sent_at = self._ping[1]
            supervisor = self.watched.get("supervisor")
            if supervisor is not None:  # it answered after the ping went out: it ran then
                self._running_at[supervisor] = max(self._running_at.get(supervisor, sent_at), sent_at)
            self._ping, self._next_ping = None, max(now, sent_at + self.current_interval)

    def next_check(self, now: float) -> float:
        """The latest moment of the next look (``verdict``, a ping) for the bounds above to hold,
        provided a death wakes the caller at once: the outstanding ping's deadline, the next ping,
        a stopped process's deadline, and never more than the current interval away (to see a stop
        begin). An outstanding ping is looked for every ``interval`` even while idle: its answer may
        be read late, and the next ping waits for it."""
        if self._ping is not None:
            due = min(now + self.interval, self._ping[1] + self.timeout)
        else:
            due = now + self.current_interval
            if self._pinging():
                due = min(due, self._next_ping)
        for pid, since in self._stopped_since.items():
            due = min(due, self._stop_deadline(pid, since))
        return max(now, due)

    def _stop_deadline(self, pid: int, since: float) -> float:
        """When a process stopped since ``since`` is lost: after ``timeout``, or sooner when
        something waits on it (``hurry``)."""
        deadline = since + self.timeout
        hurry = self._hurry
        if hurry is not None and self.watched.get(hurry.role) == pid:
            deadline = min(deadline, max(since, hurry.since) + hurry.patience)
        return deadline

    def _stopped_for(self, pid: int, now: float) -> str:
        """How long ``pid`` has been stopped, as far as the looks tell: it was found stopped at one
        look and may have stopped any time after the last moment it was known to run (an idle servo
        looks every ``idle_interval``), so both ends are said when they differ."""
        found = now - self._stopped_since[pid]
        running_at = self._running_at.get(pid)
        if running_at is None:
            return f"at least {found:.1f}s"
        longest = now - running_at
        if longest - found < STOP_TIME_RESOLUTION:
            return f"{found:.1f}s"
        return f"{found:.1f}s to {longest:.1f}s (found stopped {found:.1f}s ago, last seen running {longest:.1f}s ago)"

    def _death(self, dead: list[str]) -> str:
        """Names the dead process that explains the others (see module docstring)."""
        causes = [role for role in dead if self._depends_on.get(role) not in dead] or dead
        cause = causes[0]
        text = f"the {cause} (pid {self.watched[cause]}) died"
        others = [f"the {role} (pid {self.watched[role]})" for role in dead if role != cause]
        if others:
            text += f", and {' and '.join(others)} with it"
        return text

    def stopped(self, role: str) -> bool:
        """Whether ``role``'s process was stopped at the last verdict."""
        pid = self.watched.get(role)
        return pid is not None and pid in self._stopped_since

    def verdict(self, now: float, stat_of: Callable[[int], ProcStat | None]) -> str | None:
        """What is wrong with the watched processes at ``now``, or None. ``stat_of`` reads /proc."""
        stats = {role: stat_of(pid) for role, pid in self.watched.items()}
        dead = [role for role, stat in stats.items() if stat is None or not stat.alive]
        if dead:
            return self._death(dead)
        for role, pid in self.watched.items():
            stat = stats[role]
            assert stat is not None  # not dead: read above
            if stat.state in STOPPED_STATES:
                since = self._stopped_since.setdefault(pid, now)
                if now >= self._stop_deadline(pid, since):
                    text = f"the {role} (pid {pid}) has been stopped for {self._stopped_for(pid, now)}"
                    hurry = self._hurry
                    if hurry is not None and hurry.role == role and now - since < self.timeout:
                        text += f" and did not take {hurry.what} within {hurry.patience:g}s"
                    return text
            else:
                self._stopped_since.pop(pid, None)
                self._running_at[pid] = now
        if self._ping is not None and now >= self._ping[1] + self.timeout:  # as next_check adds it
            supervisor_pid = self.watched.get("supervisor")
            return f"the supervisor (pid {supervisor_pid}) did not answer a liveness check within {self.timeout:g}s"
        return None
