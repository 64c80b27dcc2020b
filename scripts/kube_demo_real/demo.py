"""`scripts/kube-demo --app real`: the run. Deploys the app on the real node, starts Prometheus and
the balancer, runs the embedded optimizer and a servo (kubernetes, loadgen, prometheus, cost),
applies the recommendation when servo_actors/demo/adoption.py adopts it, and ends with the table:
baseline and recommendation each measured again REPEATS times under the same load."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

from kube_demo_real import app, remeasure
from kube_demo_real.balancer import Balancer
from kube_demo_real.outcome import outcome_line
from kube_demo_real.pods import FileTargets, ReadyPods
from kube_demo_real.prometheus import HostPrometheus, PrometheusFailed
from servo_actors.config import ServoConfig
from servo_actors.demo import DemoOptions, DemoSetup, run_demo
from servo_actors.demo.adoption import adoption

REPEATS = 3
"""Readings of the baseline and of the recommendation for the final table."""
TARGETS_TIMEOUT = 60.0
"""Seconds for Prometheus to scrape every ready pod once (a few scrape intervals)."""
POLL = 0.5
ADJUST_TIMEOUT = 2 * app.ROLLOUT_TIMEOUT + 60.0


class Host(Protocol):
    """What the real demo uses of scripts/kube-demo's KubeDemo: its output, its cluster and children."""

    args: Any

    def say(self, text: str) -> None: ...
    def cluster(self) -> tuple[Path, Path]: ...
    def child(
        self, argv: list[str], timeout: float, *, capture: bool = False, stdin: str | None = None
    ) -> str: ...
    def stopped(self) -> bool: ...


class Failed(Exception):
    """A step of the real demo failed; the message says which."""


def settings_of(component: dict[str, Any]) -> dict[str, Any]:
    return {name: component[name] for name in ("cpu", "memory", "replicas", "GOGC") if name in component}


def cost_of(settings: dict[str, Any]) -> float:
    return app.cost(float(settings["cpu"]), float(settings["memory"]), int(settings["replicas"]))


def describe(settings: dict[str, Any]) -> str:
    return (f"cpu {float(settings['cpu']) * 1000:.0f}m, memory {float(settings['memory']) * 1024:.0f}Mi, "
            f"replicas {settings['replicas']}, GOGC {settings['GOGC']}")  # fmt: skip


