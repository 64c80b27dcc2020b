"""Benchmark the tuning pod (`strategy: tuning`) against the real local Kubernetes control plane.

    python scripts/bench_kube_tuning.py                  # 60 ADJUSTs, 60 cancels, a random seed
    python scripts/bench_kube_tuning.py --adjusts 20 --cancels 20 --seed 7
    python scripts/bench_kube_tuning.py --no-write       # print only

Starts its own cluster (scripts/kube-cluster up into a temporary directory, with --owner-pid), a
Deployment `web` (2 replicas) and `servo-actors run` (a real subprocess) with the kubernetes
connector in `strategy: tuning`, driven command by command by the embedded optimizer in this
process (tests/support/kube_real.py). Every ADJUST asks the tuning component `web-tuning` for
values other than the pod's, so each one replaces the tuning pod: delete, wait until gone, create,
wait until Ready. Three figures:

- ADJUST -> tuning pod Ready: the optimizer sending the ADJUST -> its ADJUSTMENT arriving (the
  connector answers once the new pod is Ready; settlement 0), read from the optimizer's request log;
- where a replace spends its time: the same replace run in this process (the connector's
  ``adjust_tuning`` with its hook timing each point: deleted, gone, created, ready);
- cancel -> one Ready tuning pod again: an ADJUST cancelled at a seeded random moment of its
  replace (uniform over the p90 of the ADJUSTs above), the same ADJUST queued right behind it; from
  the optimizer's `cancel` answer to the second ADJUST's ADJUSTMENT arriving, which the next
  command's fresh connector sends once exactly one tuning pod with the requested values is Ready.
  Checked after each: one tuning pod, Ready, not being deleted, with the requested cpu and GOGC.

kwok decides when a pod is Ready and when a deleted one is gone (its stages, here the `fast` ones
with no delay): on a real node the container's start and readiness probe, and the grace period
of a deletion, add to these figures.

Prints the numbers and writes them into BENCHMARKS.md (between the bench_kube_tuning markers). The
cluster is taken down at the end (`down`, and `--owner-pid` should this process die).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "kube_tuning"))

from bench_support.report import load_average, machine, percentile, write_section  # noqa: E402
from kube_local import LocalCluster  # noqa: E402
from kube_real import COMMAND_TIMEOUT, CommandQueue, Exchange, ServoRun, servo_config  # noqa: E402
from kube_tuning_support import (  # noqa: E402
    env_of,
    main_container,
    ready,
    rolled_out,
    tuning_config,
    tuning_pods,
    web_deployment,
)

from servo_actors.connectors.base import ConnectorFailure  # noqa: E402
from servo_actors.connectors.kubernetes.client import KubeClient, KubeError, pods_path  # noqa: E402
from servo_actors.connectors.kubernetes.config import KubernetesConfig  # noqa: E402
from servo_actors.connectors.kubernetes.kubeconfig import resolve_access  # noqa: E402
from servo_actors.connectors.kubernetes.tuning import adjust_tuning, split_components  # noqa: E402

BENCHMARKS = ROOT / "BENCHMARKS.md"
MARKS = ("<!-- bench_kube_tuning:start -->", "<!-- bench_kube_tuning:end -->")
DEFAULT_ADJUSTS = 60
DEFAULT_CANCELS = 60
DEFAULT_PHASES = 20
PROGRESS_INTERVAL = "20ms"
"""How often the servo posts progress: a cancel lands on the next post. A replace takes about 0.1 s
on this cluster, so posts come often enough for a cancel to meet every part of it."""
CPUS = ["250m", "500m", "750m", "1"]
GOGCS = ["50", "100", "200", "300"]
POINTS = ("deleted", "gone", "created", "ready")


def ms(values: list[float], fraction: float) -> float:
    return percentile(values, fraction) * 1000


def stats(values: list[float]) -> dict[str, float]:
    return {"p50": ms(values, 0.5), "p99": ms(values, 0.99), "max": max(values) * 1000, "n": len(values)}


def cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def adjust(cpu: str, gogc: str) -> dict[str, Any]:
    settings = {"cpu": {"value": cores(cpu)}, "GOGC": {"value": int(gogc)}}
    state = {"application": {"components": {"web-tuning": {"settings": settings}}}}
    return {"cmd": "ADJUST", "param": {"state": state, "control": {"settlement": 0}}}


class PodLog:
    """Every change of the tuning pod, as a watch in this process sees it (wall-clock time, as the
    optimizer's request log): where a cancel left the replace is read from it afterwards."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client, self.namespace = client, namespace
        self.events: list[tuple[float, str | None, tuple[str, str] | None, bool, bool]] = []
        """(at, uid or None when gone, (cpu, GOGC), being deleted, Ready)."""
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pod-log", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)

    def _note(self, pod: dict[str, Any] | None) -> None:
        if pod is None:
            entry = (time.time(), None, None, False, False)
        else:
            values = (main_container(pod)["resources"]["requests"]["cpu"], env_of(pod).get("GOGC", ""))
            meta = pod["metadata"]
            entry = (time.time(), meta["uid"], values, bool(meta.get("deletionTimestamp")), ready(pod))
        with self.lock:
            self.events.append(entry)

    def _run(self) -> None:
        selector = {"fieldSelector": "metadata.name=web-tuning"}
        while not self.stopped.is_set():
            try:
                listed = self.client.get(pods_path(self.namespace), selector)
                items = listed.get("items") or []
                self._note(items[0] if items else None)
                since = {**selector, "resourceVersion": listed["metadata"]["resourceVersion"]}
                for kind, pod in self.client.watch(pods_path(self.namespace), since, 2):
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._note(None if kind == "DELETED" else pod)
                    if self.stopped.is_set():
                        return
            except KubeError:
                self.stopped.wait(0.2)

    def state_at(self, at: float, wanted: tuple[str, str]) -> str:
        """What the cluster held at ``at``, for an ADJUST asking for ``wanted``."""
        with self.lock:
            before = [e for e in self.events if e[0] <= at]
        if not before:
            return "unknown"
        _, uid, values, deleting, is_ready = before[-1]
        if uid is None:
            return "no pod (old one gone)"
        if values != wanted:
            return "old pod being deleted" if deleting else "old pod"
        return "new pod Ready" if is_ready else "new pod not Ready yet"


class Bench:
    """The cluster, the namespace, the servo and the optimizer of one run."""

    def __init__(self, cluster: LocalCluster, namespace: str, optimizer: CommandQueue, servo: ServoRun,
                 rng: random.Random, pod_log: PodLog) -> None:  # fmt: skip
        self.cluster, self.namespace, self.optimizer, self.servo = cluster, namespace, optimizer, servo
        self.rng = rng
        self.pod_log = pod_log
        self.current: tuple[str, str] | None = None
        self.kwok_deleted = 0
        """ADJUSTs whose new pod kwok deleted while it started (see ``kwok_deleted_it``): not counted."""

    def kwok_deleted_it(self, result: dict[str, Any] | None) -> bool:
        """kwok deletes a pod by name, without the uid precondition a kubelet sends: a delete of the
        old tuning pod that kwok sends twice can meet the new one (same name) created meanwhile. The
        connector then answers ``pod-deleted`` and removes the pod; such a sample is counted apart."""
        if result is None or result.get("reason") != "pod-deleted":
            return False
        self.kwok_deleted += 1
        self.current = None
        print(
            f"kwok deleted the new tuning pod ({self.kwok_deleted} so far): {result.get('message')}",
            flush=True,
        )
        return True

    def other_values(self) -> tuple[str, str]:
        """Values other than the tuning pod's now (so every ADJUST replaces it)."""
        while True:
            values = (self.rng.choice(CPUS), self.rng.choice(GOGCS))
            if values != self.current:
                return values

    def posts(self, exchange: Exchange) -> list[dict[str, Any]]:
        assert self.optimizer.server is not None
        history = self.optimizer.server.state()["history"]
        return [e for e in history if (e.get("param") or {}).get("cmd_uid") == exchange.cmd_uid]

    def result_post(self, exchange: Exchange) -> dict[str, Any]:
        return next(e for e in self.posts(exchange) if "status" in (e.get("param") or {}))

    def check_one(self, values: tuple[str, str], where: str) -> None:
        found = tuning_pods(self.cluster, self.namespace)
        names = [p["metadata"]["name"] for p in found]
        if len(found) != 1:
            raise RuntimeError(f"{where}: {len(found)} tuning pods: {names}")
        pod = found[0]
        have = (main_container(pod)["resources"]["requests"]["cpu"], env_of(pod).get("GOGC"))
        if not ready(pod) or pod["metadata"].get("deletionTimestamp") or have != values:
            raise RuntimeError(
                f"{where}: tuning pod ready={ready(pod)}, deleting={bool(pod['metadata'].get('deletionTimestamp'))}, "
                f"cpu/GOGC {have}, wanted {values}"
            )
        self.current = values

    # -- ADJUST -> Ready, through the servo ------------------------------------------------------

    def adjusts(self, count: int) -> list[float]:
        times: list[float] = []
        for index in range(3 * count):
            if len(times) == count:
                break
            values = self.other_values()
            exchange = self.optimizer.push(adjust(*values)).wait()
            if self.kwok_deleted_it(exchange.result):
                continue
            if exchange.status != "ok":
                raise RuntimeError(f"ADJUST {index + 1}: {exchange.result}\n{self.servo.log()}")
            self.check_one(values, f"ADJUST {index + 1}")
            assert exchange.sent_at is not None
            # The optimizer's log: the command left with the WHATS_NEXT answer, the result arrived.
            sent = next(e for e in self.posts_of_command(exchange) if e.get("event") == "WHATS_NEXT")
            times.append(self.result_post(exchange)["at"] - sent["replied_at"])
        if len(times) < count:
            raise RuntimeError(f"only {len(times)} of {count} ADJUSTs went through")
        return times

    def posts_of_command(self, exchange: Exchange) -> list[dict[str, Any]]:
        """The WHATS_NEXT whose reply carried ``exchange`` and every post about it."""
        assert self.optimizer.server is not None
        history = self.optimizer.server.state()["history"]
        return [
            e for e in history
            if (e.get("reply") or {}).get("cmd_uid") == exchange.cmd_uid
            or (e.get("param") or {}).get("cmd_uid") == exchange.cmd_uid
        ]  # fmt: skip

    # -- where a replace spends its time, in this process ----------------------------------------

    def phases(self, count: int) -> dict[str, list[float]]:
        config = KubernetesConfig.model_validate(tuning_config(self.cluster, self.namespace))
        client = KubeClient(resolve_access(str(self.cluster.kubeconfig), None), 5.0)
        spans: dict[str, list[float]] = {name: [] for name in ("total", *POINTS)}
        try:
            for index in range(3 * count):
                if len(spans["total"]) == count:
                    break
                values = self.other_values()
                _, request = split_components(
                    config, adjust(*values)["param"]["state"]["application"]["components"]
                )
                marks: dict[str, float] = {}

                def hook(point: str, marks: dict[str, float] = marks) -> None:
                    marks[point] = time.monotonic()

                began = time.monotonic()
                try:
                    adjust_tuning(client, config, request, 0.0, lambda fraction, message: None, hook=hook)
                except ConnectorFailure as failure:
                    if self.kwok_deleted_it({"reason": failure.reason, "message": failure.message}):
                        continue
                    raise
                ended = time.monotonic()
                self.check_one(values, f"replace {index + 1}")
                if set(marks) != set(POINTS):
                    raise RuntimeError(f"replace {index + 1}: points {sorted(marks)}")
                previous = began
                for point in POINTS:
                    spans[point].append(marks[point] - previous)
                    previous = marks[point]
                spans["total"].append(ended - began)
        finally:
            client.close()
        return spans

    # -- cancel -> one Ready tuning pod again ----------------------------------------------------

    def cancels(self, count: int, window: float, max_trials: int) -> dict[str, Any]:
        fresh: list[float] = []
        phases: dict[str, int] = {}
        not_landed = trials = 0
        while len(fresh) < count and trials < max_trials:
            trials += 1
            values = self.other_values()
            delay = self.rng.uniform(0.0, window)
            where = f"cancel trial {trials} (cancel {delay:.2f} s after the ADJUST was sent)"
            first = self.optimizer.push(adjust(*values))
            if not first.sent.wait(COMMAND_TIMEOUT):
                raise RuntimeError(f"{where}: never sent\n{self.servo.log()}")
            assert first.sent_at is not None
            time.sleep(max(0.0, first.sent_at + delay - time.monotonic()))
            self.optimizer.cancel(first)
            again = self.optimizer.push(adjust(*values))  # next in line: the fresh connector's ADJUST
            first.wait()
            again.wait()
            if self.kwok_deleted_it(first.result) or self.kwok_deleted_it(again.result):
                continue
            if again.status != "ok":
                raise RuntimeError(f"{where}: the ADJUST after it: {again.result}\n{self.servo.log()}")
            self.check_one(values, where)
            answered = [e for e in self.posts(first) if (e.get("reply") or {}).get("status") == "cancel"]
            if not answered or "status" in (answered[0].get("param") or {}):
                not_landed += 1  # it had finished (its result met the cancel, or no post did)
                continue
            if first.status != "cancelled":
                raise RuntimeError(f"{where}: cancel met a progress post, result {first.result}")
            cancel = answered[0]
            phase = self.pod_log.state_at(cancel["replied_at"], values)
            phases[phase] = phases.get(phase, 0) + 1
            fresh.append(self.result_post(again)["at"] - cancel["replied_at"])
            print(
                f"{where}: {phase}; one Ready tuning pod {fresh[-1] * 1000:.0f} ms after the cancel",
                flush=True,
            )
        if len(fresh) < count:
            raise RuntimeError(f"only {len(fresh)} of {count} cancels landed in {trials} trials")
        return {
            "fresh": fresh,
            "phases": dict(sorted(phases.items())),
            "trials": trials,
            "not_landed": not_landed,
        }


def versions() -> str:
    pinned = dict(
        line.split("=", 1) for line in (ROOT / "kube" / "versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    return f"Kubernetes {pinned['KUBERNETES_VERSION']}, etcd {pinned['ETCD_VERSION']}, kwok {pinned['KWOK_VERSION']}"


def run(adjusts: int, replaces: int, cancels: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-kube-tuning-") as scratch:
        cluster = LocalCluster.up(Path(scratch) / "cluster", owner_pid=os.getpid())
        optimizer = CommandQueue.serve()
        servo = None
        try:
            namespace = cluster.new_namespace("bench-tuning")
            cluster.apply(namespace, web_deployment())
            rolled_out(cluster, namespace)
            connector = {"name": "k8s", "type": "kubernetes", "config": tuning_config(cluster, namespace)}
            assert optimizer.server is not None
            servo = ServoRun.start(
                Path(scratch) / "servo",
                servo_config(optimizer.server, connector, progress_interval=PROGRESS_INTERVAL),
            )
            optimizer.context = servo.log
            first = optimizer.run({"cmd": "DESCRIBE", "param": {}})
            if first.status != "ok":
                raise RuntimeError(f"the first DESCRIBE: {first.result}\n{servo.log()}")
            watcher = KubeClient(resolve_access(str(cluster.kubeconfig), None), 5.0)
            pod_log = PodLog(watcher, namespace)
            pod_log.start()
            bench = Bench(cluster, namespace, optimizer, servo, rng, pod_log)
            bench.adjusts(3)  # warm up (the first tuning pod, caches), not counted
            adjust_times = bench.adjusts(adjusts)
            print(f"ADJUST -> Ready: {stats(adjust_times)}", flush=True)
            spans = bench.phases(replaces)
            print(f"replace in this process: { {k: stats(v) for k, v in spans.items()} }", flush=True)
            window = percentile(adjust_times, 0.9)
            try:
                storm = bench.cancels(cancels, window, 3 * cancels)
            finally:
                pod_log.stop()
                watcher.close()
            return {
                "seed": seed,
                "elapsed_s": round(time.monotonic() - started, 1),
                "adjust_ms": stats(adjust_times),
                "replace_ms": {k: stats(v) for k, v in spans.items()},
                "cancel_window_s": round(window, 3),
                "fresh_ms": stats(storm["fresh"]),
                "cancel_phases": storm["phases"],
                "cancel_trials": storm["trials"],
                "not_landed": storm["not_landed"],
                "kwok_deleted": bench.kwok_deleted,
                "samples_adjust_ms": [round(v * 1000, 1) for v in adjust_times],
                "samples_fresh_ms": [round(v * 1000, 1) for v in storm["fresh"]],
            }
        finally:
            if servo is not None:
                servo.stop()
            optimizer.stop()
            done = cluster.down()
            if done.returncode != 0:
                print(f"bench_kube_tuning: scripts/kube-cluster down failed: {done.stderr}", file=sys.stderr)


def row(label: str, figures: dict[str, float]) -> str:
    return f"| {label} | {figures['n']} | {figures['p50']:.0f} ms | {figures['p99']:.0f} ms | {figures['max']:.0f} ms |"


def report(result: dict[str, Any], where: dict[str, Any], load_after: str) -> str:
    spans = result["replace_ms"]
    phases = ", ".join(f"{name} {count}" for name, count in result["cancel_phases"].items())
    return "\n".join([
        f"### Tuning pod against the real control plane (scripts/bench_kube_tuning.py, {where['date']})",
        "",
        f"Machine: {where['cpu']}, {where['cores']} cores, Linux {where['kernel']}, Python {where['python']}; "
        f"{versions()}; commit {where['tree']}; load average at start {where['load_at_start']}, at the end "
        f"{load_after} (the cluster, the servo and this process share the machine). Seed {result['seed']}, "
        f"{result['elapsed_s']:.0f} s in all (cluster up and down included).",
        "",
        "`servo-actors run` with the kubernetes connector in `strategy: tuning` on Deployment `web` (2 replicas), "
        "driven by the embedded optimizer; every ADJUST gives `web-tuning` a cpu and GOGC other than the pod's, "
        "so each replaces the tuning pod (delete, wait until gone, create, wait until Ready; settlement 0).",
        "",
        "| | samples | p50 | p99 | max |",
        "|---|---:|---:|---:|---:|",
        row("ADJUST sent -> ADJUSTMENT received (the new tuning pod Ready)", result["adjust_ms"]),
        row("cancel -> the next ADJUST's fresh connector has exactly one Ready tuning pod with the values "
            "(its ADJUSTMENT received)", result["fresh_ms"]),
        row("a replace in the benchmark's process (`adjust_tuning`, no servo)", spans["total"]),
        row("of which: read the pod and the Deployment, delete the old pod", spans["deleted"]),
        row("of which: deleted -> gone (kwok's pod-delete stage, the API server's watch)", spans["gone"]),
        row("of which: create the new pod", spans["created"]),
        row("of which: created -> Ready (the scheduler binds it, kwok's pod-ready stage)", spans["ready"]),
        "",
        f"Cancels: {result['fresh_ms']['n']} landed on a progress post in {result['cancel_trials']} trials "
        f"({result['not_landed']} came after the ADJUST had finished and are not counted), pressed at a uniform "
        f"random moment within {result['cancel_window_s'] * 1000:.0f} ms of the ADJUST (the p90 above); what the "
        f"cluster held when the cancel was answered (a watch in the benchmark's process): {phases}. Checked after every ADJUST: one tuning pod, Ready, not being deleted, "
        "with the requested cpu and GOGC.",
        "",
        f"Not counted: {result['kwok_deleted']} ADJUSTs (of the three kinds above) whose new tuning pod kwok deleted "
        "while it started. kwok deletes a pod by name with no uid precondition (a kubelet sends the pod's uid), so "
        "a second delete of the old pod, sent after the connector saw it gone, can remove the new pod of the same "
        "name; the connector answers `failed` (`pod-deleted`) and deletes the pod, and the next ADJUST creates it "
        "again. A simulated node's artefact, not a real cluster's.",
        "",
        "kwok decides when a pod is Ready and when a deleted pod is gone: this cluster runs kwok's `fast` pod "
        "stages, which have no delay, so the figures are the control plane's own work (API server, scheduler, "
        "kwok's reaction, watches) and the connector's. On real nodes add the image pull, the container's "
        "start and its readiness probe to `created -> Ready`, and the pod's termination (up to its "
        "`terminationGracePeriodSeconds`, 1 s here but ignored by kwok) to `deleted -> gone`.",
        "",
    ]) + "\n"  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adjusts", type=int, default=DEFAULT_ADJUSTS, help=f"default {DEFAULT_ADJUSTS}")
    parser.add_argument("--replaces", type=int, default=DEFAULT_PHASES,
                        help=f"replaces timed in this process, default {DEFAULT_PHASES}")  # fmt: skip
    parser.add_argument("--cancels", type=int, default=DEFAULT_CANCELS, help=f"default {DEFAULT_CANCELS}")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    for name in ("adjusts", "replaces", "cancels"):
        if getattr(args, name) < 2:
            parser.error(f"--{name} must be at least 2, got {getattr(args, name)}")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    where = machine()
    try:
        result = run(args.adjusts, args.replaces, args.cancels, seed)
    except (AssertionError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench_kube_tuning: {exc}", file=sys.stderr)
        return 1
    text = report(result, where, load_average())
    print(text + json.dumps(result, indent=1))
    if not args.no_write:
        write_section(BENCHMARKS, text, MARKS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
