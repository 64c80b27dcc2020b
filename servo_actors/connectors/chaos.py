"""chaos: a connector that misbehaves on request, for drills and for the supervisor's tests.

Per operation (``startup``, ``describe``, ``measure``, ``adjust``, ``check``, ``shutdown``) a fault
can be configured; otherwise it behaves like a small real connector with the components, metrics
and values you give it. Everything it does is observable: measure's annotations carry its PID, how
many operations this process has served (fresh after every restart) and, with ``state_file``, how
many times any process of it started.

```yaml
- name: drill
  type: chaos
  config:
    faults:
      measure: {action: sleep, seconds: 600}     # hang in time.sleep (or: socket_read, busy)
      adjust: raise                               # shorthand for {action: raise}
      startup: {action: sleep, seconds: 2}        # start slowly, then carry on
    metrics: {throughput: {unit: rps}}
    values: {throughput: 42}
    components: {web: {settings: {replicas: {type: range, min: 1, max: 4, step: 1, value: 2}}}}
```

Actions: ``none``; ``sleep`` (time.sleep ``seconds``, then carry on); ``socket_read`` (a blocking
read that gets nothing for ``seconds``, then times out); ``busy`` (spin the CPU ``seconds``);
``raise`` (``exception``: ``message``); ``failure`` (ConnectorFailure with ``status``/``reason``);
``exit`` (``os._exit(exit_code)``); ``segfault``; ``ignore_sigterm`` (ignore SIGTERM, then sleep
``seconds``); ``allocate`` (hold ``megabytes`` MB, then carry on); ``subprocess`` (start a child
that sleeps ``seconds`` in this process group, then carry on; its PID is annotated and written to
``pid_file``); ``spawn_detached`` (start two processes that sleep ``seconds`` outside this
process's group and session: a child in a new session and a double-forked daemon whose parent
exits at once; both carry ``marker`` in their argv, then carry on); ``raise_unprintable`` (an
exception whose ``str()`` and ``repr()`` raise); ``huge_result`` (carry on, but put ``megabytes``
MB of text in measure's annotations and check's message); ``many_points`` (carry on, but measure
returns a series of ``points`` points per requested metric, every ``non_finite_every``-th of them
NaN when that is set: a large result, as a Prometheus range query over weeks gives). A fault with
``only_if_file`` applies only while that file exists.
"""

from __future__ import annotations

import builtins
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from servo_actors.config.fields import StrictModel
from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.durations import parse_duration
from servo_actors.errors import ConnectorError

log = logging.getLogger(__name__)

FOREVER = 3600.0
"""Default ``seconds`` of the hanging actions: far longer than any deadline, still bounded."""
OPERATIONS = ("startup", "describe", "measure", "adjust", "check", "shutdown")
SIG_IGN = 1
"""The C library's SIG_IGN handler value."""

Action = Literal[
    "none",
    "sleep",
    "socket_read",
    "busy",
    "raise",
    "failure",
    "exit",
    "segfault",
    "ignore_sigterm",
    "allocate",
    "subprocess",
    "spawn_detached",
    "raise_unprintable",
    "huge_result",
    "many_points",
]
MEGABYTE = 1024 * 1024
DETACHED_SLEEP = "import sys, time; time.sleep(float(sys.argv[1]))"
"""argv: seconds, marker."""
DOUBLE_FORK = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(float(sys.argv[1]))
    os._exit(0)
"""
"""argv: seconds, marker. Exits at once; its grandchild, in a new session, is nobody's child."""
DETACH_WAIT = 5.0
"""Seconds spawn_detached waits for the double fork's first process to exit."""


class UnprintableError(ConnectorError, RuntimeError):
    """An exception that cannot be turned into text (raise_unprintable)."""

    def __str__(self) -> str:
        raise RuntimeError("this exception refuses to be printed")

    def __repr__(self) -> str:
        raise RuntimeError("this exception refuses to be represented")


