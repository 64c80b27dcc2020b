"""Benchmark the actor runtime: cancel, round trip, respawn, memory, orphan cleanup.

    python scripts/bench_actors.py            # full run (>= 200 cancels per size; a few minutes)
    python scripts/bench_actors.py --quick    # fewer iterations, for a smoke check

Prints the numbers and writes them into BENCHMARKS.md (the section between the bench_actors
markers is replaced; the rest of the file is kept). Every process it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_support.report import machine, write_section

from servo_actors.actors import ServoRuntime
from servo_actors.actors.linux import processes
from servo_actors.config.models import ServoConfig

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
START_MARK = "<!-- bench_actors:start -->"
END_MARK = "<!-- bench_actors:end -->"
SIZES = (1, 4, 16, 50)
TARGETS = {
    "cancel_p99_4_ms": 50.0,
    "cancel_p99_50_ms": 500.0,
    "round_trip_p50_ms": 2.0,
    "pss_per_connector_mb": 8.0,
    "orphan_cleanup_s": 2.0,
}
HANG_SETTLE = 0.05
"""Seconds between beginning the measure and the cancel, so the hung connector is in its read."""
ORPHAN_POLL = 0.005
ORPHAN_LIMIT = 10.0
"""Seconds after which an orphan-cleanup trial is reported as failed."""

SERVO_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from servo_actors.actors import ServoRuntime
    from servo_actors.config.models import ServoConfig
    conns = [{"name": f"c{i}", "type": "chaos"} for i in range(3)]
    conns.append({"name": "hung", "type": "chaos", "config": {"faults": {"measure": "socket_read"}}})
    runtime = ServoRuntime(ServoConfig.model_validate({"connectors": conns}), run_dir=sys.argv[1])
    runtime.start()
    if sys.argv[2] == "busy":  # else idle: the supervisor then checks on its owner least often
        op = runtime.begin("measure")
        runtime.wait(op, 0.2)
    print(json.dumps({"sid": runtime.session_id}), flush=True)
    time.sleep(600)
    """
)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def config(size: int, *, hung: bool) -> ServoConfig:
    connectors = [{"name": f"c{i}", "type": "chaos"} for i in range(size - 1 if hung else size)]
    if hung:
        connectors.append({"name": "hung", "type": "chaos", "config": {"faults": {"measure": "socket_read"}}})
    return ServoConfig.model_validate({"connectors": connectors})


def pss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def cpu_ms(pid: int) -> float:
    """CPU time ``pid`` has used so far (ms), from /proc/PID/schedstat (nanoseconds on CPU)."""
    with open(f"/proc/{pid}/schedstat") as handle:
        return int(handle.read().split()[0]) / 1e6


def host_pss(runtime: ServoRuntime) -> list[int]:
    runtime.run("describe")  # every host has served an operation: typical resident memory
    return [pss_kib(child.pid) for child in runtime.status().children if child.pid]


def bench_cancel(size: int, iterations: int, run_dir: Path) -> dict:
    with ServoRuntime(config(size, hung=True), run_dir=run_dir / f"cancel{size}") as runtime:
        fresh_pss = host_pss(runtime)
        runtime.cancel()  # warm-up
        supervisor = runtime.status().supervisor_pid
        supervisor_cpu = cpu_ms(supervisor)
        times = []
        for _ in range(iterations):
            op = runtime.begin("measure")
            runtime.wait(op, HANG_SETTLE)
            began = time.perf_counter()
            runtime.cancel()
            times.append(time.perf_counter() - began)
            assert op.result is not None and op.result.status == "cancelled", op
        supervisor_cpu = cpu_ms(supervisor) - supervisor_cpu
        # The hosts have done nothing but start since the last cancel: their CPU is a respawn's.
        host_cpu = [cpu_ms(child.pid) for child in runtime.status().children if child.pid]
        pss = host_pss(runtime)
    return {
        "size": size,
        "iterations": iterations,
        "p50_ms": percentile(times, 0.5) * 1e3,
        "p99_ms": percentile(times, 0.99) * 1e3,
        "max_ms": max(times) * 1e3,
        "pss_mean_mb": statistics.mean(pss) / 1024,
        "pss_max_mb": max(pss) / 1024,
        "pss_fresh_mb": statistics.mean(fresh_pss) / 1024,
        "host_cpu_ms": statistics.mean(host_cpu),
        "supervisor_cpu_ms": supervisor_cpu / iterations / size,
    }


def bench_round_trip(iterations: int, run_dir: Path) -> dict:
    results = {}
    for size in (1, 4):
        with ServoRuntime(config(size, hung=False), run_dir=run_dir / f"rt{size}") as runtime:
            for _ in range(20):
                runtime.run("check")
            times = []
            for _ in range(iterations):
                began = time.perf_counter()
                runtime.run("check")
                times.append(time.perf_counter() - began)
        results[size] = {"p50_ms": percentile(times, 0.5) * 1e3, "p99_ms": percentile(times, 0.99) * 1e3}
    return results


