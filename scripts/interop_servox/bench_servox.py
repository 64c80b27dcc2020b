"""Measure servox's control loop against servo-actors' embedded optimizer, for side-by-side benchmarks.

    python scripts/interop_servox/bench_servox.py --venv VENV              # all three, printed
    python scripts/interop_servox/bench_servox.py --venv VENV --json --cold-starts 5 --describes 200 --cancels 10

VENV is a virtualenv holding servox (``scripts/interop_servox.sh`` makes one; keep it with
``INTEROP_KEEP=1``, or ``python3 -m venv V && V/bin/pip install servox==25.3.0 'click<8.2'``).
servox runs with ``servox_bench_connector.BenchConnector`` (this directory), which answers
DESCRIBE, MEASURE and ADJUST offline and posts progress every ``--progress-every`` seconds.

What it measures, all from the optimizer's own request log (``GET /admin/state``: ``at`` is when a
request arrived, ``replied_at`` when its answer went out; same clock as this process):

- cold start: ``exec`` of ``servo run`` -> its HELLO arriving (one servox process per sample);
- describe: for N DESCRIBEs in a row, per command, the DESCRIBE going out (WHATS_NEXT answered)
  -> its DESCRIPTION arriving; and the whole loop's time per command (poll to poll);
- cancel: the ``cancel`` answer to a MEASURE progress post going out -> the ``cancelled`` result
  arriving. servox 25.3.0 exits after every cancel (AttributeError), so each sample starts a new
  servox; the time it takes to come back is not counted here (it is the cold start).

Every process it starts is stopped by PID (SIGTERM, then SIGKILL after ``STOP_TIMEOUT``); every
wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
APP = "bench.test/servox"
TOKEN = "bench-token"
HTTP_TIMEOUT = 5.0
START_TIMEOUT = 20.0
"""Seconds for the optimizer to print its URL."""
SAMPLE_TIMEOUT = 60.0
"""Seconds one sample (a cold start, a cancel) may take before the run is abandoned."""
DESCRIBE_TIMEOUT_PER_COMMAND = 1.0
STOP_TIMEOUT = 10.0
POLL_INTERVAL = 0.05
CANCEL_MEASURE_SECONDS = 30
"""Length of each MEASURE to be cancelled; its first progress post is answered cancel."""

SERVOX_CONFIG = """\
connectors:
  bench: servox_bench_connector.BenchConnector
bench:
  progress_every: {progress_every}
