"""ConnectorHost: the generic actor that runs one connector in its own process.

Why a worker thread: a Thespian actor blocked inside ``receiveMessage`` is deaf, so a host that
called the connector on its own thread could not forward ``progress()`` until the call returned,
nor notice its supervisor dying. The connector therefore runs on one worker thread of the host
process; the worker hands events (progress, result) to the actor thread through a queue and wakes
it with a byte on a pipe the actor watches (``ThespianWatch``). The host never tidies a connector
up: cancel, deadline and crash all end the whole process (and its process group) with SIGKILL, so
a thread that never returns costs nothing.

The process is its own process group (``os.setpgrp`` at creation), so subprocesses a connector
starts die with it, and it gets SIGKILL from the kernel when its parent (the supervisor) exits,
with a periodic ``getppid`` check as a fallback. Before the connector runs, the host moves into a
cgroup of its own and names itself in its environment, so that what the connector starts can be
found and killed even outside its group and session (``cgroups``, ``descendants``).

Whatever the connector returns, raises or passes to ``progress()`` is connector code too: a
result that pickles to more than ``max_result_bytes`` is refused first, before any other work
(``result-too-large``: pickling is C, and a result of millions of points must not be walked in
Python only to be refused); what passes is turned into plain data and text that cannot raise
(``plain_data``, one walk that also bounds nesting and counts bytes), checked against the
operation's shape, and measured once more as the reply it becomes. The worker thread catches
everything; should it end all the same, its job fails at once and the next job gets a fresh thread.

This module is the actor: its process set-up, its messages, the parent checks and forwarding what
the worker posted. The worker thread is a ``worker.HostWorker`` the host holds, and calling the
connector and checking what it returns is ``connector_calls`` (plain Python, no Thespian).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from thespian.actors import Actor, ThespianWatch, WakeupMessage, WatchMessage

from servo_actors.actors.host.worker import (
    INVALID_RESULT,
    HostWorker,
)
from servo_actors.actors.linux import cgroups, descendants, processes
from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.results import ConnectorOutcome
from servo_actors.actors.transport.plain_data import describe_exception, type_name
from servo_actors.observability import log_relay

__all__ = ["ConnectorHost", "DRAIN_LIMIT", "FATAL_SIGNALS", "ForkedWith", "PARENT_CHECK_INTERVAL", "forking"]

PARENT_CHECK_INTERVAL = timedelta(seconds=10)
"""How often a host checks that its supervisor is still its parent. Only a fallback: the kernel
kills the host when the supervisor dies (PR_SET_PDEATHSIG, armed before the parent is checked
once more at HostInit), so this wakes rarely; every wakeup of every host costs CPU while idle."""
FATAL_SIGNALS = (
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGABRT,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
)
"""Signals that end a host process the default way (Thespian would otherwise catch them)."""
DRAIN_LIMIT = 64
"""Most events the actor thread forwards per wake-up (it wakes itself again for the rest)."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForkedWith:
    """What a host is for, known before it is forked (see ``forking``)."""

    spec: m.ChildSpec
    generation: int
    supervisor_pid: int
    private_fds: tuple[int, ...] = ()
    """The supervisor's own descriptors, closed by the host at once (a connector must not touch them)."""


_forked_with: ForkedWith | None = None
"""Set by the supervisor around its ``createActor`` (``forking``), so inherited by the fork."""


@contextlib.contextmanager
def forking(spec: m.ChildSpec, generation: int, private_fds: tuple[int, ...] = ()) -> Iterator[None]:
    """Around ``createActor(ConnectorHost)``: the forked host knows its spec from its first moment.

    It then moves into its cgroup and starts its connector at once, while its ``HostInit`` is on
    the way (which it still needs: to know it is wanted, and whom to answer). Joining a cgroup waits
    for the kernel (an RCU grace period, ~10 ms on a busy machine), and waiting for the HostInit
    takes about as long: done one after the other, they were most of a fresh connector's startup.
    A host forked without it (by a member agent) starts at its HostInit, as before.
    """
    global _forked_with
    _forked_with = ForkedWith(spec, generation, os.getpid(), private_fds)
    try:
        yield
    finally:
        _forked_with = None


