"""Benchmark cancels against the real local Kubernetes control plane: cancel -> fresh connector answering.

    python scripts/bench_kube_cancels.py                 # 40 cancels, a random seed
    python scripts/bench_kube_cancels.py --cancels 100 --seed 7
    python scripts/bench_kube_cancels.py --no-write      # print only
    python scripts/bench_kube_cancels.py --real-node     # the Deployment's pods on the real node

Starts its own cluster (scripts/kube-cluster up into a temporary directory, with --owner-pid) and, in
it, the scenario of tests/connectors_kubernetes_real/test_real_cancels.py: `servo-actors run` (a real
subprocess) tuning a Deployment with an HPA through the kubernetes connector, the embedded optimizer
in this process pressing a cancel at a seeded random moment of each ADJUST or MEASURE (patching,
rollout wait, settlement, measurement), and a DESCRIBE queued right behind it. The same checks run on
every cancel (tests/support/kube_real.py, ``run_cancel_storm``); the figures are read from the
optimizer's request history, so they are what the optimizer saw:

- cancel -> `cancelled`: the optimizer answering `cancel` to a progress post -> the `cancelled`
  result arriving (the kills sent, the operation's answer back);
- cancel -> fresh connector answering: the same start -> the DESCRIPTION of the DESCRIBE behind it,
  answered by the connector's fresh process from the real API server (a new process forked, the
  connector started, its kubeconfig read, a TLS connection made, the Deployment and the HPAs read).

With ``--real-node`` the cluster has its real node and web's pods run there: the project's app
(servo-actors.local/app:dev) with a readiness probe, so every rollout really starts and stops
containers (sandbox, container, probe; SIGTERM and the grace period of the old pods), with settings
sized to the node's 1 CPU and 2 GiB (kube_real.py's ``real_manifest`` and ``real_values``, at most 3 replicas).

Prints the numbers and writes them into BENCHMARKS.md (the section between the bench_kube_cancels
markers, or the bench_kube_cancels_real ones). The cluster is taken down at the end (`down`, and
`--owner-pid` should this process die).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))

from bench_support.report import load_average, machine, percentile, write_section  # noqa: E402
from kube_local import LocalCluster  # noqa: E402
from kube_real import (  # noqa: E402
    CancelStorm,
    CommandQueue,
    ServoRun,
    connector,
    create_app,
    random_values,
    real_manifest,
    real_values,
    run_cancel_storm,
    servo_config,
)

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_kube_cancels:start -->", "<!-- bench_kube_cancels:end -->")
REAL_MARKS = ("<!-- bench_kube_cancels_real:start -->", "<!-- bench_kube_cancels_real:end -->")
DEFAULT_CANCELS = 40
PROGRESS_INTERVAL = "100ms"
"""How often the servo posts progress: a cancel waits for the next post (not counted here)."""


def ms(values: list[float], fraction: float) -> float:
    return percentile(values, fraction) * 1000


def figures(storm: CancelStorm) -> dict[str, Any]:
    fresh = [record.fresh_after for record in storm.cancels]
    cancelled = [r.cancelled_after for r in storm.cancels if r.cancelled_after is not None]
    return {
        "seed": storm.seed,
        "trials": storm.trials,
        "cancels": len(storm.cancels),
        "answered_to_progress": len(storm.answered_to("progress")),
        "phases": storm.phases(),
        "elapsed_s": round(storm.elapsed, 1),
        "fresh_ms": {"p50": ms(fresh, 0.5), "p99": ms(fresh, 0.99), "max": max(fresh) * 1000},
        "cancelled_ms": {"p50": ms(cancelled, 0.5), "p99": ms(cancelled, 0.99), "max": max(cancelled) * 1000},
        "samples_fresh_ms": [round(value * 1000, 1) for value in fresh],
    }


def versions() -> str:
    pinned = dict(
        line.split("=", 1) for line in (ROOT / "kube" / "versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    return f"Kubernetes {pinned['KUBERNETES_VERSION']}, etcd {pinned['ETCD_VERSION']}, kwok {pinned['KWOK_VERSION']}"


def report(result: dict[str, Any], where: dict[str, Any], load_after: str, real_node: bool = False) -> str:
    fresh, cancelled = result["fresh_ms"], result["cancelled_ms"]
    phases = ", ".join(f"{name} {count}" for name, count in result["phases"].items())
    title = (
        "Cancels against real pods on the real node (scripts/bench_kube_cancels.py --real-node"
        if real_node
        else "Cancels against the real control plane (scripts/bench_kube_cancels.py"
    )
    pods = (
        " Its pods run on the real node (kubelet, containerd, runc): the project's app with a readiness "
        "probe every second, so each rollout starts and stops real containers."
        if real_node
        else ""
    )
    return "\n".join([
        f"### {title}, {where['date']})",
        "",
        f"Machine: {where['cpu']}, {where['cores']} cores, Linux {where['kernel']}, Python {where['python']}; "
        f"{versions()}; commit {where['tree']}; load average at start {where['load_at_start']}, at the end "
        f"{load_after} (the cluster, the servo and this process share the machine).",
        "",
        f"`servo-actors run` tuning a Deployment with an HPA through the kubernetes connector; {result['cancels']} "
        f"cancels in {result['trials']} trials ({result['elapsed_s']:.0f} s, seed {result['seed']}), at random "
        f"moments: {phases}.{pods} Measured from the optimizer's `cancel` answer:",
        "",
        "| | p50 | p99 | max |",
        "|---|---:|---:|---:|",
        f"| cancel -> `cancelled` received | {cancelled['p50']:.0f} ms | {cancelled['p99']:.0f} ms "
        f"| {cancelled['max']:.0f} ms |",
        f"| cancel -> fresh connector's DESCRIPTION (read from the real API server) received | "
        f"{fresh['p50']:.0f} ms | {fresh['p99']:.0f} ms | {fresh['max']:.0f} ms |",
        "",
    ]) + "\n"  # fmt: skip


def run(cancels: int, seed: int, real_node: bool = False) -> dict[str, Any]:
    # A short directory: the real node's containerd socket path must fit in 108 bytes.
    with tempfile.TemporaryDirectory(prefix="bkc-") as scratch:
        cluster = LocalCluster.up(
            Path(scratch) / "cluster", owner_pid=os.getpid(), hpa_downscale_stabilization="0s",
            real_nodes=1 if real_node else 0,
        )  # fmt: skip
        optimizer = CommandQueue.serve()
        servo = None
        try:
            namespace = cluster.new_namespace("bench-cancels")
            create_app(cluster, namespace, manifest=real_manifest() if real_node else None)
            config = servo_config(
                optimizer.server, connector(cluster, namespace), progress_interval=PROGRESS_INTERVAL
            )
            servo = ServoRun.start(Path(scratch) / "servo", config)
            optimizer.context = servo.log
            first = optimizer.run({"cmd": "DESCRIBE", "param": {}})
            if first.status != "ok":
                raise RuntimeError(f"the first DESCRIBE: {first.result}\n{servo.log()}")
            storm = run_cancel_storm(
                cluster, namespace, optimizer, servo, random.Random(seed), seed, cancels, 3 * cancels,
                say=lambda line: print(line, flush=True), values_of=real_values if real_node else random_values,
            )  # fmt: skip
            print(storm.summary(), flush=True)
            if len(storm.answered_to("progress")) < cancels:
                raise RuntimeError(f"only {len(storm.cancels)} cancels landed: {storm.summary()}")
            return figures(storm)
        finally:
            if servo is not None:
                servo.stop()
            optimizer.stop()
            done = cluster.down()
            if done.returncode != 0:
                print(f"bench_kube_cancels: scripts/kube-cluster down failed: {done.stderr}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cancels", type=int, default=DEFAULT_CANCELS, help=f"default {DEFAULT_CANCELS}")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    parser.add_argument("--real-node", action="store_true", help="web's pods on the real node (needs root)")
    args = parser.parse_args()
    if args.cancels < 2:
        parser.error(f"--cancels must be at least 2, got {args.cancels}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    where = machine()
    try:
        result = run(args.cancels, seed, args.real_node)
    except (AssertionError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench_kube_cancels: {exc}", file=sys.stderr)
        return 1
    text = report(result, where, load_average(), args.real_node)
    print(text + json.dumps(result, indent=1))
    if not args.no_write:
        write_section(BENCHMARKS, text, REAL_MARKS if args.real_node else MARKS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