def private_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        return sum(int(line.split()[1]) for line in handle if line.startswith("Private_"))


def bench_floor(run_dir: Path, samples: int) -> dict:
    """An empty ConnectorHost (forked and bootstrapped by Thespian, no connector yet): the floor of
    a connector process's CPU to start and of its private memory, next to a real one."""
    from servo_actors.actors.host.actor import ConnectorHost

    cpu, private = [], []
    with ServoRuntime(config(1, hung=False), run_dir=run_dir / "floor") as runtime:
        real = runtime.status().children[0].pid
        runtime.run("describe")
        for _ in range(samples):
            before = set(runtime.members())
            runtime._link.system.create_actor(ConnectorHost)  # answers once the actor is up
            (pid,) = set(runtime.members()) - before
            cpu.append(cpu_ms(pid))
            private.append(private_kib(pid))
        real_private = private_kib(real)
    return {
        "empty_cpu_ms": statistics.median(cpu),
        "empty_private_mb": statistics.median(private) / 1024,
        "real_private_mb": real_private / 1024,
    }


def bench_start(run_dir: Path) -> dict:
    results = {}
    for size in (1, 16):
        runtime = ServoRuntime(config(size, hung=False), run_dir=run_dir / f"start{size}")
        began = time.perf_counter()
        runtime.start()
        results[size] = (time.perf_counter() - began) * 1e3
        runtime.stop()
    return results


