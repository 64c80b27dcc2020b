"""Benchmark a servo of several applications (issue 36): memory per application, cold start, and one
application's cancel while the others are busy.

    python scripts/bench_apps.py                    # 1, 4 and 16 applications; writes BENCHMARKS.md
    python scripts/bench_apps.py --quick --no-write # fewer cancels, nothing written
    python scripts/bench_apps.py --apps 1 4         # other counts

For each count N it writes a servo.yaml of N documents (applications ``bench.example.com/app-I``),
each with one connector that does nothing (a ``chaos`` connector with no fault, except that its
MEASURE hangs until cancelled: the commands the cancel phase needs), starts one embedded optimizer
in this process serving the N applications (``OptimizerServer`` with an ``Application`` each, over
loopback) and one real servo process (``python -m servo_actors -c servo.yaml run``), and measures:

- cold start: exec -> every application's first WHATS_NEXT (each said HELLO before it);
- memory: the PSS of every process of the servo (found by a marker in its environment) once
  every application idles in a SLEEP, by role (servo, Thespian admin and logger, application
  supervisors, connector hosts); per added application: (PSS(N) - PSS(1)) / (N - 1), against the
  target "at most its connector processes plus one more servo process" (one host plus one
  supervisor, as measured in the same run);
- cancel: in application 1, a MEASURE cancelled on its first progress post: the ``cancel`` answer
  -> the ``cancelled`` result received (p50/p99), while every other application runs a MEASURE of
  its own; the target is p99 with 16 applications within 1.5 times the figure with one.

It writes the section between ``<!-- bench_apps:start -->`` and ``<!-- bench_apps:end -->`` of
BENCHMARKS.md. Every process it starts is stopped by PID (SIGTERM, then SIGKILL); every process the
servo started is found by its marker and must be gone afterwards (else killed, and reported). Every
wait is bounded. Exit status: 0 measured, 1 a phase could not be measured, 2 bad usage.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import yaml
from bench_support.processes import launch, marked_pids, memory_kib, parent_pid
from bench_support.report import machine, percentile, write_section

from servo_actors.optimizer.application import Application
from servo_actors.optimizer.server import OptimizerServer

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_apps:start -->", "<!-- bench_apps:end -->")
COUNTS = {"full": {"cancels": 60}, "quick": {"cancels": 15}}
APP_COUNTS = (1, 4, 16)
PROGRESS_INTERVAL = "100ms"
"""How often each application posts progress: a cancel is answered to the first post."""
IDLE_SLEEP = 0.5
"""The SLEEP each application gets when nothing is queued."""
START_TIMEOUT = 180.0
"""Bound on N applications' cold start (16 on a loaded 2-core machine take a few seconds)."""
STEP_TIMEOUT = 60.0
"""Bound on one cancel sample or one busy command's start."""
SETTLE = 3.0
"""Seconds of idling before memory is read (every application in a SLEEP)."""
BUSY_MEASURE = 3600.0
"""Duration of the busy applications' MEASURE (cancelled at the end of the phase)."""
CONNECTOR = {
    "name": "noop",
    "type": "chaos",
    "config": {"faults": {"measure": {"action": "sleep", "seconds": BUSY_MEASURE}}},
}


class BenchError(Exception):
    """A phase could not be measured (exit 1)."""


