"""Benchmark the servo's own observability: what each metric and log line costs per command.

    python scripts/bench_observability.py              # full run, about 3 minutes; writes BENCHMARKS.md
    python scripts/bench_observability.py --quick --no-write

Three measurements:

- **per event** (in this process): each hook of ``observability.events`` as the runner, the
  runtime and the client call it, with metrics off and on (``events.activate``), best of several
  repeats of many calls; the log lines at the servo's default level (info) go to a JSON handler
  writing to /dev/null, as they would to stderr;
- **per command** (in this process): the hooks one DESCRIBE and one MEASURE (with its progress
  posts) make, in order, and one scrape of /metrics (``generate_latest``);
- **end to end**: a real ``servo-actors run`` with four no-op connectors, DESCRIBEs in a row, with
  metrics off and on in alternating rounds (bench_loop's ``describes`` phase: WHATS_NEXT answered
  -> DESCRIPTION received, from the optimizer's request log), and the CPU time of the servo's main
  process per command.

Prints the numbers and writes the section between the bench_observability markers of
BENCHMARKS.md. Every process it starts is stopped by PID and must leave nothing behind.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_support import phases
from bench_support.agents import ServoActorsAgent
from bench_support.optimizer import BenchError, BenchOptimizer
from bench_support.processes import cpu_seconds
from bench_support.report import load_average, machine, percentile, write_section
from prometheus_client import generate_latest

from servo_actors.actors.rules import messages as m
from servo_actors.actors.rules.restart_ledger import RestartLedger
from servo_actors.actors.rules.results import ConnectorOutcome, aggregate
from servo_actors.logs import JsonFormatter
from servo_actors.observability import events
from servo_actors.observability.health import HealthState
from servo_actors.observability.registry import ServoMetrics
from servo_actors.protocol.commands import OptimizerStatus

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_observability:start -->", "<!-- bench_observability:end -->")
COUNTS = {
    "full": {"calls": 20_000, "repeats": 7, "rounds": 3, "describes": 150, "warmup": 10},
    "quick": {"calls": 3_000, "repeats": 3, "rounds": 1, "describes": 50, "warmup": 5},
}
CONNECTORS = ("noop1", "noop2", "noop3", "noop4")
PROGRESS_POSTS = 5
"""Progress posts of the MEASURE whose hooks are timed (a 1 s MEASURE at a 0.2 s interval)."""

OK = OptimizerStatus(status="ok")
CHILDREN = tuple(m.ChildStatus(name, "ready", 1000 + i, i + 1, 0) for i, name in enumerate(CONNECTORS))
DONE = m.Done("describe-1", aggregate("describe", [ConnectorOutcome(name) for name in CONNECTORS]))
PROGRESS = m.Progress("measure-1", 50.0, "", "noop1")


def _log(message: str) -> None:
    print(f"bench_observability: {message}", file=sys.stderr, flush=True)


# ----- in this process ---------------------------------------------------------------------------


def quiet_json_logging() -> Callable[[], None]:
    """Info lines as JSON to /dev/null (the servo's default level and format); returns the undo."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    sink = open(os.devnull, "w")  # noqa: SIM115 (closed by the undo)
    handler = logging.StreamHandler(sink)
    handler.setFormatter(JsonFormatter())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)

    def undo() -> None:
        root.handlers[:] = handlers
        root.setLevel(level)
        sink.close()

    return undo


def hooks() -> dict[str, Callable[[], None]]:
    """One call of each event, as the servo makes it (``answer`` as the client's watcher does)."""
    ledger = RestartLedger(events.connector_restarted, events.escalated)
    ledger.seen(m.Ready("start-1", CHILDREN, 10, 10))
    status = m.Status("ping-1", CHILDREN, 10, 10, None)
    result = {"status": "ok", "reason": "success", "cmd_uid": "c1"}
    progress = {"progress": 50, "runtime": 1.0, "cmd_uid": "c1"}
    return {
        "command received (logged)": lambda: events.command_received("DESCRIBE", "c1"),
        "result posted (logged)": lambda: events.answer("DESCRIPTION", result, OK),
        "progress answered ok": lambda: events.answer("MEASUREMENT", progress, OK),
        "exchange with the optimizer": lambda: events.exchange("WHATS_NEXT", 200),
        "operation finished": lambda: events.operation_finished("describe", 0.004),
        "supervisor message (loop turned)": events.actor_system_answered,
        "restart ledger: a listing of 4 connectors": lambda: ledger.seen(status),
        "restart ledger: a result": lambda: ledger.seen(DONE),
        "connector restarted (logged)": lambda: events.connector_restarted("noop1", "cancel", 5, 1234),
    }


