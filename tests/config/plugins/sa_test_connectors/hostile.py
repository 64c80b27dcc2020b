"""A connector that hands its host the nastiest objects Python allows (tests/actors hostile tests).

Config: ``{operation: behaviour}`` for describe, measure, adjust, check and startup; an operation
without one behaves (one metric ``m``, one component ``c``). See BEHAVIOURS. With
``only_if_file: PATH``, the behaviours apply only while that file exists.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from servo_actors.connectors import Connector, ConnectorFailure

PROGRESS_THREADS = 4
PROGRESS_SECONDS = 0.3
PROGRESS_SEEN_BOUND = 30.0
"""Longest the storm goes on repeating its last valid value for a test that has not seen it."""
PROGRESS_SEEN_POLL = 0.05
DEEP = 5000


class Unprintable:
    """An object that cannot be turned into text, compared or hashed."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    def __hash__(self) -> int:
        raise RuntimeError("no hashing")

    def __bool__(self) -> bool:
        raise RuntimeError("no truth")

    def __float__(self) -> float:
        raise RuntimeError("no number")

    def __reduce__(self) -> Any:
        raise RuntimeError("no pickling")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class NamelessMeta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name for you")


class NamelessError(Exception, metaclass=NamelessMeta):
    def __str__(self) -> str:
        raise RuntimeError("nor a message")


class HashableUnprintable:
    """Usable as a dict key, but its str() and eq raise."""

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class ExplodingMapping(Mapping):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("no items")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("no iterating")

    def __len__(self) -> int:
        return 1

    def items(self) -> Any:
        raise RuntimeError("no items")


def _raise(exc: BaseException) -> Any:
    raise exc


def _checks_then_raise() -> Iterator[dict[str, Any]]:
    yield {"name": "first", "success": True, "message": "fine"}
    raise UnprintableError()


def _endless_checks() -> Iterator[dict[str, Any]]:
    while True:
        yield {"name": "again", "success": True, "message": "and again"}


def _recursive() -> dict[str, Any]:
    loop: dict[str, Any] = {"metrics": {}}
    loop["metrics"]["m"] = loop
    return loop


def _deep() -> dict[str, Any]:
    value: Any = {}
    for _ in range(DEEP):
        value = {"x": value}
    return {"metrics": {"m": value}}


def _progress_storm(ctx: tuple[Any, Mapping[str, Any]]) -> None:
    """Threads calling progress() with every kind of junk, while the operation runs; then one valid
    value, again and again until the test says it saw one (config ``progress_seen``: a file the
    test creates), for at most PROGRESS_SEEN_BOUND seconds.

    Repeated, because one valid value alone may never reach the test, by design: the host forwards
    only the latest value it drains (a busy machine may let it drain once in the storm, and then
    maybe thread 0's 0), and the supervisor sends at most one Progress per PROGRESS_INTERVAL,
    dropping a pending one when the operation's result comes first.
    """
    progress, config = ctx
    junk = [Unprintable(), "x" * 1_000_000, None, b"bytes", math.nan, {"a": 1}, 50]
    stop = time.monotonic() + PROGRESS_SECONDS

    def storm(index: int) -> None:
        while time.monotonic() < stop:
            for item in junk:
                progress(item, item)
                progress(index * 10, item)
                progress(Unprintable(), "never shown")

    threads = [threading.Thread(target=storm, args=(n,)) for n in range(PROGRESS_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PROGRESS_SECONDS * 20)
    seen = config.get("progress_seen")
    give_up = time.monotonic() + PROGRESS_SEEN_BOUND
    while True:
        progress(75, "the storm is over")
        if seen is None or os.path.exists(seen) or time.monotonic() > give_up:
            return
        time.sleep(PROGRESS_SEEN_POLL)


def _close_fds() -> None:
    """Close every descriptor but stdin, stdout and stderr (as a daemonising library does), then
    return at once: the host's channels to its supervisor are gone with them."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))


def _kill_the_worker_after_returning() -> None:
    """Make the host's worker thread die outside any handler: a trace function (this thread's)
    that raises when the host posts this operation's result."""

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "_post":
            raise RuntimeError("the worker thread is killed")

    sys.settrace(tracer)


BEHAVIOURS = {
    "kill_worker": lambda ctx: _kill_the_worker_after_returning(),
    "unprintable_exception": lambda ctx: _raise(UnprintableError()),
    "nameless_exception": lambda ctx: _raise(NamelessError()),
    "keyboard_interrupt": lambda ctx: _raise(KeyboardInterrupt()),
    "list": lambda ctx: ["not", "a", "mapping"],
    "unprintable_value": lambda ctx: {"metrics": {"m": Unprintable()}},
    "unprintable_key": lambda ctx: {"metrics": {HashableUnprintable(): 1}},
    "exploding_mapping": lambda ctx: ExplodingMapping(),
    "recursive": lambda ctx: _recursive(),
    "deep": lambda ctx: _deep(),
    "generator_raises": lambda ctx: _checks_then_raise(),
    "endless_checks": lambda ctx: _endless_checks(),
    "endless_value": lambda ctx: {"metrics": {"m": itertools.count()}},
    "check_not_a_list": lambda ctx: {"name": "x"},
    "weird_failure": lambda ctx: _raise(_weird_failure()),
    "huge_exit_code": lambda ctx: sys.exit(2**100),
    "empty_exception": lambda ctx: _raise(MemoryError()),
    "true_value": lambda ctx: {"metrics": {"m": {"unit": "count", "value": True}}, "annotations": {}},
    "close_fds": lambda ctx: _close_fds(),
    "progress_storm": lambda ctx: (_progress_storm(ctx), None)[1],
    # Over any limit under 2 MB, and not plain data where a walk would look first: the size is
    # what must be refused, before the result is walked.
    "huge_and_not_plain": lambda ctx: {"metrics": {"m": complex(1, 2)}, "annotations": {"a": "x" * 2**21}},
}


def _weird_failure() -> ConnectorFailure:
    failure = ConnectorFailure("placeholder", status="aborted", reason="odd")
    failure.message = Unprintable()  # type: ignore[assignment]
    failure.reason = Unprintable()  # type: ignore[assignment]
    return failure


class HostileConnector(Connector):
    """See the module docstring."""

    def _do(self, operation: str, default: Any, ctx: Any = None) -> Any:
        behaviour = (self.config or {}).get(operation)
        only_if_file = (self.config or {}).get("only_if_file")
        if behaviour is None or (only_if_file is not None and not os.path.exists(only_if_file)):
            return default
        return BEHAVIOURS[behaviour](ctx)

    def startup(self) -> None:
        self._do("startup", None)

    def describe(self) -> Any:
        default = {
            "components": {
                "c": {"settings": {"k": {"type": "range", "min": 0, "max": 9, "step": 1, "value": 1}}}
            },
            "metrics": {"m": {"unit": "count"}},
        }
        return self._do("describe", default)

    def measure(self, metrics: list[str], control: Any, progress: Any) -> Any:
        default = {"metrics": {"m": {"unit": "count", "value": 1.0}}, "annotations": {}}
        found = self._do("measure", default, (progress, self.config or {}))
        return default if found is None else found

    def adjust(self, components: dict[str, Any], control: Any, progress: Any) -> Any:
        return self._do("adjust", dict(components), progress)

    def check(self) -> Any:
        return self._do("check", [{"name": "alive", "success": True, "message": ""}])
