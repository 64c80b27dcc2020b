"""Exit codes and unknown PIDs (issue 8, item 7): a reused PID never inherits a stale exit code,
and the fallback for a child whose PID was never learnt never kills a sibling's fresh process."""

from __future__ import annotations

import multiprocessing
import os

from servo_actors.actors.linux import processes
from servo_actors.actors.linux.descendants import unclaimed_children
from servo_actors.actors.linux.processes import ProcStat
from servo_actors.actors.transport import system


def test_an_exit_code_belongs_to_one_process_not_to_its_pid() -> None:
    system.record_exit_code(4242, 1000, 3)
    # The same PID, reused by a process that started later: nothing recorded for it.
    assert system.pop_exit_code(4242, 2000) is None
    assert system.pop_exit_code(4242, 1000) == 3
    assert system.pop_exit_code(4242, 1000) is None  # once
    # Without a start time nothing is kept, and nothing is found.
    system.record_exit_code(4243, None, 1)
    assert system.pop_exit_code(4243, None) is None


def test_exit_codes_kept_are_bounded() -> None:
    for pid in range(system.EXIT_CODES_KEPT + 10):
        system.record_exit_code(10_000_000 + pid, 1, 0)
    assert len(system.EXIT_CODES) <= system.EXIT_CODES_KEPT
    system.EXIT_CODES.clear()


def _exit_with(code: int) -> None:
    os._exit(code)


def test_the_patched_reaper_records_the_code_under_pid_and_start_time() -> None:
    from thespian.system.multiprocCommon import ChildInfo, MultiProcReplicator

    system._patch_thespian()
    child = multiprocessing.get_context("fork").Process(target=_exit_with, args=(7,))
    child.start()
    started = processes.start_ticks(child.pid)
    assert started is not None
    processes_gone = system.wait_until_gone([child.pid], timeout=5)  # a zombie counts as gone
    assert processes_gone == []
    info = ChildInfo(None, None, child, 0)
    assert MultiProcReplicator._checkChildLiveness(info) is False
    assert system.pop_exit_code(child.pid, started) == 7


def _stat(pid: int, state: str = "S") -> ProcStat:
    return ProcStat(pid, state, 1, pid, 1, 100)


def test_the_unknown_pid_fallback_spares_every_host_and_every_known_process() -> None:
    children = [_stat(10), _stat(11), _stat(12), _stat(13), _stat(14, "Z")]
    # 10: a generation's known PID; 11: a sibling's fresh host (PID not known to the rules, but
    # Thespian started it); 12 and 13: adopted orphans; 14: a zombie.
    assert unclaimed_children(children, claimed={10}, hosts={10, 11}) == [12, 13]
    # Which processes are hosts cannot be told: nothing is killed.
    assert unclaimed_children(children, claimed={10}, hosts=None) == []
