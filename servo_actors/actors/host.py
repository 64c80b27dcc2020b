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
with a periodic ``getppid`` check as a fallback.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import os
import pickle
import queue
import signal
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from thespian.actors import Actor, ThespianWatch, WakeupMessage, WatchMessage

from servo_actors.actors import messages as m
from servo_actors.actors import processes
from servo_actors.actors.results import ConnectorOutcome
from servo_actors.connectors.base import Connector, ConnectorFailure, Control

PARENT_CHECK_INTERVAL = timedelta(seconds=2)
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
NOT_INVOLVED = "not-involved"
"""Reason of an adjust part whose connector owns none of the requested components (dropped)."""

_log = logging.getLogger(__name__)


def to_plain(value: Any) -> Any:
    """Pydantic models and containers of them as plain dicts/lists in wire shape (picklable)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, dict):
        return {str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    return value


def _check_entry(item: Any) -> dict[str, Any]:
    plain = to_plain(item)
    if not isinstance(plain, dict):
        raise TypeError(f"a check result must be a mapping, not {type(plain).__name__}")
    return {
        "name": str(plain.get("name", "")),
        "success": bool(plain.get("success", False)),
        "message": str(plain.get("message") or ""),
    }


def connector_class(spec: m.ChildSpec) -> type[Connector]:
    """The class of ``spec``: by the import path the servo resolved (already imported, as the host
    is forked from it), else by resolving the type (which scans installed entry points: slow)."""
    if spec.import_path:
        module_name, _, qualname = spec.import_path.partition(":")
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
        return found
    from servo_actors.config.connector_types import resolve_connector_type

    return resolve_connector_type(spec.type)


def build_connector(spec: m.ChildSpec) -> Connector:
    """The connector of ``spec``, its config validated by the class's model when it has one."""
    cls = connector_class(spec)
    config = cls.config_model.model_validate(spec.config) if cls.config_model else dict(spec.config)
    return cls(spec.name, config)


