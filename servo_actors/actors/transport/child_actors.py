"""A parent actor's children as Thespian keeps them: their PIDs, their exit codes, and forgetting
the ones that are gone.

Apart from starting and killing the system (``system``): these read (and prune) the bookkeeping
Thespian 4.0.1 keeps inside a parent actor, with ``getattr`` so that other internals make them
no-ops instead of errors, and import no Thespian. The patched reaper (``system.patch_thespian``)
fills ``EXIT_CODES`` through ``record_exit_code``; the supervisor and a member read them.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
from collections import OrderedDict
from typing import Any

__all__ = [
    "EXIT_CODES",
    "EXIT_CODES_KEPT",
    "child_pid",
    "forget_child",
    "pop_exit_code",
    "reaped_exit_code",
    "record_exit_code",
    "tracked_child_addresses",
]

EXIT_CODES_KEPT = 256
"""Exit codes kept at most (oldest dropped first): each is normally asked for within moments."""
EXIT_CODES: OrderedDict[tuple[int, int], int] = OrderedDict()
"""(PID, start ticks) -> exit code of child actors this process reaped (filled by the patched
Thespian reaper). The start time (``/proc/PID/stat`` field 22, read while the child is a zombie)
makes the key name one process for good: a reused PID never inherits a stale exit code."""


def record_exit_code(pid: int, started: int | None, code: int) -> None:
    """Keep the exit code of child ``pid`` that started at ``started`` (start ticks); without a
    start time nothing is kept, as it could not be told from a later process with the same PID."""
    if started is None:
        return
    EXIT_CODES[(pid, started)] = code
    while len(EXIT_CODES) > EXIT_CODES_KEPT:
        EXIT_CODES.popitem(last=False)


def pop_exit_code(pid: int | None, started: int | None) -> int | None:
    """The recorded exit code of the child ``pid`` that started at ``started`` (once), or None."""
    if pid is None or started is None:
        return None
    return EXIT_CODES.pop((pid, started), None)


def forget_child(actor: Any, address: Any) -> None:
    """Drop Thespian's bookkeeping of a child actor that is gone, so a long-lived parent stays small.

    Thespian keeps every child address it ever created (``_managed`` "never shrinks. Ever.", and
    ``_children`` only shrinks on a ChildActorExited it sometimes misses): ~1 KB per spawn, which a
    servo that cancels for months would feel. The slot is set to None rather than removed, so the
    instance numbers of live children stay valid. Call only after Thespian has had its chance to
    handle the child's exit. A no-op when the internals are not as Thespian 4.0.1 has them.
    """
    manager = getattr(actor, "_myRef", None)
    details = getattr(address, "addressDetails", None)
    index = getattr(details, "addressInstanceNum", None)
    managed = getattr(getattr(manager, "_addrManager", None), "_managed", None)
    if manager is None or index is None or not isinstance(managed, list) or not 0 <= index < len(managed):
        return
    useable = managed[index]
    useable_details = getattr(useable, "addressDetails", None)

    def is_this_child(candidate: Any) -> bool:
        # Thespian's own address comparisons raise across address kinds: compare like with like.
        found = getattr(candidate, "addressDetails", None)
        if type(found) is type(details):
            return getattr(found, "addressInstanceNum", None) == index
        return (
            useable_details is not None and type(found) is type(useable_details) and found == useable_details
        )

    children = getattr(manager, "_children", None)
    if isinstance(children, list):
        manager._children = [child for child in children if not is_this_child(child)]
    managed[index] = None


def reaped_exit_code(actor: Any, pid: int | None) -> int | None:
    """The exit code of ``actor``'s child ``pid`` as its ``multiprocessing.Process`` keeps it, or None.

    ``multiprocessing`` reaps every finished child whenever the process starts another one
    (``Process.start`` polls them all first): a child that died just before the supervisor forked a
    fresh host is then gone, unrecorded (``record_exit_code`` only sees Thespian's own liveness
    checks) and out of ``waitid``'s reach; only its Process object still knows how it ended.
    """
    if pid is None:
        return None
    manager = getattr(actor, "_myRef", None)
    for info in getattr(manager, "_child_procs", None) or ():
        proc = getattr(info, "childProc", None)
        if getattr(proc, "pid", None) == pid:
            popen = getattr(proc, "_popen", None)
            code = getattr(popen, "returncode", None)  # set once reaped; no wait here
            if isinstance(code, int):
                return code
    return None


def child_pid(actor: Any, address: Any) -> int | None:
    """The PID of the child actor ``actor`` just created at ``address``, or None if not found.

    Thespian forks the child inside ``createActor`` and keeps its ``multiprocessing.Process``; the
    PID is known at once, before the child has run a line of its own, so it can be killed from
    the first moment.

    It also takes the child's Process out of ``multiprocessing``'s own list of children: that list
    is polled, and every finished child in it reaped, whenever this process starts another one, so
    a host that crashed just before the next fork would be reaped there, its exit code seen by
    nobody. Thespian's liveness check (patched to record the code) is then the only reaper.
    """
    manager = getattr(actor, "_myRef", None)
    for info in getattr(manager, "_child_procs", None) or ():
        if getattr(info, "childAddr", None) is address:
            proc = getattr(info, "childProc", None)
            with contextlib.suppress(Exception):  # internals not as in CPython 3.11-3.13
                multiprocessing.process._children.discard(proc)  # type: ignore[attr-defined]  # private, stable since 3.4
            return getattr(proc, "pid", None)
    return None


def tracked_child_addresses(actor: Any) -> int:
    """How many child addresses Thespian holds for ``actor`` (see ``forget_child``); 0 if unknown."""
    manager = getattr(actor, "_myRef", None)
    managed = getattr(getattr(manager, "_addrManager", None), "_managed", None)
    if not isinstance(managed, list):
        return 0
    return sum(1 for entry in managed if entry is not None)
