"""Benchmark connectors on other hosts: remote versus local round trip and cancel, member-loss detection.

    python scripts/bench_convention.py                 # 100 round trips, 50 cancels, 5 losses per topology
    python scripts/bench_convention.py --trials 10 --losses 2 --no-netns   # a smoke check

Topologies: ``loopback`` (the servo on 127.0.0.1, the agent on 127.0.0.2 of this machine) and,
where the machine allows it (root, ``ip netns``), ``netns``: two network namespaces joined by a
veth pair (created and removed here), so that the two systems really have different addresses.

Each topology runs in a worker process (this script with ``--worker``, inside the leader's
namespace for ``netns``): a convention's shared key must be installed before the first actor
system of a process starts. The worker runs a real ServoRuntime and real ``servo-actors agent``
processes and measures, with one ``chaos`` connector:

- round trip: ``runtime.run("check")``, the connector local, then placed on the agent;
- cancel -> fresh and answering: a measure in flight whose connector is hung in ``time.sleep``,
  then ``runtime.cancel()`` (which returns once the fresh connector has run ``startup()`` and
  answered), local and placed;
- member loss: a measure in flight on the placed connector, then SIGKILL of the agent process
  (its system goes with it) -> the measure's result, ``failed``/``host-lost`` (default heartbeat:
  1 s interval, 5 s timeout). The agent is started again and the connector placed again between
  trials.

Prints the numbers and writes them into BENCHMARKS.md (between the bench_convention markers).
Every process it starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "support"))  # netns.py: the same namespaces the tests use

from bench_support.report import load_average, machine, percentile, write_section  # noqa: E402

BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_convention:start -->", "<!-- bench_convention:end -->")
PLACE_TIMEOUT = 60.0
"""Seconds the placed connector may take to be placed (and answer) before a worker gives up."""
AGENT_STOP_TIMEOUT = 20.0
HANG_SETTLE = 0.05
"""Seconds between beginning the hung measure and cancelling it (the call has reached the connector)."""
LOSS_SETTLE = 0.3
"""Seconds between beginning the measure and killing the agent."""
RESULT_TIMEOUT = 60.0


# ----- the worker (one topology, inside the leader's namespace) ------------------------------------


def _chaos(name: str, hang_file: Path, placed: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "type": "chaos",
        "config": {
            "metrics": {"x": {"unit": "u"}},
            "values": {"x": 1},
            "faults": {"measure": {"action": "sleep", "seconds": 600, "only_if_file": str(hang_file)}},
        },
    }
    if placed:
        entry["placement"] = {"capability": "bench"}
    return entry


def _config(args: dict[str, Any], placed: bool, hang_file: Path, heartbeat: dict[str, str] | None) -> Any:
    from servo_actors.config.models import ServoConfig

    supervisor: dict[str, Any] = {
        "convention": {
            "listen": f"{args['leader_ip']}:{args['leader_port']}",
            "secret_file": args["secret_file"],
            **({"heartbeat": heartbeat} if heartbeat else {}),
        }
    }
    return ServoConfig.model_validate(
        {"supervisor": supervisor, "connectors": [_chaos("c", hang_file, placed)]}
    )


class _Agent:
    def __init__(self, args: dict[str, Any], log: Path) -> None:
        command = [
            *args["member_prefix"],
            sys.executable,
            "-m",
            "servo_actors",
            "agent",
            "--listen",
            f"{args['member_ip']}:{args['member_port']}",
            "--join",
            f"{args['leader_ip']}:{args['leader_port']}",
            "--capability",
            "bench",
            "--secret-file",
            args["secret_file"],
            "--rejoin-min",
            "100ms",
            "--rejoin-max",
            "500ms",
        ]
        self._log = open(log, "a")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(AGENT_STOP_TIMEOUT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(AGENT_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(AGENT_STOP_TIMEOUT)
        self._log.close()


def _placed(runtime: Any) -> str:
    deadline = time.monotonic() + PLACE_TIMEOUT
    while time.monotonic() < deadline:
        child = runtime.status().children[0]
        if (
            child.state == "ready"
            and getattr(child, "where", "local") not in ("local", None)
            and not str(child.where).startswith("waiting")
        ):
            return child.where
        time.sleep(0.05)
    raise RuntimeError("the placed connector was not placed in time")


def _round_trips(runtime: Any, trials: int) -> list[float]:
    samples = []
    for _ in range(trials):
        started = time.perf_counter()
        result = runtime.run("check")
        samples.append((time.perf_counter() - started) * 1000)
        if result.status != "ok":
            raise RuntimeError(f"check failed: {result.message}")
    return samples


def _cancels(runtime: Any, trials: int, hang_file: Path) -> list[float]:
    from servo_actors.connectors.base import Control

    samples = []
    hang_file.touch()
    try:
        for _ in range(trials):
            op = runtime.begin("measure", control=Control(duration=60))
            time.sleep(HANG_SETTLE)
            started = time.perf_counter()
            runtime.cancel()
            samples.append((time.perf_counter() - started) * 1000)
            if op.result is None or op.result.status != "cancelled":
                raise RuntimeError(f"the cancelled measure resolved {op.result}")
    finally:
        hang_file.unlink(missing_ok=True)
    return samples


def _losses(args: dict[str, Any], trials: int, directory: Path, hang_file: Path) -> list[dict[str, Any]]:
    from servo_actors.actors import ServoRuntime
    from servo_actors.connectors.base import Control

    samples = []
    agent = _Agent(args, directory / "agent-loss.log")
    runtime = ServoRuntime(_config(args, True, hang_file, None), run_dir=directory / "run-loss")
    hang_file.touch()
    try:
        runtime.start()
        for _ in range(trials):
            _placed(runtime)
            op = runtime.begin("measure", control=Control(duration=60))
            time.sleep(LOSS_SETTLE)
            killed_at = time.monotonic()
            agent.kill()
            result = runtime.wait(op, RESULT_TIMEOUT)
            noticed = time.monotonic() - killed_at
            if result is None:
                raise RuntimeError("the measure never resolved after the agent was killed")
            samples.append({"seconds": noticed, "status": result.status, "reason": result.reason})
            agent.stop()
            agent = _Agent(args, directory / "agent-loss.log")
    finally:
        hang_file.unlink(missing_ok=True)
        runtime.stop()
        agent.stop()
    return samples


def worker(args: dict[str, Any]) -> dict[str, Any]:
    from servo_actors.actors import ServoRuntime

    directory = Path(args["directory"])
    hang_file = directory / "hang"
    out: dict[str, Any] = {}
    for placement in ("local", "placed"):
        placed = placement == "placed"
        agent = _Agent(args, directory / f"agent-{placement}.log") if placed else None
        runtime = ServoRuntime(_config(args, placed, hang_file, None), run_dir=directory / f"run-{placement}")
        try:
            started = time.perf_counter()
            runtime.start()
            if placed:
                out["placed_on"] = _placed(runtime)
            out[f"{placement}_start_ms"] = (time.perf_counter() - started) * 1000
            out[f"{placement}_round_trip_ms"] = _round_trips(runtime, args["trials"])
            out[f"{placement}_cancel_ms"] = _cancels(runtime, args["cancels"], hang_file)
        finally:
            runtime.stop()
            if agent is not None:
                agent.stop()
    out["losses"] = _losses(args, args["losses"], directory, hang_file)
    return out


# ----- the orchestration ------------------------------------------------------------------------------


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _run_worker(args: dict[str, Any], prefix: list[str]) -> dict[str, Any]:
    command = [*prefix, sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"the {args['topology']} worker failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stats(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{percentile(ordered, 0.5):.1f} / {percentile(ordered, 0.99):.1f} / {ordered[-1]:.1f}"


def report(
    results: dict[str, dict[str, Any]], info: dict[str, Any], load_end: str, options: argparse.Namespace
) -> str:
    lines = [
        f"### Connectors on other hosts ({info['date']})",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, Linux {info['kernel']}, Python {info['python']}, "
        f"Thespian {info['thespian']}; load average at start {info['load_at_start']}, at the end {load_end} "
        f"(a shared machine: other jobs ran); tree {info['tree']}.",
        "",
        "One `chaos` connector, local or placed on a `servo-actors agent` (capability `bench`). Round trip: "
        '`runtime.run("check")`. Cancel: a measure in flight whose connector is hung in `time.sleep`, '
        "then `runtime.cancel()`, which returns once the fresh connector has run `startup()` and answered "
        "(remotely: the leader asks the member to SIGKILL the host's process group, descendants and cgroup, "
        "the member reports it gone, the leader asks for a fresh one, which answers the leader directly). "
        f"{options.trials} round trips and {options.cancels} cancels per row.",
        "",
        "| topology | connector | start ms | round trip p50 / p99 / max ms | cancel -> fresh and answering p50 / p99 / max ms |",
        "|---|---|---:|---:|---:|",
    ]
    for topology, out in results.items():
        for placement in ("local", "placed"):
            where = "local" if placement == "local" else f"on the agent ({out.get('placed_on')})"
            lines.append(
                f"| {topology} | {where} | {out[f'{placement}_start_ms']:.0f} | "
                f"{_stats(out[f'{placement}_round_trip_ms'])} | {_stats(out[f'{placement}_cancel_ms'])} |"
            )
    lines += [
        "",
        "Member loss (SIGKILL of the agent process during a measure -> the measure's result), default heartbeat (1 s interval, 5 s timeout):",
        "",
    ]
    for topology, out in results.items():
        seconds = [s["seconds"] for s in out["losses"]]
        reasons = sorted({f"{s['status']}/{s['reason']}" for s in out["losses"]})
        if seconds:
            lines.append(
                f"- {topology}: {len(seconds)} trials, noticed after median {percentile(sorted(seconds), 0.5):.2f} s, "
                f"max {max(seconds):.2f} s (bound: 10 s); results {', '.join(reasons)}."
            )
    lines += [
        "",
        "What bounds them: a remote cancel is two more network round trips than a local one (kill request "
        "and its confirmation, spawn request) plus the fresh host's connection to the leader's supervisor; "
        "a loss is noticed one heartbeat timeout after the last message, at the supervisor's next tick "
        "(0.25 s busy).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--cancels", type=int, default=50)
    parser.add_argument("--losses", type=int, default=5)
    parser.add_argument("--no-netns", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="print, do not write BENCHMARKS.md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        print(json.dumps(worker(json.loads(options.worker))))
        return 0
    import netns

    info = machine()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-convention-") as scratch:
        key = Path(scratch) / "convention.key"
        key.write_text(secrets.token_urlsafe(48))
        key.chmod(0o600)
        common = {
            "secret_file": str(key),
            "trials": options.trials,
            "cancels": options.cancels,
            "losses": options.losses,
        }
        loopback = Path(scratch) / "loopback"
        loopback.mkdir()
        results["loopback"] = _run_worker(
            {
                **common,
                "topology": "loopback",
                "directory": str(loopback),
                "leader_ip": "127.0.0.1",
                "leader_port": _free_port("127.0.0.1"),
                "member_ip": "127.0.0.2",
                "member_port": _free_port("127.0.0.2"),
                "member_prefix": [],
            },
            [],
        )
        why = "--no-netns" if options.no_netns else netns.unavailable()
        if why is None:
            namespaces = netns.TwoNamespaces.create()
            try:
                directory = Path(scratch) / "netns"
                directory.mkdir()
                results["netns (veth)"] = _run_worker(
                    {
                        **common,
                        "topology": "netns",
                        "directory": str(directory),
                        "leader_ip": namespaces.leader_ip,
                        "leader_port": 19100,
                        "member_ip": namespaces.member_ip,
                        "member_port": 19201,
                        "member_prefix": namespaces.exec_prefix(namespaces.member_ns),
                    },
                    namespaces.exec_prefix(namespaces.leader_ns),
                )
            finally:
                namespaces.remove()
        else:
            print(f"netns topology skipped: {why}", file=sys.stderr)
    text = report(results, info, load_average(), options)
    print(text)
    if not options.no_write:
        write_section(BENCHMARKS, text, MARKS)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