class ConnectorHost(Actor):
    """Hosts one connector (see module docstring). Created and driven only by the Supervisor."""

    def __init__(self) -> None:
        super().__init__()
        # Runs in the fresh child process: own group first, before any connector code can fork.
        os.setpgrp()
        # What the fork inherited stays out of this process's garbage collections, so they do not
        # write to (and so copy) pages it shares with its parent: ~0.8 MB less private memory.
        gc.freeze()
        processes.set_parent_death_signal()
        # Thespian catches every signal in actor processes; a Python handler for SIGSEGV returns
        # to the faulting instruction forever. A connector that faults must simply die.
        for number in FATAL_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        self._parent_pid = os.getppid()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._spec: m.ChildSpec | None = None
        self._generation = 0
        self._supervisor: Any = None
        self._worker: HostWorker | None = None
        """The connector's worker thread, from the moment the host knows its spec (``_begin``)."""
        early = _forked_with
        if early is not None:
            if self._parent_pid != early.supervisor_pid:  # it died between fork and prctl
                os.killpg(0, signal.SIGKILL)
            for fd in early.private_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._begin(early.spec, early.generation)

    # ----- actor thread ------------------------------------------------------------------------

    def receiveMessage(self, msg: Any, sender: Any) -> ThespianWatch:
        # Never raise: Thespian would retry the message and then return it as poison.
        try:
            self._receive(msg, sender)
        except Exception:
            _log.exception("connector host %s failed on %s", self._name, type_name(msg))
        return ThespianWatch([self._wake_r])

    def _receive(self, msg: Any, sender: Any) -> None:
        if isinstance(msg, WatchMessage):
            self._drain()
        elif isinstance(msg, m.HostCall):
            self._call(msg)
        elif isinstance(msg, m.HostInit):
            self._init(msg, sender)
        elif isinstance(msg, m.HostShutdown):
            self._shutdown(msg)
        elif isinstance(msg, WakeupMessage):
            self._check_parent()

    def _init(self, msg: m.HostInit, sender: Any) -> None:
        if self._supervisor is not None:
            return
        if os.getppid() != msg.supervisor_pid:
            # The supervisor died between fork and prctl: nobody will ever kill this process.
            os.killpg(0, signal.SIGKILL)
        reply_to = getattr(msg, "reply_to", None)  # a member's host answers the leader's supervisor
        self._supervisor = reply_to if reply_to is not None else sender
        self.wakeupAfter(PARENT_CHECK_INTERVAL)
        if self._spec is None:
            self._begin(msg.spec, msg.generation)
        elif (self._spec.name, self._generation) != (msg.spec.name, msg.generation):
            os.killpg(0, signal.SIGKILL)  # forked for another child than it is told: never reused
        else:
            self._drain()  # its startup may be over already: answer now

    def _begin(self, spec: m.ChildSpec, generation: int) -> None:
        """Become ``spec``'s host: contain this process, then start the connector (on the worker)."""
        self._spec, self._generation = spec, generation
        self._worker = HostWorker(spec, generation, self._wake_w)
        log_relay.tag_records(spec.name, generation)  # its log lines name it in the servo's log
        # Before any connector code runs: whatever it starts stays in this host's cgroup, and
        # names this host in its environment.
        descendants.mark_environment()
        try:
            cgroups.contain_self(spec.descendant_tracking)
        except ValueError as exc:
            _log.warning("connector %s: %s; relying on the subreaper", self._name, exc)
        self._worker.startup()

    def _call(self, msg: m.HostCall) -> None:
        if msg.generation != self._generation:
            return
        worker = self._worker
        if worker is None or worker.calls is None or worker.busy is not None:
            busy = ConnectorOutcome(self._name, "failed", "busy", f"connector {self._name!r} is busy")
            self.send(self._supervisor, m.HostReply(msg.request_id, self._name, self._generation, busy))
            return
        worker.operate(msg)

    def _shutdown(self, msg: m.HostShutdown) -> None:
        if msg.generation != self._generation:
            return
        worker = self._worker
        if worker is None or worker.calls is None or worker.busy is not None:
            # The worker is stuck in the connector: shutdown() cannot run; the supervisor kills us.
            self.send(self._supervisor, m.HostShutdownDone(self._name, self._generation))
            return
        worker.shutdown()

    @property
    def _name(self) -> str:
        return self._spec.name if self._spec else "?"

    def _check_parent(self) -> None:
        self.wakeupAfter(PARENT_CHECK_INTERVAL)  # first: should anything below raise, checks go on
        if os.getppid() != self._parent_pid:
            os.killpg(0, signal.SIGKILL)
        worker = self._worker
        if worker is not None and worker.busy is not None and worker.thread_ended:
            # Cannot happen (the worker catches everything and says so if it ends): belt and braces.
            self._forward(worker.job_failed(worker.busy, "its worker thread ended"))

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        worker = self._worker
        if self._supervisor is None or worker is None:
            return  # started before its HostInit: what the worker posted waits for it (``_init``)
        progress = worker.take_progress()
        if progress is not None:
            self._forward(("progress", *progress))
        # Bounded: the worker posts one event per job, so more than this means another drain.
        for _ in range(DRAIN_LIMIT):
            event = worker.next_event()
            if event is None:
                return
            try:
                self._forward(event)
            except Exception:  # one event that cannot be sent must not hold up the others
                _log.exception("connector host %s could not forward %s", self._name, event[0])
        worker.wake()

    def _forward(self, event: tuple[Any, ...]) -> None:
        worker = self._worker
        assert worker is not None  # events come from it
        kind, name, gen = event[0], self._name, self._generation
        if kind == "progress":
            _, request_id, percent, message = event
            self.send(self._supervisor, m.HostProgress(request_id, name, gen, percent, message))
        elif kind == "reply":
            _, request_id, outcome, claimed = event
            worker.busy = None
            self._send_reply(m.HostReply(request_id, name, gen, outcome, claimed))
        elif kind == "ready":
            worker.busy = None
            self.send(self._supervisor, m.HostReady(name, gen, os.getpid()))
        elif kind == "startup-failed":
            self.send(self._supervisor, m.HostStartupFailed(name, gen, event[1]))
        elif kind == "shutdown-done":
            worker.busy = None
            self.send(self._supervisor, m.HostShutdownDone(name, gen))
        elif kind == "worker-ended":
            # Something escaped the worker's own handlers: the job it was on fails now, and the
            # next job gets a fresh worker thread.
            worker.forget_thread()
            if event[1] is not None and event[1] == worker.busy:
                self._forward(worker.job_failed(event[1], "its worker thread ended"))

    def _send_reply(self, reply: m.HostReply) -> None:
        try:
            self.send(self._supervisor, reply)
        except Exception as exc:  # the worker checked it pickles; should that change, say so
            message = f"connector {reply.name!r}: its result could not be sent ({describe_exception(exc)})"
            outcome = ConnectorOutcome(reply.name, "failed", INVALID_RESULT, message)
            self.send(self._supervisor, m.HostReply(reply.request_id, reply.name, reply.generation, outcome))
