"""Benchmark large results: result size -> time to the optimizer, through a real `servo-actors run`.

    python scripts/bench_results.py                       # 10k, 100k, 1M points; 5 trials each
    python scripts/bench_results.py --sizes 200000 --trials 3 --no-write
    python scripts/bench_results.py --sizes 200000 --no-over-limit --no-write --profile /tmp/prof

For each size, a `servo-actors run` with one `chaos` connector whose measure returns a series of
that many points (`many_points`) runs against the embedded optimizer (in this process, loopback).
Each trial queues a MEASURE of duration 0; the figure is the time from the MEASURE leaving the
optimizer (its WHATS_NEXT answer) to the MEASUREMENT arriving there (the request's headers), so it
holds everything in between: the connector building its points, the host checking and pickling
them, the supervisor, the servo building and encoding the result, and the HTTP post. A last row
measures a result over `supervisor.max_result_bytes` (default 4 MiB), which must be answered
`result-too-large`, quickly.

The rows up to 1M points run with `max_result_bytes: 64 MiB` (1M points pickle to about 18 MB) and
`liveness.timeout: 30s` (such a result keeps the supervisor busy past the default 5 s on a loaded
machine), and this process's optimizer accepts bodies up to 64 MiB (its own limit is 16 MiB): all
three are the benchmark's settings, not the servo's defaults. Prints the numbers and writes them into
BENCHMARKS.md (the section between the bench_results markers). Every process it starts is stopped
by PID; its processes are found by an environment marker. With ``--profile DIR``, py-spy (if
installed) samples the servo and each process of its actor system during the trials, into
``DIR/POINTS/PID.txt`` (collapsed stacks, one line per stack: ``py-spy record --format raw``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from bench_support.agents import SERVO_ACTORS, clean_env, servo_actors_config
from bench_support.optimizer import BenchError, BenchOptimizer, is_result
from bench_support.processes import launch, marked_pids
from bench_support.report import load_average, machine, percentile, write_section

from servo_actors.connectors.base import Control
from servo_actors.connectors.chaos import ChaosConnector
from servo_actors.optimizer import web

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_results:start -->", "<!-- bench_results:end -->")
SIZES = (10_000, 100_000, 1_000_000)
OVER_LIMIT_POINTS = 2_500_000
"""The issue's case: pickled, far over the default ``max_result_bytes`` (4 MiB)."""
BENCH_RESULT_BYTES = 64 * 1024 * 1024
BENCH_BODY_BYTES = 64 * 1024 * 1024
BENCH_LIVENESS = {"interval": "1s", "timeout": "30s"}
IDLE_SLEEP = 0.05
TRIAL_TIMEOUT = 120.0
"""Seconds one trial may take before the benchmark gives up (only a hang reaches it)."""
PROFILE_RATE = 200
"""py-spy samples per second."""
PROFILER_ATTACH = 1.0
"""Seconds py-spy gets to attach before the first trial."""
PROFILER_STOP_TIMEOUT = 60.0
LOG_POLL = 0.01
"""Seconds between looks at the optimizer's log for the result's entry."""
MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": 0}}}


BEFORE_AND_BOUNDS = (
    "\nBefore (tree 3e2b42d, this script on the same machine, 2026-12-04, load 4.5-5): 10k points "
    "863 ms, 100k 6308 ms, 1M 50.5 s (one trial), 2.5M answered `result-too-large` after 15.5 s "
    "(a walk in Python stopped at the limit; with a grace under that, `timeout`).\n\n"
    "What bounds it (py-spy, `--profile`). Before: the servo's main process spent about 80 % of a "
    "trial in about twenty walks over the same points (a NaN walk and a nesting walk per builder "
    "and per request body, a Python validator per number), the connector's host 2 s per 200k points "
    "formatting a path string for every item, and Thespian unpickled the result twice where it "
    "arrived on a socket that awaited an acknowledgement. Now, per process: the host pickles the "
    "result once to measure it (refused at once when over the limit) and converts it in one walk; "
    "the supervisor unpickles it, merges and pickles it again; the servo unpickles it, walks it once "
    "(nesting and NaN), has pydantic's core validate and dump it, and encodes it (C). At 1M points "
    "each step is about a second on a loaded machine, and the embedded optimizer (in the benchmark's "
    "process) needs several seconds more to read 17 MB: over this run's 10 s read timeout, the servo "
    "posts again. An 18 MB message between two processes also nears Thespian's 5 s transmit timeout "
    "under load.\n"
)


