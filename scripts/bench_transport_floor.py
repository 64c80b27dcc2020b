"""How far the servo's operation round trip is from the least its transport can cost.

    python scripts/bench_transport_floor.py            # full run (about 2 minutes); writes BENCHMARKS.md
    python scripts/bench_transport_floor.py --quick    # a smoke check; --no-write leaves BENCHMARKS.md alone

Three round trips of the same shape, 2N + 2 messages for N = 4 connectors, measured in alternating
rounds so that the machine's load falls on all three alike:

- **servo**: ``ServoRuntime.run("check")`` on N no-op connectors: the runtime tells the supervisor
  a ``Begin``, it calls each connector host, each answers, the supervisor answers ``Done``. The
  rules, the restart ledger, the liveness watch and the result checks are in it.
- **Thespian floor**: the same messages through the same transport (``ActorSystemHandle``: the
  servo's Thespian with its patches and authenticated messages) between actors that do nothing
  else (``bench_support/floor_actors.py``): what any design on Thespian pays.
- **pipe floor**: the same messages, pickled, over pipes between forked processes (a hub and N
  leaves): what a design without Thespian could reach.

The section between the bench_transport_floor markers of BENCHMARKS.md is replaced. Every process
it starts is stopped by PID (the actor systems by their session, killed as the servo kills them).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import select
import signal
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_support.floor_actors import Done, FloorHub, Request, Setup
from bench_support.report import machine, percentile, write_section

from servo_actors.actors import ServoRuntime
from servo_actors.actors.transport.system import ActorSystemHandle
from servo_actors.config.models import ServoConfig

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_transport_floor:start -->", "<!-- bench_transport_floor:end -->")
CONNECTORS = 4
WARMUP = 20
ANSWER_TIMEOUT = 10.0
"""Seconds one round trip may take before the run stops as hung."""
HEADER = struct.Struct("!I")
NOTE = (
    "- What this means: any design on Thespian pays the floor for the ten acknowledged messages"
    " of a no-op operation, and on these machines the floor alone is about servox's whole per-c"
    "ommand overhead (`bench_loop.py`: 2.06 ms on 2026-12-05). What the servo adds above it (it"
    "s rules, restart ledger, liveness watch, result checks) is the gap in the bullet above. On"
    "ly a transport other than Thespian's for an operation's messages (the pipe floor) could re"
    "ach servox's figure; it is not built: Thespian's ChildActorExited, its addresses and the a"
    "uthenticated messages would all have to be kept beside it."
)
"""A finding, written with the numbers."""


class FloorError(RuntimeError):
    pass


# ----- the pipe floor: a hub and N leaves, forked, pickled messages over pipes ---------------------


def _send(fd: int, message: Any) -> None:
    body = pickle.dumps(message)
    os.write(fd, HEADER.pack(len(body)) + body)


def _read_exact(fd: int, size: int, timeout: float) -> bytes | None:
    chunks, left = [], size
    while left:
        if not select.select([fd], [], [], timeout)[0]:
            raise FloorError(f"a pipe stayed silent for {timeout:g}s")
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(fd: int, timeout: float = ANSWER_TIMEOUT) -> Any:
    header = _read_exact(fd, HEADER.size, timeout)
    if header is None:
        return None
    body = _read_exact(fd, HEADER.unpack(header)[0], timeout)
    return None if body is None else pickle.loads(body)


def _serve_forever(work: Callable[[], bool]) -> None:
    """A forked child: run ``work`` until it says stop (its parent closed the pipe), then exit."""
    code = 0
    try:
        while work():
            pass
    except BaseException:
        code = 1
    os._exit(code)


class PipeFloor:
    def __init__(self, leaves: int) -> None:
        self.pids: list[int] = []
        to_hub_r, to_hub_w = os.pipe()
        from_hub_r, from_hub_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(to_hub_w)
            os.close(from_hub_r)
            self._hub(to_hub_r, from_hub_w, leaves)
        self.pids.append(pid)
        os.close(to_hub_r)
        os.close(from_hub_w)
        self._to_hub, self._from_hub = to_hub_w, from_hub_r
        ready = _receive(self._from_hub)
        if not isinstance(ready, Done):
            raise FloorError("the pipe hub did not start")
        self.pids.extend(ready.pids)

    @staticmethod
    def _hub(inbox: int, outbox: int, leaves: int) -> None:
        links = []
        pids = []
        for _ in range(leaves):
            down_r, down_w = os.pipe()
            up_r, up_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(down_w)
                os.close(up_r)
                os.close(inbox)
                os.close(outbox)

                def leaf(down: int = down_r, up: int = up_w) -> bool:
                    message = _receive(down, timeout=3600)
                    if message is None:
                        return False
                    _send(up, ("reply", message.request_id))
                    return True

                _serve_forever(leaf)
            os.close(down_r)
            os.close(up_w)
            links.append((down_w, up_r))
            pids.append(pid)
        _send(outbox, Done(-1, tuple(pids)))

        def hub() -> bool:
            message = _receive(inbox, timeout=3600)
            if message is None:
                return False
            for down, _ in links:
                _send(down, Request(message.request_id))
            for _, up in links:
                _receive(up)
            _send(outbox, Done(message.request_id))
            return True

        _serve_forever(hub)

    def round_trip(self, request_id: int) -> None:
        _send(self._to_hub, Request(request_id))
        answer = _receive(self._from_hub)
        if not isinstance(answer, Done) or answer.request_id != request_id:
            raise FloorError(f"the pipe hub answered {answer!r}")

    def close(self) -> None:
        os.close(self._to_hub)
        os.close(self._from_hub)
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.pids[:1]:
            os.waitpid(pid, 0)  # the leaves are the hub's children: reaped by init once it is gone


# ----- the Thespian floor: the same transport, actors that do nothing else -------------------------


class ThespianFloor:
    def __init__(self, run_dir: Path, leaves: int) -> None:
        self._system = ActorSystemHandle(run_dir)
        self._system.start()
        try:
            self._hub = self._system.create_actor(FloorHub)
            self._system.tell(self._hub, Setup(leaves))
            self._await(-1)
        except BaseException:
            self._system.kill()
            raise

    def _await(self, request_id: int) -> None:
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while time.monotonic() < deadline:
            message = self._system.listen(deadline - time.monotonic())
            if isinstance(message, Done) and message.request_id == request_id:
                return
        raise FloorError(
            f"the Thespian floor's hub did not answer request {request_id} in {ANSWER_TIMEOUT:g}s"
        )

    def round_trip(self, request_id: int) -> None:
        self._system.tell(self._hub, Request(request_id))
        self._await(request_id)

    def close(self) -> None:
        survivors = self._system.kill()
        if survivors:
            raise FloorError(f"processes {survivors} survived the Thespian floor's kill")


# ----- the servo ---------------------------------------------------------------------------------


class ServoPath:
    def __init__(self, run_dir: Path, leaves: int) -> None:
        connectors = [{"name": f"c{i}", "type": "chaos"} for i in range(leaves)]
        self._runtime = ServoRuntime(ServoConfig.model_validate({"connectors": connectors}), run_dir=run_dir)
        self._runtime.start()

    def round_trip(self, request_id: int) -> None:
        result = self._runtime.run("check")
        if result.status != "ok":
            raise FloorError(f"the servo's check came back {result.status} ({result.reason})")

    def close(self) -> None:
        self._runtime.stop()


# ----- the run -----------------------------------------------------------------------------------


def measure(rounds: int, per_round: int, run_dir: Path) -> dict[str, list[float]]:
    paths: dict[str, Any] = {}
    times: dict[str, list[float]] = {"servo": [], "thespian_floor": [], "pipe_floor": []}
    try:
        paths["pipe_floor"] = PipeFloor(CONNECTORS)  # forked first, before any thread exists
        paths["thespian_floor"] = ThespianFloor(run_dir / "floor", CONNECTORS)
        paths["servo"] = ServoPath(run_dir / "servo", CONNECTORS)
        request_id = 0
        for path in paths.values():
            for _ in range(WARMUP):
                request_id += 1
                path.round_trip(request_id)
        for round_index in range(rounds):
            for name in times:
                path = paths[name]
                for _ in range(per_round):
                    request_id += 1
                    began = time.perf_counter()
                    path.round_trip(request_id)
                    times[name].append(time.perf_counter() - began)
            print(f"round {round_index + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        for path in paths.values():
            path.close()
    return times


def summarize(times: dict[str, list[float]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, values in times.items():
        summary[name] = {
            "p50_ms": round(statistics.median(values) * 1e3, 3),
            "p99_ms": round(percentile(values, 0.99) * 1e3, 3),
            "samples": len(values),
        }
    servo, floor = summary["servo"]["p50_ms"], summary["thespian_floor"]["p50_ms"]
    summary["servo_above_thespian_floor_ms"] = round(servo - floor, 3)
    summary["thespian_floor_share_of_servo"] = round(floor / servo, 3) if servo else None
    return summary


def render(summary: dict[str, Any], facts: dict[str, Any], quick: bool) -> str:
    rows = [
        ('servo (`ServoRuntime.run("check")`)', summary["servo"]),
        ("Thespian floor (same transport, do-nothing actors)", summary["thespian_floor"]),
        ("pipe floor (pickles over pipes, forked processes)", summary["pipe_floor"]),
    ]
    lines = [
        "## The transport floor (scripts/bench_transport_floor.py)",
        "",
        f"One no-op operation on {CONNECTORS} connectors is {2 * CONNECTORS + 2} messages: the same "
        "shape measured three ways, in alternating rounds."
        + (" A `--quick` run: few samples." if quick else ""),
        "",
        "| round trip | p50 | p99 | samples |",
        "|---|---:|---:|---:|",
    ]
    for label, row in rows:
        lines.append(f"| {label} | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms | {row['samples']} |")
    lines += [
        "",
        f"- The servo is {summary['servo_above_thespian_floor_ms']:.2f} ms above the Thespian floor; the "
        f"floor is {summary['thespian_floor_share_of_servo']:.0%} of the servo's round trip.",
        NOTE,
        f"- Machine: {facts['cpu']}, {facts['cores']} cores, load at start {facts['load_at_start']}, "
        f"Linux {facts['kernel']}, Python {facts['python']}, Thespian {facts['thespian']}, "
        f"{facts['date']}, tree {facts['tree']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 rounds of 50 (a smoke check)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=200)
    parser.add_argument("--no-write", action="store_true", help="leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    rounds, per_round = (3, 50) if args.quick else (args.rounds, args.per_round)
    facts = machine()
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        summary = summarize(measure(rounds, per_round, Path(tmp)))
    print(json.dumps(summary, indent=2))
    if not args.no_write:
        write_section(BENCHMARKS, render(summary, facts, args.quick), MARKS)
        print(f"wrote {BENCHMARKS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
