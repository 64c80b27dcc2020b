"""Exit codes and unknown PIDs (issue 8, item 7): a reused PID never inherits a stale exit code,
and the fallback for a child whose PID was never learnt never kills a sibling's fresh process."""

from __future__ import annotations

import multiprocessing
import os
import signal
from types import SimpleNamespace

from servo_actors.actors.linux import processes
from servo_actors.actors.linux.descendants import unclaimed_children
from servo_actors.actors.linux.processes import ProcStat
from servo_actors.actors.transport import child_actors, system


def test_an_exit_code_belongs_to_one_process_not_to_its_pid() -> None:
    child_actors.record_exit_code(4242, 1000, 3)
    # The same PID, reused by a process that started later: nothing recorded for it.
    assert child_actors.pop_exit_code(4242, 2000) is None
    assert child_actors.pop_exit_code(4242, 1000) == 3
    assert child_actors.pop_exit_code(4242, 1000) is None  # once
    # Without a start time nothing is kept, and nothing is found.
    child_actors.record_exit_code(4243, None, 1)
    assert child_actors.pop_exit_code(4243, None) is None


def test_exit_codes_kept_are_bounded() -> None:
    for pid in range(child_actors.EXIT_CODES_KEPT + 10):
        child_actors.record_exit_code(10_000_000 + pid, 1, 0)
    assert len(child_actors.EXIT_CODES) <= child_actors.EXIT_CODES_KEPT
    child_actors.EXIT_CODES.clear()


def _exit_with(code: int) -> None:
    os._exit(code)


def test_the_patched_reaper_records_the_code_under_pid_and_start_time() -> None:
    from thespian.system.multiprocCommon import ChildInfo, MultiProcReplicator

    system.patch_thespian()
    child = multiprocessing.get_context("fork").Process(target=_exit_with, args=(7,))
    child.start()
    started = processes.start_ticks(child.pid)
    assert started is not None
    processes_gone = system.wait_until_gone([child.pid], timeout=5)  # a zombie counts as gone
    assert processes_gone == []
    info = ChildInfo(None, None, child, 0)
    assert MultiProcReplicator._checkChildLiveness(info) is False
    assert child_actors.pop_exit_code(child.pid, started) == 7


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_child_reaped_by_the_next_fork_still_has_its_exit_code() -> None:
    """multiprocessing reaps every finished child when it starts another (Process.start polls them):
    a host that crashed just before the supervisor forked a fresh one is gone, out of waitid's
    reach and unrecorded; its Process object (Thespian's ChildInfo) still says how it ended.
    Before this, the part's message said 'exited' instead of 'killed by SIGSEGV' (1 run in ~30
    of test_fault_in_each_operation[segfault] under load)."""
    from thespian.system.multiprocCommon import ChildInfo

    context = multiprocessing.get_context("fork")
    crashed = context.Process(target=_segfault)
    crashed.start()
    assert system.wait_until_gone([crashed.pid], timeout=5) == []  # a zombie, not yet reaped
    fresh = context.Process(target=_exit_with, args=(0,))
    fresh.start()  # reaps the zombie on its way
    fresh.join(5)
    assert processes.exit_status_nowait(crashed.pid) is None  # reaped: waitid knows nothing
    actor = SimpleNamespace(_myRef=SimpleNamespace(_child_procs=[ChildInfo(None, None, crashed, 0)]))
    assert child_actors.reaped_exit_code(actor, crashed.pid) == -signal.SIGSEGV
    assert child_actors.reaped_exit_code(actor, fresh.pid) is None  # not one of this actor's children
    assert child_actors.reaped_exit_code(SimpleNamespace(), crashed.pid) is None  # internals not as expected


def test_a_host_is_reaped_only_by_thespian_whose_reaper_records_its_code() -> None:
    """``child_pid`` takes the host's Process out of multiprocessing's list of children, so the
    next fork leaves the crashed host a zombie, for Thespian's (patched, recording) reaper."""
    from thespian.system.multiprocCommon import ChildInfo, MultiProcReplicator

    system.patch_thespian()
    context = multiprocessing.get_context("fork")
    crashed = context.Process(target=_segfault)
    crashed.start()
    address = object()
    info = ChildInfo(address, None, crashed, 0)
    actor = SimpleNamespace(_myRef=SimpleNamespace(_child_procs=[info]))
    assert child_actors.child_pid(actor, address) == crashed.pid
    started = processes.start_ticks(crashed.pid)
    assert system.wait_until_gone([crashed.pid], timeout=5) == []  # a zombie
    fresh = context.Process(target=_exit_with, args=(0,))
    fresh.start()
    fresh.join(5)
    assert processes.exit_status_nowait(crashed.pid) == -signal.SIGSEGV  # still there to be read
    assert MultiProcReplicator._checkChildLiveness(info) is False
    assert child_actors.pop_exit_code(crashed.pid, started) == -signal.SIGSEGV


def _stat(pid: int, state: str = "S") -> ProcStat:
    return ProcStat(pid, state, 1, pid, 1, 100)


def test_the_unknown_pid_fallback_spares_every_host_and_every_known_process() -> None:
    children = [_stat(10), _stat(11), _stat(12), _stat(13), _stat(14, "Z")]
    # 10: a generation's known PID; 11: a sibling's fresh host (PID not known to the rules, but
    # Thespian started it); 12 and 13: adopted orphans; 14: a zombie.
    assert unclaimed_children(children, claimed={10}, hosts={10, 11}) == [12, 13]
    # Which processes are hosts cannot be told: nothing is killed.
    assert unclaimed_children(children, claimed={10}, hosts=None) == []
