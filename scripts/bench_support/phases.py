"""The measurements, the same for both agents, every number taken from the optimizer's request log.

- ``cold_start``: exec of the agent -> its HELLO arriving (and its first WHATS_NEXT: ready);
- ``describes``: per command, WHATS_NEXT answered with a DESCRIBE -> its DESCRIPTION arriving;
  also the result answered -> the next WHATS_NEXT arriving, and the loop's time per command;
- ``cancels``: the ``cancel`` answer to a MEASURE progress post leaving -> the ``cancelled``
  result arriving, and -> the next WHATS_NEXT arriving (ready for the next command);
- ``idle_cpu``: user + system CPU time of every process of the agent over a window in the middle
  of a long SLEEP, as a percentage of one core.

Each phase first warms up or waits for the agent to be where it should be, so that what is
measured is the steady state, and checks afterwards that the agent did what was asked.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from bench_support.optimizer import BenchError, BenchOptimizer, History, events, is_result
from bench_support.processes import (
    AgentProcess,
    cpu_seconds,
    marked_pids,
    memory_kib,
    parent_pid,
    scheduler_seconds,
    thread_count,
)

SHORT_SLEEP = 0.2
"""SLEEP answered between phases: an idle agent polls again that often."""
COLD_START_TIMEOUT = 60.0
"""Seconds an agent may take from exec to its first WHATS_NEXT."""
PER_COMMAND_TIMEOUT = 1.0
"""Seconds allowed per DESCRIBE (and per cancel cycle, times CANCEL_CYCLE_FACTOR) before giving up."""
PHASE_MARGIN = 30.0
CANCEL_CYCLE_FACTOR = 5.0
CANCEL_MEASURE_SECONDS = 30.0
"""Length of each MEASURE to be cancelled: far longer than it lives (its first progress post is cancelled)."""
EXIT_AFTER_CANCEL = 10.0
"""Seconds given to a servox that exits by itself after a cancel before it is stopped."""
IDLE_SETTLE = 2.0
"""Seconds between the agent receiving its long SLEEP and the start of the CPU window."""
IDLE_SLEEP_MIN = 120.0
"""The long SLEEP: at least this, and longer than the window with margin; SIGTERM ends it."""

DESCRIBE = {"cmd": "DESCRIBE", "param": {}}
MEASURE = {
    "cmd": "MEASURE",
    "param": {"metrics": ["throughput"], "control": {"duration": CANCEL_MEASURE_SECONDS}},
}


class Agent(Protocol):
    name: str

    def start(self, connectors: str, optimizer: BenchOptimizer) -> AgentProcess: ...


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _cmd_uids_sent(entries: History, cmd: str) -> list[tuple[str, dict[str, Any]]]:
    """(cmd_uid, the WHATS_NEXT entry that carried it) for every ``cmd`` sent, in order."""
    return [
        (entry["reply"]["cmd_uid"], entry)
        for entry in events(entries, "WHATS_NEXT")
        if (entry.get("reply") or {}).get("cmd") == cmd
    ]


def _next_poll(entries: History, after: int) -> dict[str, Any] | None:
    """The first WHATS_NEXT after index ``after`` from the same agent process (no HELLO between)."""
    for entry in entries[after + 1 :]:
        if entry.get("event") == "HELLO":
            return None
        if entry.get("event") == "WHATS_NEXT":
            return entry
    return None


# --- cold start ---------------------------------------------------------------------------------


def cold_start(optimizer: BenchOptimizer, agent: Agent, samples: int, started: list[AgentProcess]) -> dict:
    """``samples`` fresh agents with the ``noop`` connectors, each stopped once it has polled."""
    optimizer.driver.idle_sleep = IDLE_SLEEP_MIN  # after HELLO the agent just sleeps; SIGTERM ends it
    hello_ms, ready_ms, exit_codes = [], [], []
    for _ in range(samples):
        mark, polls = optimizer.mark(), optimizer.driver.polls
        process = agent.start("noop", optimizer)
        started.append(process)
        try:
            optimizer.wait_until(
                lambda d, polls=polls: d.polls > polls, COLD_START_TIMEOUT, "HELLO and a poll", process
            )
        finally:
            exit_codes.append(process.stop())
        entries = optimizer.since(mark)
        hello_ms.append(_ms(events(entries, "HELLO")[0]["at"] - process.started_at))
        ready_ms.append(_ms(events(entries, "WHATS_NEXT")[0]["at"] - process.started_at))
    optimizer.driver.idle_sleep = SHORT_SLEEP
    return {"hello_ms": hello_ms, "first_poll_ms": ready_ms, "exit_codes": sorted(set(exit_codes))}


# --- per-command overhead -----------------------------------------------------------------------


def describes(optimizer: BenchOptimizer, process: AgentProcess, count: int, warmup: int) -> dict:
    """``warmup`` + ``count`` DESCRIBEs in a row to a running agent; the first ``warmup`` are not counted."""
    total = warmup + count
    mark, results_before = optimizer.mark(), optimizer.driver.results
    optimizer.driver.push([dict(DESCRIBE) for _ in range(total)])
    optimizer.wait_until(
        lambda d: d.results >= results_before + total and d.polled_after_result,
        PHASE_MARGIN + total * PER_COMMAND_TIMEOUT,
        f"{total} DESCRIPTIONs and a poll after them",
        process,
    )
    entries = optimizer.since(mark)
    sent = _cmd_uids_sent(entries, "DESCRIBE")[warmup:total]
    results = {
        entry["param"]["cmd_uid"]: i
        for i, entry in enumerate(entries)
        if entry.get("event") == "DESCRIPTION" and is_result(entry)
    }
    per_command, to_next_poll, statuses = [], [], set()
    for uid, poll in sent:
        if uid not in results:
            raise BenchError(f"DESCRIBE {uid} got no DESCRIPTION")
        result = entries[results[uid]]
        statuses.add(result["param"]["status"])
        per_command.append(_ms(result["at"] - poll["replied_at"]))
        following = _next_poll(entries, results[uid])
        if following is not None:
            to_next_poll.append(_ms(following["at"] - result["replied_at"]))
    last_poll = _next_poll(entries, results[sent[-1][0]])
    assert last_poll is not None  # done() waited for it
    first = sent[0][1]
    loop_ms = _ms(last_poll["at"] - first["at"]) / count
    return {
        "per_command_ms": per_command,
        "result_to_next_poll_ms": to_next_poll,
        "loop_per_command_ms": loop_ms,
        "statuses": sorted(statuses),
    }


# --- cancel -------------------------------------------------------------------------------------


def cancel_timings(entries: History) -> list[dict[str, Any]]:
    """Per progress post answered ``cancel``: -> ``cancelled`` result, -> next WHATS_NEXT (ms or None)."""
    result_of = {
        entry["param"].get("cmd_uid"): i
        for i, entry in enumerate(entries)
        if entry.get("event") == "MEASUREMENT" and is_result(entry)
    }
    samples = []
    for i, entry in enumerate(entries):
        param = entry.get("param") or {}
        if entry.get("event") != "MEASUREMENT" or "status" in param:
            continue
        if (entry.get("reply") or {}).get("status") != "cancel":
            continue
        answered, uid = entry["replied_at"], param.get("cmd_uid")
        result_index = result_of.get(uid)
        result = entries[result_index] if result_index is not None and result_index > i else None
        poll = _next_poll(entries, result_index if result is not None else i)
        samples.append(
            {
                "cmd_uid": uid,
                "to_cancelled_ms": _ms(result["at"] - answered) if result else None,
                "status": result["param"].get("status") if result else None,
                "reason": result["param"].get("reason") if result else None,
                "to_next_poll_ms": _ms(poll["at"] - answered) if poll else None,
            }
        )
    return samples


def cancels_in_one_process(optimizer: BenchOptimizer, process: AgentProcess, count: int) -> dict:
    """``count`` MEASUREs in a row to one agent, each cancelled at its first progress post."""
    mark, cancelled_before = optimizer.mark(), optimizer.driver.cancelled
    before = marked_pids(process.marker)
    optimizer.driver.cancel_on_progress = True
    optimizer.driver.push([dict(MEASURE) for _ in range(count)])
    try:
        optimizer.wait_until(
            lambda d: d.cancelled >= cancelled_before + count and d.polled_after_result,
            PHASE_MARGIN + count * PER_COMMAND_TIMEOUT * CANCEL_CYCLE_FACTOR,
            f"{count} cancelled MEASUREs and a poll after them",
            process,
        )
    finally:
        optimizer.driver.cancel_on_progress = False
    after = marked_pids(process.marker)
    samples = cancel_timings(optimizer.since(mark))
    return {
        "samples": samples,
        "process_count_before": len(before),
        "process_count_after": len(after),
        "came_back": sum(1 for s in samples if s["to_next_poll_ms"] is not None),
    }


def cancels_one_process_each(
    optimizer: BenchOptimizer, agent: Agent, count: int, started: list[AgentProcess]
) -> dict:
    """For an agent that exits after a cancel (servox 25.3.0): a fresh process per sample."""
    samples, exit_codes = [], []
    for _ in range(count):
        mark, cancelled_before = optimizer.mark(), optimizer.driver.cancelled
        optimizer.driver.cancel_on_progress = True
        optimizer.driver.push([dict(MEASURE)])
        process = agent.start("cancel", optimizer)
        started.append(process)
        try:
            optimizer.wait_until(
                lambda d, before=cancelled_before: d.cancelled > before,
                COLD_START_TIMEOUT + PER_COMMAND_TIMEOUT * CANCEL_CYCLE_FACTOR,
                "a cancelled result",
                process,
            )
            # It may come back and poll (the next-WHATS_NEXT figure), or exit, as 25.3.0 does.
            try:
                optimizer.wait_until(
                    lambda d: d.polled_after_result, EXIT_AFTER_CANCEL, "a poll after the cancel", process
                )
            except BenchError:
                pass
        finally:
            optimizer.driver.cancel_on_progress = False
            exited_by_itself = not process.running()
            exit_codes.append(process.stop())
        found = cancel_timings(optimizer.since(mark))
        for sample in found:
            sample["exited_by_itself"] = exited_by_itself
        samples.extend(found)
        optimizer.driver.queue.clear()
    return {
        "samples": samples,
        "exit_codes": sorted(set(exit_codes)),
        "came_back": sum(1 for s in samples if s["to_next_poll_ms"] is not None),
    }


# --- idle CPU -----------------------------------------------------------------------------------


def _roles(main: int, pids: list[int]) -> dict[int, str]:
    """Name each process of an agent by its place in the tree (servox has only ``main``).

    servo-actors' actor-system admin is daemonized, so its parent is not one of the agent's
    processes; the admin's children are the logger and the supervisor (the one with children);
    the supervisor's children are the connector hosts.
    """
    marked = set(pids)
    parents = {pid: parent_pid(pid) for pid in pids}
    has_children = {ppid for ppid in parents.values() if ppid in marked}
    roles = {pid: "actor" for pid in pids}
    roles[main] = "main"
    for pid in pids:
        if pid != main and parents[pid] not in marked:
            roles[pid] = "admin"
    for pid in pids:
        if roles.get(parents[pid]) == "admin":
            roles[pid] = "supervisor" if pid in has_children else "logger"
    for pid in pids:
        if roles.get(parents[pid]) == "supervisor":
            roles[pid] = "connector"
    return roles


def idle_cpu(optimizer: BenchOptimizer, process: AgentProcess, window: float) -> dict:
    """CPU of every process of the agent over ``window`` seconds in the middle of a long SLEEP."""
    sleep = max(IDLE_SLEEP_MIN, window + IDLE_SETTLE + PHASE_MARGIN)
    optimizer.driver.idle_sleep = sleep
    try:
        optimizer.wait_until(
            lambda d: d.last_sleep == sleep, PHASE_MARGIN, "the long SLEEP to go out", process
        )
        polls = optimizer.driver.polls
        time.sleep(IDLE_SETTLE)
        pids = marked_pids(process.marker)
        before = {pid: (cpu_seconds(pid), scheduler_seconds(pid)) for pid in pids}
        began = time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - began
        after = {pid: (cpu_seconds(pid), scheduler_seconds(pid)) for pid in marked_pids(process.marker)}
        memory = {pid: memory_kib(pid) for pid in marked_pids(process.marker)}
        polls_in_window = optimizer.driver.polls - polls
    finally:
        optimizer.driver.idle_sleep = SHORT_SLEEP
    if not process.running():
        raise BenchError(
            f"{process.agent} exited during the idle window; its log ends:\n{process.log_tail()}"
        )
    roles = _roles(process.pid, pids)
    per_process = []
    for pid in pids:
        if pid not in before or pid not in after or None in (*before[pid], *after[pid]):
            continue
        (ticks0, sched0), (ticks1, sched1) = before[pid], after[pid]
        per_process.append(
            {
                "pid": pid,
                "role": roles.get(pid, "actor"),
                "threads": thread_count(pid),
                "cpu_percent": 100.0 * (ticks1 - ticks0) / elapsed,
                "scheduler_percent": 100.0 * (sched1 - sched0) / elapsed,
                "pss_kib": (memory.get(pid) or {}).get("pss"),
                "rss_kib": (memory.get(pid) or {}).get("rss"),
            }
        )
    per_process.sort(key=lambda row: row["scheduler_percent"], reverse=True)
    return {
        "window_s": elapsed,
        "cpu_percent": sum(row["cpu_percent"] for row in per_process),
        "scheduler_percent": sum(row["scheduler_percent"] for row in per_process),
        "pss_mib": sum(row["pss_kib"] or 0 for row in per_process) / 1024,
        "rss_mib": sum(row["rss_kib"] or 0 for row in per_process) / 1024,
        "processes": per_process,
        "appeared": sorted(set(after) - set(before)),
        "vanished": sorted(set(before) - set(after)),
        "polls_in_window": polls_in_window,
    }