def config(optimizer: BenchOptimizer, points: int, result_bytes: int | None) -> dict[str, Any]:
    settings = servo_actors_config("noop", optimizer)
    fault = {"action": "many_points", "points": points}
    settings["connectors"] = [
        {
            "name": "big",
            "type": "chaos",
            "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1.0}, "faults": {"measure": fault}},
        }
    ]
    if result_bytes is not None:
        # An 18 MB result keeps the supervisor and the servo busy for seconds (unpickling and
        # pickling it): the default liveness.timeout (5 s) would take that for a hung supervisor.
        settings["supervisor"] = {"max_result_bytes": result_bytes, "liveness": BENCH_LIVENESS}
    return settings


def connector_build_ms(points: int) -> float:
    """How long the chaos connector takes to build ``points`` points (in this process): the part of
    each trial that is the connector's own work, not the servo's."""
    fault = {"action": "many_points", "points": points}
    connector = ChaosConnector("big", {"values": {"x": 1.0}, "faults": {"measure": fault}})
    began = time.perf_counter()
    connector.measure(["x"], Control(), lambda *_: None)
    return (time.perf_counter() - began) * 1e3


def start_profilers(pids: list[int], output: Path) -> list[subprocess.Popen[bytes]]:
    """py-spy sampling each of ``pids`` (stopped by ``stop_profilers``) into ``output/PID.txt``; none
    without py-spy. One each: the actor system's processes are not children of the servo."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("  (py-spy is not installed: no profile)")
        return []
    output.mkdir(parents=True, exist_ok=True)
    command = [spy, "record", "--nonblocking", "--format", "raw", "-r", str(PROFILE_RATE)]
    profilers = [
        subprocess.Popen(
            [*command, "-o", str(output / f"{pid}.txt"), "-p", str(pid)], stdout=subprocess.DEVNULL
        )
        for pid in pids
    ]
    time.sleep(PROFILER_ATTACH)
    return profilers


def stop_profilers(profilers: list[subprocess.Popen[bytes]]) -> None:
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    for profiler in profilers:
        profiler.wait(PROFILER_STOP_TIMEOUT)


def own_result(entries: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(the WHATS_NEXT that sent the MEASURE, its result)`` among ``entries``, once logged."""
    sent = next((e for e in entries if (e.get("reply") or {}).get("cmd") == "MEASURE"), None)
    if sent is None:
        return None
    uid = sent["reply"].get("cmd_uid")
    found = (e for e in entries if is_result(e) and (e.get("param") or {}).get("cmd_uid") == uid)
    result = next(found, None)
    return None if result is None else (sent, result)