def describe_hooks() -> None:
    """What one DESCRIBE costs the servo in hooks: poll, command, begin/Done, result post."""
    events.exchange("WHATS_NEXT", 200)
    events.command_received("DESCRIBE", "c1")
    events.actor_system_answered()
    events.operation_finished("describe", 0.004)
    events.exchange("DESCRIPTION", 200)
    events.answer("DESCRIPTION", {"status": "ok", "reason": "success", "cmd_uid": "c1"}, OK)


def measure_hooks() -> None:
    """One MEASURE: as a DESCRIBE, plus progress messages, posts and their answers."""
    events.exchange("WHATS_NEXT", 200)
    events.command_received("MEASURE", "c2")
    for _ in range(PROGRESS_POSTS):
        events.actor_system_answered()  # a Progress message
        events.exchange("MEASUREMENT", 200)
        events.answer("MEASUREMENT", {"progress": 50, "runtime": 1.0, "cmd_uid": "c2"}, OK)
    events.actor_system_answered()
    events.operation_finished("measure", 1.0)
    events.exchange("MEASUREMENT", 200)
    events.answer("MEASUREMENT", {"status": "ok", "reason": "success", "cmd_uid": "c2"}, OK)


def in_process(calls: int, repeats: int) -> dict[str, Any]:
    """Microseconds of this thread's CPU per call (not wall time: other processes on a shared
    machine do not count), metrics off and on interleaved repeat by repeat, the least of each kept."""
    undo = quiet_json_logging()
    metrics = ServoMetrics()
    metrics.connectors(CONNECTORS)
    health = HealthState(180.0)
    calls_of = {
        **{name: (call, calls) for name, call in hooks().items()},
        "DESCRIBE": (describe_hooks, calls // 4),
        f"MEASURE ({PROGRESS_POSTS} progress posts)": (measure_hooks, calls // 10),
    }
    best: dict[str, dict[str, float]] = {name: {"off": float("inf"), "on": float("inf")} for name in calls_of}
    try:
        for _ in range(repeats):
            for state in ("off", "on"):
                if state == "on":
                    events.activate(metrics, health)
                else:
                    events.deactivate()
                for name, (call, number) in calls_of.items():
                    seconds = timeit.timeit(call, number=number, timer=time.thread_time) / number
                    best[name][state] = min(best[name][state], seconds * 1e6)
        render = lambda: generate_latest(metrics.registry)  # noqa: E731
        scrape = min(timeit.repeat(render, number=50, repeat=repeats, timer=time.thread_time)) / 50
        scrape_bytes = len(generate_latest(metrics.registry))
    finally:
        events.deactivate()
        undo()
    commands = [name for name in calls_of if name.startswith(("DESCRIBE", "MEASURE"))]
    return {
        "hooks": {name: costs for name, costs in best.items() if name not in commands},
        "commands": {name: best[name] for name in commands},
        "scrape_ms": scrape * 1e3,
        "scrape_bytes": scrape_bytes,
    }


# ----- end to end ----------------------------------------------------------------------------------


def end_to_end(workdir: Path, rounds: int, describes: int, warmup: int) -> dict[str, Any]:
    """Alternating rounds of DESCRIBEs with metrics off and on: per command ms, main-process CPU."""
    optimizer = BenchOptimizer(phases.SHORT_SLEEP).start()
    samples: dict[str, dict[str, list[float]]] = {
        state: {"per_command_ms": [], "cpu_us_per_command": []} for state in ("off", "on")
    }
    leaked: list[int] = []
    try:
        for round_number in range(rounds):
            for state in ("off", "on"):
                _log(f"round {round_number + 1}/{rounds}, metrics {state}: {warmup} + {describes} DESCRIBEs")
                agent = ServoActorsAgent(workdir, "info", metrics=state == "on")
                polls = optimizer.driver.polls
                process = agent.start("noop", optimizer)
                try:
                    optimizer.wait_until(
                        lambda d, before=polls: d.polls > before, phases.COLD_START_TIMEOUT, "a poll", process
                    )
                    phases.describes(optimizer, process, warmup, 0)  # warm up, not counted
                    cpu_before = cpu_seconds(process.pid) or 0.0
                    found = phases.describes(optimizer, process, describes, 0)
                    cpu_after = cpu_seconds(process.pid) or 0.0
                finally:
                    process.stop()
                    leaked += process.leaked
                samples[state]["per_command_ms"] += found["per_command_ms"]
                samples[state]["cpu_us_per_command"].append((cpu_after - cpu_before) / describes * 1e6)
    finally:
        optimizer.stop()
    summary = {}
    for state, found in samples.items():
        per_command = found["per_command_ms"]
        summary[state] = {
            "p50_ms": statistics.median(per_command),
            "p99_ms": percentile(per_command, 0.99),
            "samples": len(per_command),
            "cpu_us_per_command": statistics.median(found["cpu_us_per_command"]),
        }
    summary["leaked"] = sorted(set(leaked))
    return summary


# ----- report ------------------------------------------------------------------------------------


def section(found: dict[str, Any], info: dict[str, Any], quick: bool) -> str:
    local, e2e = found["in_process"], found["end_to_end"]
    title = (
        f"### Observability: what metrics and logs cost ({'quick' if quick else 'full'} run, {info['date']})"
    )
    lines = [
        title,
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, load {info['load_at_start']} at start, "
        f"{found['load_at_end']} at the end; Python {info['python']}, Thespian {info['thespian']}, "
        f"tree {info['tree']}. Written by `scripts/bench_observability.py`.",
        "",
        "Per event, in the servo's main process (µs of CPU per call, best of "
        f"{found['repeats']} x {found['calls']} calls; lines marked logged go as JSON to /dev/null at the "
        "default level, info):",
        "",
        "| event (who calls it) | metrics off | metrics on | the metrics' share |",
        "|---|---:|---:|---:|",
    ]
    for name, costs in local["hooks"].items():
        lines.append(
            f"| {name} | {costs['off']:.2f} | {costs['on']:.2f} | {costs['on'] - costs['off']:+.2f} |"
        )
    lines += [
        "",
        "Per command, every hook it makes (µs of CPU):",
        "",
        "| command | metrics off (log lines only) | metrics on | the metrics' share |",
        "|---|---:|---:|---:|",
    ]
    for name, costs in local["commands"].items():
        lines.append(
            f"| {name} | {costs['off']:.1f} | {costs['on']:.1f} | {costs['on'] - costs['off']:+.1f} |"
        )
    lines += [
        "",
        f"One scrape of /metrics (4 connectors, {local['scrape_bytes']} bytes): {local['scrape_ms']:.2f} ms "
        "of the servo's CPU, on the server's thread.",
        "",
        f"End to end, a real servo with 4 no-op connectors, DESCRIBEs in a row, metrics off and on in "
        f"{found['rounds']} alternating round(s) (bench_loop's per-command phase):",
        "",
        "| metrics | per command p50 | p99 | samples | servo main-process CPU per command |",
        "|---|---:|---:|---:|---:|",
    ]
    for state in ("off", "on"):
        row = e2e[state]
        lines.append(
            f"| {state} | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms | {row['samples']} | "
            f"{row['cpu_us_per_command']:.0f} µs |"
        )
    lines += [
        "",
        "The hooks add tens of microseconds to a command that takes milliseconds; the end-to-end "
        "difference is within the run-to-run noise of this shared machine (compare the rounds' "
        f"p50s). Leaked processes: {e2e['leaked'] or 'none'}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and DESCRIBEs, one round")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    counts = COUNTS["quick" if args.quick else "full"]
    info = machine()
    _log(f"in process: {counts['calls']} calls x {counts['repeats']} per event, metrics off and on")
    found: dict[str, Any] = {
        "calls": counts["calls"],
        "repeats": counts["repeats"],
        "rounds": counts["rounds"],
    }
    found["in_process"] = in_process(counts["calls"], counts["repeats"])
    workdir = Path(tempfile.mkdtemp(prefix="bench_observability."))
    try:
        found["end_to_end"] = end_to_end(workdir, counts["rounds"], counts["describes"], counts["warmup"])
    except BenchError as exc:
        _log(f"FAILED: {exc}")
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    found["load_at_end"] = load_average()
    text = section(found, info, args.quick)
    print(text)
    if not args.no_write:
        write_section(BENCHMARKS, text, MARKS)
        _log(f"wrote {BENCHMARKS}")
    return 1 if found["end_to_end"]["leaked"] else 0


if __name__ == "__main__":
    sys.exit(main())
