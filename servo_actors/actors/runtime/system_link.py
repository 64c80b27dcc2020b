"""The runtime's link to its own actor system: telling the supervisor, listening for its answers,
and watching that the system is alive (``SystemLink``, which ``ServoRuntime`` holds).

An external ``listen`` returns the next message of any kind, and Thespian does not keep the order of
messages: an answer may arrive while the runtime is waiting for something else (a ``Cancelled``
before the cancelled operation's ``Done``). Answers are therefore kept by request id (a bounded map)
until asked for. All calls are made from one thread. Every wait is bounded or watched.

The link watches the actor system (``watchdog.py``): the supervisor, Thespian's admin and logger
are checked by PID and state, and the supervisor is pinged every ``supervisor.liveness.interval``
seconds. A process that dies is noticed at the next check (within ``LIVENESS_INTERVAL`` while
waiting, within a progress slice otherwise, at once in ``idle_wait``: it waits on pidfds of those
processes); one that is stopped or stops answering, within ``interval + timeout`` (while idle, in
a SLEEP: ``idle_interval + timeout``). Then the system
is ``lost``: it is killed at once, the operation in flight resolves ``failed`` with reason
``supervisor-lost`` (the link's ``on_lost``), and ``ServoRuntime.reboot`` starts a fresh one
(the runner decides how often, see ``supervisor.microreboots``).

Nothing is sent to a supervisor that is stopped (SIGSTOP): Thespian would wait for its
acknowledgement for its transmit timeout (5 s) and then drop the message without a word. The
message waits in the link and goes out once the supervisor runs again.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from servo_actors.actors.linux import descendants, processes
from servo_actors.actors.linux.watchdog import STOPPED_STATES, Watchdog
from servo_actors.actors.rules import messages as m
from servo_actors.actors.transport.system import ActorSystemHandle
from servo_actors.errors import SupervisorError
from servo_actors.vocabulary import SUPERVISOR_LOST

__all__ = [
    "ANSWERS_KEPT",
    "DRAIN_LIMIT",
    "DRAIN_SLICE",
    "FAILURE_POLL_INTERVAL",
    "LIVENESS_INTERVAL",
    "LOST_REASON",
    "PING_KIND",
    "PING_ANSWER_WAIT",
    "PING_PREFIX",
    "SUBTREE_KILL_TIMEOUT",
    "SupervisorLost",
    "SystemLink",
    "actor_pid",
    "kill_subtree",
]

ANSWERS_KEPT = 64
"""Answers kept by request id until asked for (oldest dropped first): a handful are ever pending."""
LOST_REASON = SUPERVISOR_LOST
"""The reason word of an operation whose actor system was lost under it."""
LIVENESS_INTERVAL = 0.25
"""Longest listen before checking that the supervisor process is still alive."""
DRAIN_SLICE = 0.0002
"""Seconds per listen when draining without waiting (Thespian's listen(0) never reads anything)."""
FAILURE_POLL_INTERVAL = 0.1
"""``failure`` drains arrived messages at most this often (a drain costs a fraction of a ms)."""
DRAIN_LIMIT = 100
"""Most messages one drain handles, so a chatty connector cannot keep ``failure`` from returning."""
PING_ANSWER_WAIT = 0.05
"""``idle_wait`` first reads the answer of a ping just sent for up to this long (it takes about a
millisecond), so that the idle wait lasts a whole ``liveness.idle_interval`` instead of ending to
read it."""
PING_KIND = "ping"
PING_PREFIX = f"{PING_KIND}-"
"""Request ids of liveness pings start with this (``new_id``)."""

_log = logging.getLogger(__name__)
_ids = itertools.count(1)


SUBTREE_KILL_TIMEOUT = 5.0
"""Seconds ``kill_subtree`` waits for the processes it killed to be gone."""


def kill_subtree(pid: int, timeout: float = SUBTREE_KILL_TIMEOUT) -> list[int]:
    """SIGKILL ``pid`` (an application's supervisor) and every process under it: each descendant
    with its process group and cgroup (``descendants.kill_tree``). The survivors after ``timeout``."""
    found, index = [pid], 0
    while index < len(found):
        found += [child.pid for child in processes.children_of(found[index]) if child.alive]
        index += 1
    for descendant in reversed(found[1:]):
        descendants.kill_tree(descendant)
    processes.kill_pids([pid])
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in found if processes.is_running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(processes.KILL_POLL_INTERVAL)


def actor_pid(system: ActorSystemHandle, address: Any) -> int | None:
    """The PID of the top-level actor at ``address`` in ``system``: the child of the system's admin
    (the session's process whose parent is outside it) that listens on the address's port. Only
    the admin's children are read (its logger and the applications' supervisors), not every
    connector of the session. None if that cannot be told."""
    try:
        host, port = str(address.addressDetails.sockname[0]), int(address.addressDetails.sockname[1])
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    sid = system.session_id
    if sid is None:
        return None
    stats = {
        pid: stat for pid in processes.session_members(sid) if (stat := processes.proc_stat(pid)) is not None
    }
    admins = {pid for pid, stat in stats.items() if stat.ppid not in stats}
    children = (pid for pid, stat in stats.items() if stat.ppid in admins)
    holders = processes.listeners_on(port, children, ipv6=":" in host)
    return holders[0] if len(holders) == 1 else None


class SupervisorLost(SupervisorError):
    """The runtime's own actor system (supervisor, admin or logger) died, stopped or stopped
    answering; it has been killed. Not terminal: ``reboot`` starts a fresh one."""

    reason = LOST_REASON


class SystemLink:
    """The actor system, its supervisor, the answers kept for their askers, and the liveness watch.

    Every message that arrives goes first to ``handle`` (the owner's: progress and results of
    operations, which it consumes by returning True); an answer it leaves (Ready, Cancelled,
    Stopped, Status) is kept by request id for ``await_answer``. ``on_lost`` is told why when the
    system is lost, so the owner can resolve the operation in flight.
    """

    def __init__(
        self,
        liveness_interval: float,
        liveness_timeout: float,
        liveness_idle_interval: float | None = None,
        *,
        handle: Callable[[Any], bool],
        on_lost: Callable[[str], None],
        subtree_only: bool = False,
    ) -> None:
        self._handle = handle
        self._on_lost = on_lost
        self._subtree_only = subtree_only
        """The system is shared (one application of several): a loss kills this link's supervisor
        with its connectors, never the rest of the system (``kill``)."""
        self._system: ActorSystemHandle | None = None
        self._supervisor: Any = None
        self._supervisor_pid: int | None = None
        self._polled_at = 0.0
        self._answers: OrderedDict[str, Any] = OrderedDict()
        self._watchdog = Watchdog(liveness_interval, liveness_timeout, liveness_idle_interval)
        self._checked_at = 0.0
        self._lost: SupervisorLost | None = None
        self._deferred: list[Any] = []
        """Messages for a supervisor that was stopped when they were told (see ``tell``), in order.
        Few: no ping goes out while it is stopped, and it is lost within ``liveness.timeout``."""

    def _receive(self, message: Any) -> None:
        """Handle one message (None: nothing arrived): the owner's ``handle`` first, then an answer
        is kept for its asker. A Ready or Status names the supervisor's PID, which is watched."""
        if message is None:
            return
        if isinstance(message, (m.Ready, m.Status)):
            self._supervisor_pid = message.supervisor_pid
        if self._handle(message):
            return
        if isinstance(getattr(message, "request_id", None), str):
            self._keep_answer(message)

    def _keep_answer(self, message: Any) -> None:
        """An answer (Ready, Cancelled, Stopped, Status): kept until asked for, since it may arrive
        before the message its asker waits for first. A ping's answer goes to the watchdog."""
        request_id = message.request_id
        if request_id == self._watchdog.ping_id:
            self._watchdog.answered(request_id, time.monotonic())
            return
        if request_id.startswith(PING_PREFIX):
            return  # a ping another message answered first (_listen): nobody waits for it
        self._answers[request_id] = message
        while len(self._answers) > ANSWERS_KEPT:
            self._answers.popitem(last=False)

    # ----- the system ---------------------------------------------------------------------------

    def connect(self, system: ActorSystemHandle, supervisor_class: type) -> None:
        """Start ``system`` and create the supervisor (an actor of ``supervisor_class``) in it.

        Whatever was kept from an earlier system (answers, the watchdog's state, a loss) is
        forgotten first. Should the start fail, ``kill`` still finds ``system`` to kill."""
        self._supervisor_pid, self._lost = None, None
        self._answers.clear()
        self._watchdog.reset()
        self._system = system
        system.start()
        self._supervisor = system.create_actor(supervisor_class)
        if self._subtree_only:
            # Watched from now on, not from its first answer: one that dies or hangs while its
            # connectors start is lost (and killed with them) at once, not at the servo's stop.
            self._supervisor_pid = actor_pid(system, self._supervisor)

    def refused(self, why: str) -> SupervisorLost:
        """A system that could not even be reached (a shared one lost as this link joined it): lost
        as any loss, with nothing to kill. The loss, to raise."""
        self._lost = SupervisorLost(why)
        return self._lost

    @property
    def system(self) -> ActorSystemHandle | None:
        """The actor system, None before ``connect`` and once killed."""
        return self._system

    @property
    def supervisor(self) -> Any:
        """The supervisor's address in the system (None when there is none)."""
        return self._supervisor

    @property
    def watchdog(self) -> Watchdog:
        """The liveness watch of the system's processes."""
        return self._watchdog

    @property
    def deferring(self) -> bool:
        """Messages wait for a stopped supervisor to run again (see ``tell``)."""
        return bool(self._deferred)

    @property
    def started(self) -> bool:
        return self._system is not None and self._system.running

    @property
    def session_id(self) -> int | None:
        """The session id shared by every process of this runtime's actor system."""
        return self._system.session_id if self._system else None

    @property
    def lost(self) -> SupervisorLost | None:
        """Set once the actor system was lost (see module docstring) and killed; ``reboot`` clears it."""
        return self._lost

    @property
    def failure(self) -> SupervisorError | None:
        """Set once the actor system was lost (``lost``: a ``reboot`` may bring it back). A connector
        past its restart intensity is not a failure of the runtime: it is marked failed, the others
        go on (``not_up``). Reading this polls the system at most every FAILURE_POLL_INTERVAL."""
        now = time.monotonic()
        if self._lost is None and self.started and now - self._polled_at >= FAILURE_POLL_INTERVAL:
            self._polled_at = now
            self.poll()
        return self._lost

    def poll(self) -> None:
        """Handle the messages that have already arrived (progress, results, failure) and check the
        actor system's processes (a liveness ping may go out); never waits."""
        for _ in range(DRAIN_LIMIT):
            if self._system is None:
                return
            message = self._system.listen(DRAIN_SLICE)
            if message is None:
                break
            self._receive(message)
        self._check_liveness(force=True)

    def idle_wait(self, seconds: float, wake_fds: Iterable[int] = ()) -> None:
        """Wait up to ``seconds`` with nothing in flight (a SLEEP); ``poll`` after it.

        Ends at once when a watched process of the actor system ends (a pidfd) or one of
        ``wake_fds`` is readable (a signal), and at the latest when the watchdog must look again
        (a ping, its deadline, a stopped process's: ``Watchdog.next_check``). The watchdog is idle
        from here until something other than a ping is told (``tell``): pings go out every
        ``supervisor.liveness.idle_interval``, so an idle servo wakes about that often.
        Without pidfds (Linux < 5.3) it waits at most ``LIVENESS_INTERVAL`` between looks.
        """
        self._watchdog.idle = True
        self._await_ping(PING_ANSWER_WAIT)
        now = time.monotonic()
        pids = (
            list(self._watchdog.watched.values()) if self._system is not None and self._lost is None else []
        )
        until_check = self._watchdog.next_check(now) - now
        if pids and processes.wait_for_exit_or(pids, wake_fds, min(seconds, until_check)):
            return
        select.select(list(wake_fds), [], [], max(0.0, min(seconds, LIVENESS_INTERVAL)))

    def _await_ping(self, timeout: float) -> None:
        """Read messages until the outstanding ping is answered, for up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._watchdog.ping_id is not None and self._system is not None and self._lost is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.handle_next(remaining)

    def members(self) -> list[int]:
        """Live PIDs of every process of the actor system (admin, logger, supervisor, connectors)."""
        return self._system.members() if self._system else []

    def own_processes(self) -> dict[str, int]:
        """The watched processes of the actor system: ``supervisor``, ``Thespian admin``, ``Thespian
        logger`` -> PID (known once the supervisor has answered ``start``)."""
        return dict(self._watchdog.watched)

    # ----- messages ----------------------------------------------------------------------------

    def tell(self, message: Any) -> None:
        """Send to the supervisor: it never blocks, so this returns at once. Gone: SupervisorLost
        naming what died. Stopped (SIGSTOP): kept in ``_deferred`` and sent once it runs again
        (``_check_liveness``), since Thespian would wait for it for its transmit timeout and then
        drop the message silently; the watchdog decides meanwhile whether it is lost. Anything but
        a ping ends the watchdog's idle mode (see ``idle_wait``)."""
        if not (isinstance(message, m.GetStatus) and message.request_id.startswith(PING_PREFIX)):
            self._watchdog.idle = False
        if self._supervisor_pid is not None and self._system is not None and self._lost is None:
            stat = processes.proc_stat(self._supervisor_pid)
            if stat is None or not stat.alive:
                # Thespian would retry a dead address for its transmit timeout.
                self.lose(self._what_died())
            elif stat.state in STOPPED_STATES or self._deferred:
                self._deferred.append(message)  # behind any already waiting: order is kept
                return
        if self._lost is not None:
            raise self._lost
        if self._system is None:
            raise SupervisorError("the connector runtime is not running")
        try:
            self._system.tell(self._supervisor, message)
        except Exception as exc:  # Thespian's failures are not ServoErrors: name what is wrong
            self.lose(f"the supervisor cannot be reached ({type(exc).__name__}: {exc})")
            raise self._lost from None  # type: ignore[misc]  # lose() just set it: never None here

    @staticmethod
    def new_id(kind: str) -> str:
        """A fresh request id for a message of ``kind``."""
        return f"{kind}-{os.getpid()}-{next(_ids)}"

    def require_running(self) -> None:
        """SupervisorLost if the system was lost, SupervisorError if it is not running."""
        if self._lost is not None:
            raise self._lost
        if not self.started or self._supervisor is None:
            raise SupervisorError("the connector runtime is not running")

    def await_answer(self, request_id: str, timeout: float) -> Any:
        """The answer to ``request_id`` (kept if it came early); None after ``timeout`` or once the
        system is lost. Messages that arrive meanwhile are handled."""
        deadline = time.monotonic() + timeout
        while True:
            if request_id in self._answers:
                return self._answers.pop(request_id)
            if self._system is None or self._lost is not None:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.handle_next(remaining)

    def handle_next(self, timeout: float) -> None:
        """Handle the next message within ``timeout`` (at most ``LIVENESS_INTERVAL``), if one comes."""
        self._receive(self._listen(timeout))

    def _listen(self, timeout: float) -> Any:
        """The next message within ``timeout`` (at most ``LIVENESS_INTERVAL``), then a liveness check."""
        assert self._system is not None
        message = self._system.listen(min(timeout, LIVENESS_INTERVAL))
        ping = self._watchdog.ping_id
        if ping is not None and message is not None:
            # Any message answers the ping: it shows the supervisor's loop turning, and the ping's
            # own answer can wait seconds behind a large result (18 MB for a million points). It
            # counts before the check: after a long gap it would look missing.
            self._watchdog.answered(ping, time.monotonic())
        self._check_liveness(force=message is None)
        return message

    def _check_liveness(self, *, force: bool = False) -> None:
        """Ask the watchdog about the system's processes; send a ping when one is due."""
        if self._system is None or self._lost is not None:
            return
        now = time.monotonic()
        if not force and now - self._checked_at < FAILURE_POLL_INTERVAL:
            return
        self._checked_at = now
        if self._supervisor_pid is not None and not self._watchdog.watched:
            self._watch_processes(self._supervisor_pid)
        problem = self._watchdog.verdict(now, processes.proc_stat)
        if problem is not None:
            self.lose(problem)
            return
        if self._deferred and not self._watchdog.stopped("supervisor"):
            self._send_deferred()
        if self._watchdog.ping_due(now):
            request = m.GetStatus(self.new_id(PING_KIND))
            self._watchdog.ping_sent(request.request_id, now)
            with contextlib.suppress(SupervisorLost):
                self.tell(request)

    def _send_deferred(self) -> None:
        """The supervisor runs again: what was told while it was stopped goes out now, in order."""
        waiting, self._deferred = self._deferred, []
        for message in waiting:
            with contextlib.suppress(SupervisorLost):  # its waiter finds out from ``lost``
                self.tell(message)

    def _what_died(self) -> str:
        """The verdict on a supervisor found dead: the process whose death explains it (its parent,
        Thespian's admin, or the logger, whose death ends the admin), with what went with it."""
        if self._supervisor_pid is not None and not self._watchdog.watched:
            self._watch_processes(self._supervisor_pid)
        verdict = self._watchdog.verdict(time.monotonic(), processes.proc_stat)
        return verdict or f"the supervisor (pid {self._supervisor_pid}) died"

    def _watch_processes(self, supervisor_pid: int) -> None:
        """Watch the supervisor, its parent (Thespian's admin) and the admin's other child (the logger).

        Each depends on the next: the supervisor dies with the admin (parent death), the admin
        exits when its logger dies (measured: 20-30 ms later each), so when several are gone the
        verdict names the one that went first.
        """
        self._watchdog.watch("supervisor", supervisor_pid, depends_on="Thespian admin")
        stat = processes.proc_stat(supervisor_pid)
        if stat is None or self._system is None or self._system.session_id is None:
            return  # gone already: the next verdict says so
        admin = processes.proc_stat(stat.ppid)
        if admin is None or admin.sid != self._system.session_id:
            return
        self._watchdog.watch("Thespian admin", admin.pid, depends_on="Thespian logger")
        # The logger is the admin's first child: its others are supervisors (one per application).
        others = [
            child.pid
            for child in processes.children_of(admin.pid)
            if child.pid != supervisor_pid and child.alive and child.sid == admin.sid
        ]
        started = {pid: processes.start_ticks(pid) for pid in others}
        known = [pid for pid in others if started[pid] is not None]
        if known:
            self._watchdog.watch("Thespian logger", min(known, key=lambda pid: (started[pid], pid)))

    def lose(self, why: str) -> None:
        """The actor system is lost: kill all of it now, fail the operation in flight."""
        if self._lost is not None:
            return
        text = f"{why}; the actor system was killed and its connectors with it"
        _log.error("%s", text)
        self._lost = SupervisorLost(text)
        self._on_lost(text)
        self.kill()

    def kill(self) -> None:
        """SIGKILL every process of the actor system at once (crash-only); the run dir stays.

        A shared system (``subtree_only``) keeps running: only this link's supervisor and every
        process under it (its connectors, their process groups and cgroups) are killed."""
        system, self._system, self._supervisor = self._system, None, None
        supervisor_pid, self._supervisor_pid = self._supervisor_pid, None
        self._answers.clear()
        self._deferred.clear()
        self._watchdog.reset()
        if system is None:
            return
        if self._subtree_only:
            survivors = kill_subtree(supervisor_pid) if supervisor_pid is not None else []
            system.kill()  # this link's endpoint only
            if survivors:
                _log.error("processes %s of the application's subtree survived SIGKILL", survivors)
            return
        survivors = system.kill()
        if system.session_id is not None:  # processes that left the session, in its cgroups
            survivors += descendants.release_session(system.session_id)
        if survivors:
            _log.error("processes %s of the actor system survived SIGKILL", survivors)