def run_size(
    points: int, trials: int, workdir: Path, result_bytes: int | None, profile: Path | None = None
) -> dict[str, Any]:
    optimizer = BenchOptimizer(IDLE_SLEEP).start()
    config_path = workdir / f"servo-actors-results-{points}.yaml"
    config_path.write_text(yaml.safe_dump(config(optimizer, points, result_bytes)))
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "servo_actors", "-l", "warning", "-c", str(config_path), "run"]
    agent = launch(SERVO_ACTORS, command, env, workdir, workdir / f"servo-actors-{points}.log")
    times, outcomes, sizes = [], set(), []
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        optimizer.wait_until(lambda d: d.polls > 0, TRIAL_TIMEOUT, "the first poll", agent)
        if profile is not None:
            profilers = start_profilers(marked_pids(agent.marker), profile / str(points))
        for _ in range(trials):
            mark = optimizer.mark()
            seen = optimizer.driver.results
            optimizer.driver.push([dict(MEASURE)])
            optimizer.wait_until(
                lambda d, seen=seen: d.results > seen, TRIAL_TIMEOUT, "the MEASUREMENT", agent
            )
            # The driver counts a result before the server logs it, and a late retry of the
            # previous trial's post may arrive meanwhile: wait for this command's own result.
            deadline = time.monotonic() + TRIAL_TIMEOUT
            while (result := own_result(optimizer.since(mark))) is None:
                if time.monotonic() > deadline:
                    raise BenchError("the MEASUREMENT never reached the optimizer's log")
                time.sleep(LOG_POLL)
            sent, result = result
            times.append((result["at"] - sent["replied_at"]) * 1e3)
            param = result["param"]
            outcomes.add(f"{param['status']} ({param['reason']})")
            sizes.append(result["body"]["bytes"])
            print(f"  {points} points: {times[-1]:.0f} ms, {outcomes}", flush=True)
    finally:
        stop_profilers(profilers)
        agent.stop()
        optimizer.stop()
    return {
        "points": points,
        "times_ms": times,
        "outcomes": sorted(outcomes),
        "json_bytes": max(sizes) if sizes else 0,
        "build_ms": connector_build_ms(points),
        "leaked": agent.leaked,
        "exit_code": agent.exit_code,
        "limit": result_bytes,
    }


def section(rows: list[dict[str, Any]], info: dict[str, Any], trials: int) -> str:
    lines = [
        f"### Large results (scripts/bench_results.py, {info['date']})\n",
        f"Machine: {info['cpu']}, {info['cores']} cores, Linux {info['kernel']}, load {info['load_at_start']} "
        f"at start, {load_average()} at the end; Python {info['python']}, Thespian {info['thespian']}, "
        f"tree {info['tree']}.\n",
        "A `servo-actors run` with one `chaos` connector whose measure returns one series of N points "
        f"(`many_points`), against the embedded optimizer; {trials} MEASUREs (duration 0) per size. Time: "
        "the MEASURE leaving the optimizer -> the MEASUREMENT arriving there. The connector's own part "
        "(building the points, measured apart) is in the time too. Up to 1M points with "
        "`max_result_bytes: 64 MiB` and `liveness.timeout: 30s` (the defaults are 4 MiB, about 230k "
        "points, and 5 s); the last row with the defaults.\n",
        "| points | result | JSON posted | p50 | max | of which the connector builds its points |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        times = row["times_ms"]
        p50 = f"{percentile(times, 0.5):.0f} ms" if times else "-"
        worst = f"{max(times):.0f} ms" if times else "-"
        limit = "" if row["limit"] else " (default limit)"
        lines.append(
            f"| {row['points']:,} | {', '.join(row['outcomes'])}{limit} | {row['json_bytes'] / 1e6:.1f} MB "
            f"| {p50} | {worst} | {row['build_ms']:.0f} ms |"
        )
    lines.append(BEFORE_AND_BOUNDS)
    leaks = {row["points"]: row["leaked"] for row in rows if row["leaked"]}
    codes = sorted({row["exit_code"] for row in rows})
    lines.append(f"\nExit codes after SIGTERM: {codes}; leaked processes: {leaks or 'none'}.\n\n")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--no-over-limit", action="store_true", help="skip the result-too-large row")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    parser.add_argument(
        "--workdir", type=Path, help="keep configs and logs here (default: a temporary folder)"
    )
    parser.add_argument("--profile", type=Path, help="sample every process with py-spy into this folder")
    args = parser.parse_args()
    info = machine()
    web.MAX_BODY_BYTES = BENCH_BODY_BYTES  # this process's optimizer: see the module docstring
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-results-") as temporary:
        workdir = args.workdir or temporary  # --workdir keeps the servos' logs
        for points in args.sizes:
            rows.append(run_size(points, args.trials, Path(workdir), BENCH_RESULT_BYTES, args.profile))
        if not args.no_over_limit:
            rows.append(run_size(OVER_LIMIT_POINTS, max(1, args.trials // 2), Path(workdir), None))
    text = section(rows, info, args.trials)
    print(text)
    if not args.no_write:
        write_section(BENCHMARKS, text, MARKS)
    if any(row["leaked"] or row["exit_code"] != 0 for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