class Fault(StrictModel):
    action: Action = "none"
    seconds: float = FOREVER
    message: str = "chaos"
    exception: str = "RuntimeError"
    status: str = "failed"
    reason: str = "chaos"
    exit_code: int = 1
    megabytes: int = Field(64, ge=0)
    points: int = Field(100_000, ge=0)
    non_finite_every: int = Field(0, ge=0)
    pid_file: str | None = None
    only_if_file: str | None = None
    marker: str = "chaos-detached"

    @field_validator("seconds", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("exception")
    @classmethod
    def _builtin_exception(cls, value: str) -> str:
        found = getattr(builtins, value, None)
        if not (isinstance(found, type) and issubclass(found, Exception)):
            raise ValueError(f"{value!r} is not a built-in exception type")
        return value


class ChaosConfig(StrictModel):
    faults: dict[Literal["startup", "describe", "measure", "adjust", "check", "shutdown"], Fault] = Field(
        default_factory=dict
    )
    components: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    values: dict[str, float] = Field(default_factory=dict)
    state_file: str | None = None
    progress_steps: int = Field(4, ge=1)

    @field_validator("faults", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {op: {"action": fault} if isinstance(fault, str) else fault for op, fault in value.items()}
        return value


class ChaosConnector(Connector):
    """See the module docstring."""

    config_model = ChaosConfig
    config: ChaosConfig

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
        self._operations = 0
        self._ballast: list[bytearray] = []
        self._children: list[subprocess.Popen[bytes]] = []
        self._padding = ""
        self._points: tuple[int, int] | None = None
        self._components = {
            cname: {"settings": {k: dict(v) for k, v in (comp.get("settings") or {}).items()}}
            for cname, comp in self.config.components.items()
        }

    # ----- the connector API -------------------------------------------------------------------

    def startup(self) -> None:
        if self.config.state_file:
            with open(self.config.state_file, "a") as handle:
                handle.write(f"{os.getpid()}\n")
        self._fault("startup")

    def shutdown(self) -> None:
        self._fault("shutdown")

    def describe(self) -> dict[str, Any]:
        self._count()
        self._fault("describe")
        return {"components": self._components, "metrics": dict(self.config.metrics)}

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        self._count()
        progress(5, "measure started")
        self._fault("measure")
        steps = self.config.progress_steps
        for step in range(1, steps + 1):
            time.sleep(control.warmup / steps + control.duration / steps)
            progress(5 + 95 * step / steps, f"measured {step}/{steps}")
        now = int(time.time())
        measured = {
            name: {
                "unit": self.config.metrics.get(name, {}).get("unit", ""),
                "values": [{"id": self.name, "data": self._series(now, name)}],
            }
            for name in metrics
        }
        notes = self.annotations()
        if self._padding:
            notes[f"{self.name}.padding"] = self._padding
        return {"metrics": measured, "annotations": notes}

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        self._count()
        progress(5, "adjust started")
        self._fault("adjust")
        for cname, comp in components.items():
            for setting, value in (comp.get("settings") or {}).items():
                current = self._components.setdefault(cname, {"settings": {}})["settings"].setdefault(
                    setting, {}
                )
                current["value"] = value.get("value") if isinstance(value, dict) else value
        time.sleep(control.settlement)
        progress(100, "adjusted")
        return {name: self._components[name] for name in components if name in self._components}

    def check(self) -> list[dict[str, Any]]:
        self._count()
        self._fault("check")
        message = f"pid {os.getpid()}{self._padding}"
        return [{"name": f"{self.name} is alive", "success": True, "message": message}]

    def _series(self, now: int, name: str) -> list[list[float]]:
        value = self.config.values.get(name, float(self._operations))
        if self._points is None:
            return [[now, value]]
        points, non_finite_every = self._points
        start = now - points
        data: list[list[float]] = [[start + n, value + n % 7] for n in range(points)]
        if non_finite_every:
            for point in data[non_finite_every - 1 :: non_finite_every]:
                point[1] = float("nan")
        return data

    # ----- observable state --------------------------------------------------------------------

    def annotations(self) -> dict[str, str]:
        """What tests read to tell a fresh process from an old one."""
        notes = {
            f"{self.name}.pid": str(os.getpid()),
            f"{self.name}.operations": str(self._operations),
        }
        if self.config.state_file:
            notes[f"{self.name}.startups"] = str(len(Path(self.config.state_file).read_text().splitlines()))
        if self._children:
            notes[f"{self.name}.subprocess"] = str(self._children[-1].pid)
        return notes

    def _count(self) -> None:
        self._operations += 1

    # ----- faults ------------------------------------------------------------------------------

    def _fault(self, operation: str) -> None:
        fault = self.config.faults.get(operation)  # type: ignore[call-overload]  # a str key outside the Literal gives None
        if fault is None or fault.action == "none":
            return
        if fault.only_if_file and not os.path.exists(fault.only_if_file):
            return
        # Said before it happens: a drill's log shows which fault the next restart comes from.
        log.info("chaos: %s fault in %s (pid %d)", fault.action, operation, os.getpid())
        getattr(self, f"_do_{fault.action}")(fault)

    def _do_sleep(self, fault: Fault) -> None:
        time.sleep(fault.seconds)

    def _do_socket_read(self, fault: Fault) -> None:
        reader, writer = socket.socketpair()
        with reader, writer:
            reader.settimeout(fault.seconds)
            try:
                reader.recv(1)
            except TimeoutError:
                pass

    def _do_busy(self, fault: Fault) -> None:
        end = time.monotonic() + fault.seconds
        spins = 0
        while time.monotonic() < end:
            spins += 1

    def _do_raise(self, fault: Fault) -> None:
        raise getattr(builtins, fault.exception)(fault.message)

    def _do_failure(self, fault: Fault) -> None:
        raise ConnectorFailure(fault.message, status=fault.status, reason=fault.reason)

    def _do_exit(self, fault: Fault) -> None:
        sys.stdout.flush()
        os._exit(fault.exit_code)

    def _do_segfault(self, fault: Fault) -> None:
        ctypes.string_at(0)

    def _do_ignore_sigterm(self, fault: Fault) -> None:
        # Through the C library: Python's signal.signal() only works on the main thread, and the
        # disposition is per process anyway.
        ctypes.CDLL(None).signal(signal.SIGTERM, SIG_IGN)
        time.sleep(fault.seconds)

    def _do_allocate(self, fault: Fault) -> None:
        block = bytearray(fault.megabytes * 1024 * 1024)
        for offset in range(0, len(block), 4096):
            block[offset] = 1  # touch every page so the memory is really resident
        self._ballast.append(block)

    def _do_subprocess(self, fault: Fault) -> None:
        child = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({fault.seconds!r})"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._children.append(child)
        if fault.pid_file:
            Path(fault.pid_file).write_text(f"{child.pid}\n")

    def _do_spawn_detached(self, fault: Fault) -> None:
        args = [str(fault.seconds), fault.marker]
        quiet: dict[str, Any] = {
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.DEVNULL,
            "stderr": subprocess.DEVNULL,
        }
        child = subprocess.Popen(
            [sys.executable, "-c", DETACHED_SLEEP, *args], start_new_session=True, **quiet
        )
        self._children.append(child)
        subprocess.run([sys.executable, "-c", DOUBLE_FORK, *args], timeout=DETACH_WAIT, check=False, **quiet)
        if fault.pid_file:
            with open(fault.pid_file, "a") as handle:
                handle.write(f"{child.pid}\n")

    def _do_raise_unprintable(self, fault: Fault) -> None:
        raise UnprintableError(fault.message)

    def _do_huge_result(self, fault: Fault) -> None:
        self._padding = "x" * (fault.megabytes * MEGABYTE)

    def _do_many_points(self, fault: Fault) -> None:
        self._points = (fault.points, fault.non_finite_every)