class RealDemo:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.namespace: str = host.args.namespace
        self.final: dict[str, Any] | None = None

    def run(self) -> int:
        host = self.host
        began = time.monotonic()
        kubeconfig, kubectl = host.cluster()
        self.kubeconfig, self.kubectl = kubeconfig, kubectl
        host.say(f"application: Deployment {app.DEPLOYMENT} ({app.IMAGE}) on the real node, namespace {self.namespace}: "
                 f"baseline {describe(self._baseline_settings())}, WORK_MS {app.WORK_MS}")  # fmt: skip
        host.child(
            self._kubectl("apply", "-f", "-"),
            30.0,
            stdin=yaml.safe_dump_all(app.manifests(self.namespace)),
            capture=True,
        )
        self._rollout()
        with tempfile.TemporaryDirectory(prefix="servo-actors-kube-demo-real-") as tmp:
            prometheus = HostPrometheus(Path(tmp, "prometheus"), app.SCRAPE_SECONDS)
            selector = ",".join(f"{k}={v}" for k, v in app.LABELS.items())
            pods = ReadyPods(kubectl, kubeconfig, self.namespace, selector, app.PORT)
            pods.listeners.append(FileTargets(prometheus.targets, self.namespace))
            balancer = Balancer(pods)
            try:
                prometheus.start()
                balancer.start()
                pods.start()
                host.say(f"prometheus: {prometheus.url} scraping the pods every {app.SCRAPE_SECONDS:g} s; "
                         f"load: {app.RATE_RPS:g} requests/s to {app.PATH} through {balancer.url}")  # fmt: skip
                return self._optimize(Path(tmp), prometheus, balancer, began)
            except PrometheusFailed as exc:
                raise Failed(str(exc)) from exc
            finally:
                pods.stop()
                balancer.stop()
                prometheus.stop()

    def _optimize(self, tmp: Path, prometheus: HostPrometheus, balancer: Balancer, began: float) -> int:
        host, args = self.host, self.host.args
        target = balancer.url + app.PATH
        self._wait_scraped(prometheus)
        config_file = tmp / "servo.yaml"

        def config(url: str) -> ServoConfig:
            body = app.servo_config(
                url, self.kubeconfig, self.kubectl, self.namespace, prometheus.url, target
            )
            config_file.write_text(yaml.safe_dump(body))
            return ServoConfig.model_validate(body)

        options = DemoOptions(steps=args.steps, seed=args.seed, abort_every=args.abort_every)
        plan = app.plan(args.steps, args.seed)
        code = run_demo(options, host.say, setup=DemoSetup(plan, config), finished=self._keep_final)
        if host.stopped():
            return -1
        if self.final is None or self.final.get("phase") != "done":
            raise Failed(f"the optimization did not end (exit {code})")
        # The plan ran to its end, with a recommendation or none (no step met every constraint):
        # adoption() says what stays applied, and why.
        chosen = adoption(self.final)
        if chosen is None:
            raise Failed("the optimization ended without a baseline reading to compare with")
        steps = self.final.get("steps", [])
        baseline = settings_of(next(s for s in steps if s.get("n") == 0)["settings"][app.COMPONENT])
        best = self.final.get("best") or {}
        candidate = settings_of(best["settings"][app.COMPONENT]) if best.get("settings") else baseline
        host.say(f"optimization: {len(steps)} steps; best step {best.get('step')}: {chosen.reason}")
        measured: dict[str, dict[str, remeasure.Summary]] = {}
        self._apply(config_file, baseline, "the baseline")
        measured["baseline"] = self._remeasure(prometheus, target, "the baseline")
        if candidate == baseline:
            measured["recommendation"] = measured["baseline"]
        else:
            self._apply(config_file, candidate, "the recommendation")
            measured["recommendation"] = self._remeasure(prometheus, target, "the recommendation")
            if not chosen.recommendation:
                host.say(f"not keeping the recommendation: {chosen.reason}; the baseline goes back in place")
                self._apply(config_file, baseline, "the baseline")
        kept = candidate if chosen.recommendation else baseline
        self._table(baseline, candidate, measured, chosen.recommendation)
        shown = host.child(
            self._kubectl("-n", self.namespace, "get", "deploy", "-o", "wide"), 30.0, capture=True
        )
        host.say(f"$ kubectl get deploy -n {self.namespace} -o wide\n{shown.rstrip()}")
        host.say(f"wall time: {time.monotonic() - began:.0f} s")
        if args.json:
            readings = {"baseline": remeasure.as_json(measured["baseline"])}
            candidate_readings = remeasure.as_json(measured["recommendation"])
            if chosen.recommendation:
                readings["recommendation"] = candidate_readings
            else:
                readings["recommendation"], readings["candidate"] = readings["baseline"], candidate_readings
            print(outcome_line(
                slo_p99_ms=app.SLO_P99_MS, rate_rps=app.RATE_RPS, path=app.PATH, baseline=baseline,
                recommendation=kept, baseline_cost=cost_of(baseline), recommendation_cost=cost_of(kept),
                measured=readings,
            ), flush=True)  # fmt: skip
        return 0

    def _keep_final(self, final: dict[str, Any]) -> None:
        self.final = final

    def _baseline_settings(self) -> dict[str, Any]:
        return {"cpu": 0.5, "memory": 0.5, "replicas": app.BASELINE["replicas"], "GOGC": app.BASELINE["GOGC"]}

    def _kubectl(self, *args: str) -> list[str]:
        return [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args]

    def _rollout(self) -> None:
        self.host.child(self._kubectl("-n", self.namespace, "rollout", "status", f"deployment/{app.DEPLOYMENT}",
                                      f"--timeout={app.ROLLOUT_TIMEOUT:g}s"), app.ROLLOUT_TIMEOUT + 10, capture=True)  # fmt: skip

    def _wait_scraped(self, prometheus: HostPrometheus) -> None:
        deadline = time.monotonic() + TARGETS_TIMEOUT
        while time.monotonic() < deadline:
            up = prometheus.query(f'sum(up{{namespace="{self.namespace}"}})')
            if up and float(up[0]["value"][1]) >= 1:
                return
            time.sleep(POLL)
        raise Failed(f"prometheus scraped no pod within {TARGETS_TIMEOUT:g} s: {prometheus.log_tail()}")

    def _apply(self, config_file: Path, settings: dict[str, Any], what: str) -> None:
        assignments = [f"{app.COMPONENT}.{name}={value}" for name, value in sorted(settings.items())]
        self.host.say(f"applying {what}: servo-actors adjust {' '.join(assignments)}")
        self.host.child([sys.executable, "-m", "servo_actors", "-c", str(config_file), "adjust", *assignments],
                        ADJUST_TIMEOUT, capture=True)  # fmt: skip

    def _remeasure(self, prometheus: HostPrometheus, target: str, what: str) -> dict[str, remeasure.Summary]:
        self.host.say(f"measuring {what} again {REPEATS} times ({app.WARMUP_SECONDS:g} s warm-up + "
                      f"{app.MEASURE_SECONDS:g} s at {app.RATE_RPS:g} requests/s each)")  # fmt: skip
        return remeasure.measure(prometheus, target, self.namespace, REPEATS)

    def _table(
        self,
        baseline: dict[str, Any],
        candidate: dict[str, Any],
        measured: dict[str, dict[str, remeasure.Summary]],
        adopted: bool,
    ) -> None:
        say: Callable[[str], None] = self.host.say
        b, r = measured["baseline"], measured["recommendation"]
        saving = 100.0 * (1 - cost_of(candidate) / cost_of(baseline))
        rows = [
            ("settings", describe(baseline), describe(candidate)),
            ("cost (cpu + 0.25 x GiB) x replicas", f"{cost_of(baseline):.3f}", f"{cost_of(candidate):.3f}"),
            (f"p99 latency ms (SLO {app.SLO_P99_MS:g})", b["p99_latency"].text(), r["p99_latency"].text()),
            ("error rate", b["errors"].text(4), r["errors"].text(4)),
            ("throughput rps", b["rps"].text(), r["rps"].text()),
        ]
        width = [max(len(row[i]) for row in rows) for i in range(3)]
        header = ("metric (mean ± sd of 3 readings)", "baseline", "recommendation")
        width = [max(w, len(h)) for w, h in zip(width, header, strict=True)]
        say("")
        for row in (header, tuple("-" * w for w in width), *rows):
            say("  ".join(cell.ljust(w) for cell, w in zip(row, width, strict=True)).rstrip())
        say(f"cost saving: {saving:.1f} % ({'applied' if adopted else 'not applied: the baseline is kept'})")