def bench_orphans(trials: int, run_dir: Path) -> list[float]:
    times = []
    for trial in range(trials):
        servo = subprocess.Popen(
            [
                sys.executable,
                "-c",
                SERVO_SCRIPT,
                str(run_dir / f"orphan{trial}"),
                ("busy", "idle")[trial % 2],
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            sid = json.loads(servo.stdout.readline())["sid"]
            began = time.perf_counter()
            servo.send_signal(signal.SIGKILL)
            servo.wait(timeout=ORPHAN_LIMIT)
            while processes.session_members(sid) and time.perf_counter() - began < ORPHAN_LIMIT:
                time.sleep(ORPHAN_POLL)
            times.append(time.perf_counter() - began)
            left = processes.session_members(sid)
            if left:
                processes.kill_session(sid)
                print(f"  orphan trial {trial}: {left} survived {ORPHAN_LIMIT}s", file=sys.stderr)
        finally:
            if servo.poll() is None:
                servo.kill()
                servo.wait(timeout=ORPHAN_LIMIT)
            servo.stdout.close()
    return times


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "MISSED"


def report(
    info: dict, cancels: list[dict], trips: dict, starts: dict, floor: dict, orphans: list[float], quick: bool
) -> str:
    by_size = {row["size"]: row for row in cancels}
    slope = (by_size[SIZES[-1]]["p50_ms"] - by_size[SIZES[0]]["p50_ms"]) / (SIZES[-1] - SIZES[0])
    pss = by_size[4]["pss_mean_mb"]
    lines = [
        f"### Actor runtime ({'quick' if quick else 'full'} run, {info['date']})",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, Linux {info['kernel']}, Python {info['python']}, "
        f"Thespian {info['thespian']}; load average at start {info['load_at_start']} (shared machine: other jobs ran).",
        "",
        "Cancel: SIGKILL every connector's process group, respawn all, return when every fresh "
        "connector has run startup() and answered; one connector is hung in a blocking socket read.",
        "",
        "| connectors | cancels | p50 ms | p99 ms | max ms | PSS/connector MB fresh; after the cancels "
        "(mean, max) | CPU per respawned connector: host + supervisor ms |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in cancels:
        lines.append(
            f"| {row['size']} | {row['iterations']} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
            f"{row['max_ms']:.1f} | {row['pss_fresh_mb']:.1f}; {row['pss_mean_mb']:.1f}, {row['pss_max_mb']:.1f} | "
            f"{row['host_cpu_ms']:.1f} + {row['supervisor_cpu_ms']:.1f} |"
        )
    per_connector = by_size[SIZES[-1]]["host_cpu_ms"] + by_size[SIZES[-1]]["supervisor_cpu_ms"]
    cores = info["cores"] or 1
    lines += [
        "",
        f"- Supervisor round trip of a no-op operation (check): 1 connector p50 {trips[1]['p50_ms']:.2f} ms "
        f"(p99 {trips[1]['p99_ms']:.2f}); 4 connectors p50 {trips[4]['p50_ms']:.2f} ms (p99 {trips[4]['p99_ms']:.2f}).",
        f"- Respawn cost per connector (cancel p50 slope, {SIZES[0]} to {SIZES[-1]} connectors): {slope:.1f} ms; "
        f"CPU floor of a {SIZES[-1]}-connector cancel on {cores} cores: {SIZES[-1]} x {per_connector:.1f} ms / "
        f"{cores} = {SIZES[-1] * per_connector / cores:.0f} ms.",
        f"- Start (actor system, supervisor, connectors in order): 1 connector {starts[1]:.0f} ms, "
        f"16 connectors {starts[16]:.0f} ms.",
        f"- SIGKILL of the servo's main process -> last actor process gone ({len(orphans)} trials, half of them "
        "with a measure in flight, half idle): "
        f"median {statistics.median(orphans):.2f} s, max {max(orphans):.2f} s.",
        "",
        "| target | measured | |",
        "|---|---:|---|",
        f"| cancel p99 <= 50 ms, 4 connectors | {by_size[4]['p99_ms']:.1f} ms | "
        f"{verdict(by_size[4]['p99_ms'], TARGETS['cancel_p99_4_ms'])} |",
        f"| cancel p99 <= 500 ms, 50 connectors | {by_size[50]['p99_ms']:.1f} ms | "
        f"{verdict(by_size[50]['p99_ms'], TARGETS['cancel_p99_50_ms'])} |",
        f"| round trip p50 <= 2 ms | {trips[1]['p50_ms']:.2f} ms | "
        f"{verdict(trips[1]['p50_ms'], TARGETS['round_trip_p50_ms'])} |",
        f"| PSS <= 8 MB per connector (4 connectors) | {pss:.1f} MB | "
        f"{verdict(pss, TARGETS['pss_per_connector_mb'])} |",
        f"| orphan cleanup <= 2 s | {max(orphans):.2f} s | {verdict(max(orphans), TARGETS['orphan_cleanup_s'])} |",
        "",
        "What bounds them (measured in this run):",
        "",
        f"- Cancel latency is CPU: each respawned connector costs {per_connector:.1f} ms of CPU "
        f"({by_size[SIZES[-1]]['host_cpu_ms']:.1f} in the new host, "
        f"{by_size[SIZES[-1]]['supervisor_cpu_ms']:.1f} in the supervisor: the fork of its image, "
        "Thespian's child bookkeeping, and about five messages that each need a TCP acknowledgement). "
        f"An empty host (forked and bootstrapped by Thespian, no connector yet) already costs "
        f"{floor['empty_cpu_ms']:.1f} ms. With {SIZES[-1]} connectors that is "
        f"{SIZES[-1] * per_connector / cores:.0f} ms on {cores} idle cores before any other job gets a turn; "
        "the p99 above it is the machine's other load.",
        "- A cancel is a pipeline: the supervisor forks one host per turn of its message loop, and between "
        "turns the hosts already forked connect, join their cgroup and start their connector (a host knows "
        "its connector from the fork, so that overlaps its HostInit's trip). Progress is merged to one "
        "message per 0.1 s, so nothing queues ahead of the HostInit messages in Thespian's window of 20 "
        "sends in flight.",
        f"- PSS is the private memory of each host plus its share of what it maps with the other processes. "
        f"A host has {floor['real_private_mb']:.1f} MB private; an empty one {floor['empty_private_mb']:.1f} MB "
        "(CPython 3.11 writes to the reference count of every object it touches, so each forked process "
        "copies those pages). The shared part (interpreter, libraries, the heap inherited from the servo) "
        "is divided among the processes mapping it, so PSS per connector falls as connectors are added "
        "(see the table).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (30 cancels per size)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    cancels_per_size = 30 if args.quick else 200
    info = machine()
    print(json.dumps(info))
    with tempfile.TemporaryDirectory(prefix="bench-actors-") as tmp:
        run_dir = Path(tmp)
        cancels = []
        for size in SIZES:
            row = bench_cancel(size, cancels_per_size, run_dir)
            print(json.dumps({"cancel": row}), flush=True)
            cancels.append(row)
        trips = bench_round_trip(100 if args.quick else 500, run_dir)
        print(json.dumps({"round_trip": trips}), flush=True)
        starts = bench_start(run_dir)
        floor = bench_floor(run_dir, 5)
        print(json.dumps({"floor": floor}), flush=True)
        print(json.dumps({"start_ms": starts}), flush=True)
        orphans = bench_orphans(3 if args.quick else 10, run_dir)
        print(json.dumps({"orphan_cleanup_s": orphans}), flush=True)
    text = report(info, cancels, trips, starts, floor, orphans, args.quick)
    print(text)
    if not args.no_write:
        write_section(BENCHMARKS, text, (START_MARK, END_MARK))
        print(f"wrote {BENCHMARKS}")


if __name__ == "__main__":
    main()
