"""Benchmark the servo's control loop side by side with servox 25.3.0: start, per command, cancel, idle.

    python scripts/bench_loop.py                      # full run, 3-4 minutes; writes BENCHMARKS.md
    python scripts/bench_loop.py --quick --no-write   # a smoke check (about 1 minute), nothing written
    python scripts/bench_loop.py --no-servox          # servo-actors only (servox cannot be installed)
    python scripts/bench_loop.py --servox-venv V      # reuse a venv holding servox (no pip)
    python scripts/bench_loop.py --json               # every sample as JSON instead of the table
    python scripts/bench_loop.py --metrics --no-servox --no-write   # servo-actors serving /metrics

In one run, against one embedded optimizer (``OptimizerServer`` in this process, loopback, with a
token), it starts each agent as a real subprocess (``python -m servo_actors -c CFG run``; servox's
``servo run`` from a throwaway venv with ``servox==25.3.0`` and ``click<8.2``) and measures, from
the optimizer's request log:

- cold start: exec -> HELLO received;
- per-command overhead: WHATS_NEXT answered with a DESCRIBE -> its DESCRIPTION received, over 200
  DESCRIBEs with 4 no-op connectors (p50/p99);
- cancel: the ``cancel`` answer to a MEASURE progress post -> ``cancelled`` received, and -> the
  next WHATS_NEXT, with one connector hung (servox exits after each cancel: a fresh one per sample);
- idle CPU: utime+stime of every process of the agent (found by a marker in its environment) over
  a window in the middle of a long SLEEP, as % of one core.

Phases alternate between the agents (both cold starts, then both DESCRIBE runs, ...) so that a
change in the machine's load hits both alike. It prints the table and writes the section between
``<!-- bench_loop:start -->`` and ``<!-- bench_loop:end -->`` of BENCHMARKS.md (the rest of the file
is left alone), with the machine, the targets met or missed, and the ratios to servox.

Every process it starts is stopped by PID (SIGTERM, then SIGKILL); every process an agent started is
found by its marker and must be gone at the end (else it is killed and the report says so). Every
wait is bounded. Exit status: 0 measured, 1 a phase could not be measured, 2 bad usage or set-up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_support import phases
from bench_support.agents import PROGRESS_INTERVAL, SERVOX, ServoActorsAgent, ServoxAgent
from bench_support.findings import FINDINGS
from bench_support.optimizer import BenchError, BenchOptimizer
from bench_support.processes import AgentProcess
from bench_support.report import load_average, machine, render, write_section
from bench_support.servox_venv import check_venv, make_venv, versions

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
COUNTS = {
    "full": {
        "cold_starts": 10,
        "describes": 200,
        "warmup": 10,
        "cancels": 200,
        "servox_cancels": 20,
        "idle": 30.0,
    },
    "quick": {
        "cold_starts": 3,
        "describes": 50,
        "warmup": 5,
        "cancels": 30,
        "servox_cancels": 3,
        "idle": 10.0,
    },
}


def _log(message: str) -> None:
    print(f"bench_loop: {message}", file=sys.stderr, flush=True)


def _ready(
    optimizer: BenchOptimizer, agent: Any, connectors: str, started: list[AgentProcess]
) -> AgentProcess:
    """A fresh agent that has said HELLO and polled once."""
    polls = optimizer.driver.polls
    process = agent.start(connectors, optimizer)
    started.append(process)
    optimizer.wait_until(
        lambda d: d.polls > polls, phases.COLD_START_TIMEOUT, f"{agent.name} to poll", process
    )
    return process


def measure(agents: list[Any], optimizer: BenchOptimizer, counts: dict[str, Any]) -> dict[str, Any]:
    """Every phase, each for every agent in turn; processes are stopped whatever happens."""
    results: dict[str, dict[str, Any]] = {agent.name: {} for agent in agents}
    started: dict[str, list[AgentProcess]] = {agent.name: [] for agent in agents}
    try:
        for agent in agents:
            _log(f"{agent.name}: {counts['cold_starts']} cold starts")
            results[agent.name]["cold_start"] = phases.cold_start(
                optimizer, agent, counts["cold_starts"], started[agent.name]
            )
        for agent in agents:
            process = _ready(optimizer, agent, "noop", started[agent.name])
            _log(f"{agent.name}: {counts['warmup']} + {counts['describes']} DESCRIBEs")
            results[agent.name]["describe"] = phases.describes(
                optimizer, process, counts["describes"], counts["warmup"]
            )
            _log(f"{agent.name}: idle CPU over {counts['idle']:.0f} s of a SLEEP")
            results[agent.name]["idle"] = phases.idle_cpu(optimizer, process, counts["idle"])
            process.stop()
        for agent in agents:
            if agent.name == SERVOX:  # it exits after every cancel: one process per sample
                _log(f"{agent.name}: {counts['servox_cancels']} cancels, a fresh servox for each")
                results[agent.name]["cancel"] = phases.cancels_one_process_each(
                    optimizer, agent, counts["servox_cancels"], started[agent.name]
                )
            else:
                process = _ready(optimizer, agent, "cancel", started[agent.name])
                _log(f"{agent.name}: {counts['cancels']} cancels with a hung connector")
                results[agent.name]["cancel"] = phases.cancels_in_one_process(
                    optimizer, process, counts["cancels"]
                )
                process.stop()
    finally:
        for name, processes in started.items():
            for process in processes:
                process.stop()
            results[name]["leaked"] = sorted({pid for p in processes for pid in p.leaked})
            results[name]["exit_codes"] = sorted({p.exit_code for p in processes if p.exit_code is not None})
    return results


def _terminate(signum: int, frame: object) -> None:
    # Unwind through every finally: the agents are stopped by PID on the way out.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations, a shorter idle window")
    parser.add_argument("--no-servox", action="store_true", help="servo-actors only (skip installing servox)")
    parser.add_argument("--servox-venv", type=Path, help="a venv that already holds servox 25.3.0")
    parser.add_argument("--json", action="store_true", help="print every sample as JSON instead of the table")
    parser.add_argument("--no-write", action="store_true", help="leave BENCHMARKS.md alone")
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--keep", action="store_true", help="keep the work directory (configs, agent logs)")
    parser.add_argument(
        "--metrics", action="store_true", help="servo-actors serves /metrics (settings.metrics) meanwhile"
    )
    args = parser.parse_args(argv)
    counts = COUNTS["quick" if args.quick else "full"]
    signal.signal(signal.SIGTERM, _terminate)
    info = machine()
    workdir = Path(tempfile.mkdtemp(prefix="bench_loop."))
    optimizer = BenchOptimizer(phases.SHORT_SLEEP)
    results: dict[str, Any] = {
        "machine": info,
        "quick": args.quick,
        "settings": {
            "cold_starts": counts["cold_starts"],
            "describes": counts["describes"],
            "warmup": counts["warmup"],
            "idle_window": counts["idle"],
            "progress_interval": PROGRESS_INTERVAL,
            "log_level": args.log_level,
            "metrics": args.metrics,
        },
    }
    try:
        agents: list[Any] = [ServoActorsAgent(workdir, args.log_level, metrics=args.metrics)]
        try:
            if not args.no_servox:
                if args.servox_venv:
                    venv = check_venv(args.servox_venv)
                else:
                    _log("installing servox 25.3.0 into a throwaway venv")
                    venv = make_venv(workdir)
                results["servox_versions"] = versions(venv)
                agents.append(ServoxAgent(workdir, args.log_level, venv))
        except BenchError as exc:
            _log(f"set-up failed: {exc}")
            return 2
        optimizer.start()
        try:
            results["agents"] = measure(agents, optimizer, counts)
            results["load_at_end"] = load_average()
        except BenchError as exc:
            _log(f"FAILED: {exc}")
            return 1
        if args.no_servox:
            results["agents"][SERVOX] = {"skipped": "skipped (--no-servox)"}
    finally:
        optimizer.stop()
        if args.keep:
            _log(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    text = render(results, FINDINGS)
    print(json.dumps(results, indent=1) if args.json else text)
    if not args.no_write:
        write_section(BENCHMARKS, text)
        _log(f"wrote {BENCHMARKS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