class AppDriver:
    """One application's optimizer side: SLEEP unless a command is queued; a cancel on request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first_poll: float | None = None
        self.polls = 0
        self.queue: deque[dict[str, Any]] = deque()
        self.cancel_armed = False
        self.cancel_sent: float | None = None
        self.cancelled = threading.Event()
        self.cancelled_at: float | None = None
        self.progressed = threading.Event()
        self.server: Any = None

    def next_command(self) -> dict[str, Any]:
        with self.lock:
            self.polls += 1
            if self.first_poll is None:
                self.first_poll = time.time()
            if self.queue:
                return self.queue.popleft()
        return {"cmd": "SLEEP", "param": {"duration": IDLE_SLEEP}}

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        self.progressed.set()
        with self.lock:
            if self.cancel_armed:
                self.cancel_armed = False
                self.cancel_sent = time.monotonic()
                return {"status": "cancel", "reason": "bench"}
        return None

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        if result.get("status") == "cancelled":
            self.cancelled_at = time.monotonic()
            self.cancelled.set()
        return None

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        return None

    def state(self) -> dict[str, Any]:
        return {"polls": self.polls}

    def measure(self) -> None:
        with self.lock:
            self.queue.append(
                {"cmd": "MEASURE", "param": {"metrics": [], "control": {"duration": BUSY_MEASURE}}}
            )


def _log(message: str) -> None:
    print(f"bench_apps: {message}", file=sys.stderr, flush=True)


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"{what}: not within {timeout:g}s")
        time.sleep(0.01)


def _roles(servo_pid: int, pids: list[int]) -> dict[str, list[int]]:
    """Every marked process by role: the servo, the admin (a parent of supervisors), the logger,
    the supervisors (parents of hosts) and the connector hosts."""
    parents = {pid: parent_pid(pid) for pid in pids}
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    hosts = [pid for pid in pids if parents[pid] in parents and parents[parents[pid]] in parents]
    supervisors = sorted({parents[pid] for pid in hosts if parents[pid] is not None})  # type: ignore[misc]
    admins = sorted({parents[pid] for pid in supervisors if parents[pid] is not None})  # type: ignore[misc]
    known = {servo_pid, *hosts, *supervisors, *admins}
    return {
        "servo": [servo_pid],
        "admin": admins,
        "supervisors": supervisors,
        "hosts": hosts,
        "other": [pid for pid in pids if pid not in known],
    }


def _pss(pids: list[int]) -> float:
    """MiB."""
    return sum((memory_kib(pid) or {}).get("pss", 0) for pid in pids) / 1024


def run_count(count: int, cancels: int, work: Path) -> dict[str, Any]:
    apps = [f"bench.example.com/app-{index + 1}" for index in range(count)]
    drivers = {app: AppDriver() for app in apps}
    server = OptimizerServer(applications=[Application(drivers[app], app=app) for app in apps]).start()
    process = None
    try:
        config = work / f"servo-{count}.yaml"
        documents = [
            {
                "optimizer": {"id": app, "base_url": server.url},
                "settings": {"progress_interval": PROGRESS_INTERVAL},
                "connectors": [CONNECTOR],
            }
            for app in apps
        ]
        config.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        command = [sys.executable, "-m", "servo_actors", "-l", "warning", "-c", str(config), "run"]
        process = launch("servo-actors", command, dict(os.environ), work, work / f"servo-{count}.log")
        _wait(lambda: all(d.first_poll is not None for d in drivers.values()), START_TIMEOUT, "every HELLO")
        cold = max(d.first_poll for d in drivers.values() if d.first_poll is not None) - process.started_at
        time.sleep(SETTLE)
        pids = marked_pids(process.marker)
        roles = _roles(process.pid, pids)
        memory = {role: _pss(members) for role, members in roles.items()}
        memory["total"] = _pss(pids)
        counts = {role: len(members) for role, members in roles.items()}
        host_each = memory["hosts"] / max(1, counts["hosts"])
        supervisor_each = memory["supervisors"] / max(1, counts["supervisors"])

        first, others = apps[0], apps[1:]
        for app in others:  # every other application busy with a MEASURE of its own
            drivers[app].measure()
        for app in others:
            _wait(drivers[app].progressed.is_set, STEP_TIMEOUT, f"{app} measuring")
        samples = []
        driver = drivers[first]
        for _ in range(cancels):
            driver.cancelled.clear()
            driver.progressed.clear()
            with driver.lock:
                driver.cancel_armed = True
            polls = driver.polls
            driver.measure()
            if not driver.cancelled.wait(STEP_TIMEOUT):
                raise BenchError(f"{first}: no cancelled result within {STEP_TIMEOUT:g}s")
            if driver.cancel_sent is not None and driver.cancelled_at is not None:
                samples.append(driver.cancelled_at - driver.cancel_sent)
            _wait(lambda polls=polls: driver.polls > polls + 1, STEP_TIMEOUT, "fresh connectors polling")
        return {
            "apps": count,
            "cold_start": cold,
            "memory": memory,
            "processes": counts,
            "host_each": host_each,
            "supervisor_each": supervisor_each,
            "cancel_p50": percentile(samples, 0.5) if samples else None,
            "cancel_p99": percentile(samples, 0.99) if samples else None,
            "cancels": len(samples),
        }
    finally:
        if process is not None:
            process.stop()
            if process.leaked:
                _log(f"{count} apps: processes {process.leaked} outlived the servo (killed)")
        server.stop()


def render(results: list[dict[str, Any]], info: dict[str, Any]) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"### Several applications in one servo (scripts/bench_apps.py, {when})",
        "",
        f"{info['cpu']}, {info['cores']} cores, load at start {info['load_at_start']}; Python "
        f"{info['python']}, Thespian {info['thespian']}. One connector per application (a `chaos` "
        "connector doing nothing); memory is PSS over every process of the servo, in an idle SLEEP.",
        "",
        "| apps | processes (supervisors / hosts) | PSS total | servo | admin+logger | supervisors | hosts "
        "| cold start to every HELLO | cancel p50 | cancel p99 (others busy) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m, c = r["memory"], r["processes"]
        lines.append(
            f"| {r['apps']} | {sum(c.values())} ({c['supervisors']} / {c['hosts']}) | {m['total']:.1f} MiB "
            f"| {m['servo']:.1f} | {m['admin'] + m['other']:.1f} | {m['supervisors']:.1f} | {m['hosts']:.1f} "
            f"| {r['cold_start']:.2f} s | {_ms(r['cancel_p50'])} | {_ms(r['cancel_p99'])} (n={r['cancels']}) |"
        )
    by_count = {r["apps"]: r for r in results}
    lines.append("")
    one = by_count.get(1)
    if one is not None:
        for r in results:
            if r["apps"] == 1:
                continue
            added = (r["memory"]["total"] - one["memory"]["total"]) / (r["apps"] - 1)
            bound = r["host_each"] + r["supervisor_each"]
            verdict = "met" if added <= bound else "missed"
            lines.append(
                f"- {r['apps']} applications: {added:.2f} MiB PSS per added application, against one "
                f"connector host ({r['host_each']:.2f}) plus one supervisor ({r['supervisor_each']:.2f}) "
                f"= {bound:.2f} MiB: target {verdict}."
            )
            if one["cancel_p99"] and r["cancel_p99"]:
                ratio = r["cancel_p99"] / one["cancel_p99"]
                verdict = "met" if ratio <= 1.5 else "missed"
                lines.append(
                    f"  Cancel p99 with {r['apps'] - 1} others busy: {ratio:.2f} times the single "
                    f"application's (target 1.5): {verdict}."
                )
    lines.append("")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer cancels per count")
    parser.add_argument(
        "--no-write", action="store_true", help="print the section, leave BENCHMARKS.md alone"
    )
    parser.add_argument("--apps", type=int, nargs="+", default=list(APP_COUNTS), help="application counts")
    args = parser.parse_args(argv)
    if any(count < 1 for count in args.apps):
        parser.error("--apps: counts must be 1 or more")
    signal.signal(signal.SIGTERM, _terminate)
    cancels = COUNTS["quick" if args.quick else "full"]["cancels"]
    info = machine()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-apps-") as work:
            for count in sorted(set(args.apps)):
                _log(f"{count} application(s): cold start, memory, {cancels} cancels")
                results.append(run_count(count, cancels, Path(work)))
    except BenchError as exc:
        _log(f"could not measure: {exc}")
        return 1
    text = render(results, info)
    print(text)
    if not args.no_write:
        write_section(BENCHMARKS, text, MARKS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