class _ConnectorCalls:
    """What the worker thread does for each operation: plain Python, no actor state."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector
        self._description: dict[str, Any] | None = None

    def description(self) -> dict[str, Any]:
        """The connector's describe() of this process (cached: ownership of metrics and components)."""
        if self._description is None:
            described = to_plain(self.connector.describe()) or {}
            self._description = {
                "components": dict(described.get("components") or {}),
                "metrics": dict(described.get("metrics") or {}),
            }
        return self._description

    def run(
        self, call: m.HostCall, progress: Callable[..., None]
    ) -> tuple[dict[str, Any], tuple[str, ...], str]:
        """``(data, claimed components, reason)`` of one operation; exceptions propagate."""
        if call.operation == "describe":
            self._description = None
            return self.description(), (), "success"
        if call.operation == "measure":
            owned = list(self.description()["metrics"])
            wanted = owned if call.metrics is None else [name for name in call.metrics if name in owned]
            measured = to_plain(self.connector.measure(wanted, call.control or Control(), progress)) or {}
            metrics = {k: v for k, v in (measured.get("metrics") or {}).items() if k in wanted}
            return {"metrics": metrics, "annotations": dict(measured.get("annotations") or {})}, (), "success"
        if call.operation == "adjust":
            owned = self.description()["components"]
            mine = {name: value for name, value in (call.components or {}).items() if name in owned}
            if not mine:
                return {"components": {}}, (), NOT_INVOLVED
            adjusted = to_plain(self.connector.adjust(mine, call.control or Control(), progress)) or {}
            return {"components": dict(adjusted)}, tuple(mine), "success"
        if call.operation == "check":
            return {"checks": [_check_entry(item) for item in (self.connector.check() or [])]}, (), "success"
        raise ValueError(f"unknown operation {call.operation!r}")


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
        self._events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._spec: m.ChildSpec | None = None
        self._generation = 0
        self._supervisor: Any = None
        self._calls: _ConnectorCalls | None = None
        self._busy: str | None = None
        self._work: queue.SimpleQueue[Callable[[], tuple[Any, ...]]] | None = None

    # ----- actor thread ------------------------------------------------------------------------

    def receiveMessage(self, msg: Any, sender: Any) -> ThespianWatch:
        # Never raise: Thespian would retry the message and then return it as poison.
        try:
            self._receive(msg, sender)
        except Exception:
            _log.exception("connector host %s failed on %r", self._name, msg)
        return ThespianWatch([self._wake_r])

    @property
    def _name(self) -> str:
        return self._spec.name if self._spec else "?"

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
        if self._spec is not None:
            return
        if os.getppid() != msg.supervisor_pid:
            # The supervisor died between fork and prctl: nobody will ever kill this process.
            os.killpg(0, signal.SIGKILL)
        self._spec, self._generation, self._supervisor = msg.spec, msg.generation, sender
        self.wakeupAfter(PARENT_CHECK_INTERVAL)
        self._start_worker("startup", self._startup_work)

    def _call(self, msg: m.HostCall) -> None:
        if msg.generation != self._generation:
            return
        if self._calls is None or self._busy is not None:
            busy = ConnectorOutcome(self._name, "failed", "busy", f"connector {self._name!r} is busy")
            self.send(self._supervisor, m.HostReply(msg.request_id, self._name, self._generation, busy))
            return
        self._start_worker(msg.request_id, lambda: self._operation_work(msg))

    def _shutdown(self, msg: m.HostShutdown) -> None:
        if msg.generation != self._generation:
            return
        if self._calls is None or self._busy is not None:
            # The worker is stuck in the connector: shutdown() cannot run; the supervisor kills us.
            self.send(self._supervisor, m.HostShutdownDone(self._name, self._generation))
            return
        self._start_worker("shutdown", self._shutdown_work)

    def _check_parent(self) -> None:
        if os.getppid() != self._parent_pid:
            os.killpg(0, signal.SIGKILL)
        self.wakeupAfter(PARENT_CHECK_INTERVAL)

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        events: list[tuple[Any, ...]] = []
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                break
        # Coalesce: of a burst of progress calls only the latest is worth a message.
        last_progress = max((i for i, event in enumerate(events) if event[0] == "progress"), default=-1)
        for index, event in enumerate(events):
            if event[0] != "progress" or index == last_progress:
                self._forward(event)

    def _forward(self, event: tuple[Any, ...]) -> None:
        kind, name, gen = event[0], self._name, self._generation
        if kind == "progress":
            _, request_id, percent, message = event
            self.send(self._supervisor, m.HostProgress(request_id, name, gen, percent, message))
        elif kind == "reply":
            _, request_id, outcome, claimed = event
            self._busy = None
            self.send(self._supervisor, m.HostReply(request_id, name, gen, outcome, claimed))
        elif kind == "ready":
            self._busy = None
            self.send(self._supervisor, m.HostReady(name, gen, os.getpid()))
        elif kind == "startup-failed":
            self.send(self._supervisor, m.HostStartupFailed(name, gen, event[1]))
        elif kind == "shutdown-done":
            self._busy = None
            self.send(self._supervisor, m.HostShutdownDone(name, gen))

    # ----- worker thread -----------------------------------------------------------------------

    def _start_worker(self, label: str, work: Callable[[], tuple[Any, ...]]) -> None:
        """Hand ``work`` to the worker thread (started on first use; one per process, for good)."""
        self._busy = label
        if self._work is None:
            self._work = queue.SimpleQueue()
            threading.Thread(target=self._worker, args=(self._work,), name="connector", daemon=True).start()
        self._work.put(work)

    def _worker(self, jobs: queue.SimpleQueue[Callable[[], tuple[Any, ...]]]) -> None:
        while True:
            work = jobs.get()
            try:
                event = work()
            except SystemExit as exc:
                # A connector that calls sys.exit(code) ends its process with that code; 0 is a
                # normal exit (a transient connector then stays down).
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                os._exit(code)
            self._post(event)

    def _post(self, event: tuple[Any, ...]) -> None:
        self._events.put(event)
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"!")

    def _startup_work(self) -> tuple[Any, ...]:
        assert self._spec is not None
        try:
            connector = build_connector(self._spec)
            connector.startup()
        except SystemExit:
            raise
        except BaseException as exc:  # anything a plugin raises is its failure, reported by name
            return ("startup-failed", f"{type(exc).__name__}: {exc}")
        self._calls = _ConnectorCalls(connector)
        return ("ready",)

    def _shutdown_work(self) -> tuple[Any, ...]:
        assert self._calls is not None
        with contextlib.suppress(Exception):  # best effort: the process is killed next anyway
            self._calls.connector.shutdown()
        return ("shutdown-done",)

    def _operation_work(self, call: m.HostCall) -> tuple[Any, ...]:
        assert self._calls is not None
        name = self._name

        def progress(percent: float = 0.0, message: str = "") -> None:
            try:
                value = min(100.0, max(0.0, float(percent)))
            except (TypeError, ValueError):
                return
            self._post(("progress", call.request_id, value, str(message)))

        claimed: tuple[str, ...] = ()
        try:
            data, claimed, reason = self._calls.run(call, progress)
            outcome = ConnectorOutcome(name, "ok", reason, None, data)
        except ConnectorFailure as failure:
            outcome = ConnectorOutcome(
                name, failure.status, failure.reason, f"connector {name!r}: {failure.message}"
            )
        except SystemExit:
            raise
        except BaseException as exc:  # a connector bug must not take the host's reply with it
            outcome = ConnectorOutcome(
                name,
                "failed",
                "connector-error",
                f"connector {name!r} raised {type(exc).__name__} in {call.operation}: {exc}",
            )
        try:
            pickle.dumps(outcome)
        except Exception as exc:  # caught here, the part fails by name instead of timing out
            outcome = ConnectorOutcome(
                name,
                "failed",
                "connector-error",
                f"connector {name!r} returned data that cannot be sent: {exc}",
            )
        return ("reply", call.request_id, outcome, claimed)