"""


class BenchError(Exception):
    """A run that could not be measured (a process did not start, a wait ran out)."""


def _stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(STOP_TIMEOUT)


class Optimizer:
    """``servo-actors optimizer serve`` with a scripted plan, on a free loopback port."""

    def __init__(self, workdir: Path, script: list[dict[str, Any]]) -> None:
        plan = workdir / f"plan-{time.monotonic_ns()}.json"  # JSON is YAML
        plan.write_text(json.dumps({"app": APP, "token": TOKEN, "sleep": "60s", "script": script}))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "servo_actors", "optimizer", "serve", "--port", "0", "--plan", str(plan)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.url = self._read_url()

    def _read_url(self) -> str:
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        deadline, text = time.monotonic() + START_TIMEOUT, b""
        while time.monotonic() < deadline and self.process.poll() is None:
            text += self.process.stdout.read() or b""
            for word in text.decode(errors="replace").split():
                if word.startswith("http://127.0.0.1:"):
                    return word
            time.sleep(POLL_INTERVAL)
        _stop(self.process)
        raise BenchError("the embedded optimizer did not start")

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/admin/state", timeout=HTTP_TIMEOUT) as response:
            return json.load(response)

    def wait_until(self, holds: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str) -> list:
        deadline = time.monotonic() + timeout
        while True:
            history = self.state()["history"]
            if holds(history):
                return history
            if time.monotonic() >= deadline:
                raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(POLL_INTERVAL)

    def stop(self) -> None:
        _stop(self.process)


class Servox:
    """One ``servo run`` process against ``optimizer``."""

    def __init__(self, venv: Path, workdir: Path, optimizer: Optimizer, log_level: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSANI_", "SERVO_"))}
        env.update(
            OPSANI_OPTIMIZER=APP,
            OPSANI_TOKEN=TOKEN,
            OPSANI_BASE_URL=optimizer.url,
            PYTHONPATH=str(HERE),
            PYTHONWARNINGS="ignore",
            NO_PROXY="127.0.0.1",
        )
        self.log = open(workdir / "servox.log", "ab")  # noqa: SIM115 (closed in stop)
        self.started_at = time.time()
        self.process = subprocess.Popen(
            [
                str(venv / "bin" / "servo"),
                "--no-color",
                "-l",
                log_level,
                "-c",
                str(workdir / "servo.yaml"),
                "run",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=env,
            cwd=workdir,
        )

    def stop(self) -> int:
        try:
            return _stop(self.process)
        finally:
            self.log.close()


def _events(history: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in history if e.get("event") == name]


def _summary(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(ordered[-1], 2),
    }


def bench_cold_start(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    optimizer = Optimizer(workdir, [])  # every poll gets SLEEP: only HELLO matters here
    samples = []
    try:
        for _ in range(args.cold_starts):
            seen = len(_events(optimizer.state()["history"], "HELLO"))
            servox = Servox(args.venv, workdir, optimizer, args.log_level)
            try:
                history = optimizer.wait_until(
                    lambda h, seen=seen: len(_events(h, "HELLO")) > seen, SAMPLE_TIMEOUT, "HELLO"
                )
            finally:
                servox.stop()
            samples.append((_events(history, "HELLO")[-1]["at"] - servox.started_at) * 1000)
    finally:
        optimizer.stop()
    return _summary(samples)


def bench_describe(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    count = args.describes
    optimizer = Optimizer(workdir, [{"cmd": "DESCRIBE", "param": {}}] * count)
    try:
        servox = Servox(args.venv, workdir, optimizer, args.log_level)
        try:
            history = optimizer.wait_until(
                lambda h: len(_events(h, "DESCRIPTION")) >= count,
                START_TIMEOUT + count * DESCRIBE_TIMEOUT_PER_COMMAND,
                f"{count} DESCRIPTIONs",
            )
        finally:
            servox.stop()
    finally:
        optimizer.stop()
    sent = {
        e["reply"]["cmd_uid"]: e
        for e in _events(history, "WHATS_NEXT")
        if "cmd_uid" in (e.get("reply") or {})
    }
    per_command = [
        (result["at"] - sent[result["param"]["cmd_uid"]]["replied_at"]) * 1000
        for result in _events(history, "DESCRIPTION")
        if result["param"].get("cmd_uid") in sent
    ]
    polls = _events(history, "WHATS_NEXT")
    loop_ms = (polls[count]["at"] - polls[0]["at"]) * 1000 / count if len(polls) > count else None
    return {"servox_side": _summary(per_command), "loop_per_command_ms": loop_ms and round(loop_ms, 2)}


def bench_cancel(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    measure = {
        "cmd": "MEASURE",
        "param": {"metrics": ["throughput"], "control": {"duration": CANCEL_MEASURE_SECONDS}},
        "progress": ["cancel"],
    }
    optimizer = Optimizer(workdir, [measure] * args.cancels)
    samples, exit_codes = [], []
    try:
        for index in range(args.cancels):
            servox = Servox(args.venv, workdir, optimizer, args.log_level)
            try:
                history = optimizer.wait_until(
                    lambda h, n=index + 1: (
                        sum(
                            (e.get("param") or {}).get("status") == "cancelled"
                            for e in _events(h, "MEASUREMENT")
                        )
                        >= n
                    ),
                    SAMPLE_TIMEOUT,
                    "a cancelled result",
                )
                try:  # servox 25.3.0 exits by itself after a cancel; give it the chance
                    servox.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass
            finally:
                exit_codes.append(servox.stop())
            answered = [e for e in history if (e.get("reply") or {}).get("status") == "cancel"][-1]
            result = [e for e in _events(history, "MEASUREMENT") if e["param"].get("status") == "cancelled"][
                -1
            ]
            samples.append((result["at"] - answered["replied_at"]) * 1000)
    finally:
        optimizer.stop()
    return {**_summary(samples), "servox_exit_codes": sorted(set(exit_codes))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, required=True, help="virtualenv with servox installed")
    parser.add_argument("--cold-starts", type=int, default=5)
    parser.add_argument("--describes", type=int, default=200)
    parser.add_argument("--cancels", type=int, default=10)
    parser.add_argument("--progress-every", type=float, default=0.1)
    parser.add_argument("--log-level", default="WARNING", help="servox's -l (INFO is its default)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not (args.venv / "bin" / "servo").exists():
        parser.error(f"{args.venv} has no bin/servo: install servox there first")
    results: dict[str, Any] = {"servox_log_level": args.log_level}
    with tempfile.TemporaryDirectory(prefix="bench_servox.") as tmp:
        workdir = Path(tmp)
        (workdir / "servo.yaml").write_text(SERVOX_CONFIG.format(progress_every=args.progress_every))
        try:
            if args.cold_starts:
                results["cold_start_to_hello"] = bench_cold_start(args, workdir)
            if args.describes:
                results["describe"] = bench_describe(args, workdir)
            if args.cancels:
                results["cancel_to_cancelled"] = bench_cancel(args, workdir)
        except BenchError as exc:
            print(f"bench_servox.py: {exc}; servox's log:", file=sys.stderr)
            print((workdir / "servox.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            return 1
    print(json.dumps(results, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
