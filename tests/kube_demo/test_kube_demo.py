"""scripts/kube-demo end to end on the real local cluster: the optimization through the
``kubernetes`` connector with Abort pressed, the recommendation applied, nothing left running.

It runs on the session's cluster (``kube_cluster``), which the demo finds running in ``--dir`` and
so reuses and leaves up: that is checked too. The path where the demo starts its own cluster and
brings it down is the same code with `up`/`down` around it (see docs/kube-cluster.md)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from demo_log import assert_summary_matches_the_log, parse_demo_log
from kube_local import LocalCluster
from waiting import wait_until

from servo_actors.connectors.kubernetes.units import parse_cpu, parse_memory

pytestmark = [pytest.mark.kube, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / "kube-demo"
DEMO_TIMEOUT = 240.0
"""Upper bound only a hang reaches: the run takes ~20 s on 2 busy cores."""
LEFTOVER_TIMEOUT = 10.0
"""The demo's processes are gone when it exits; this bounds the last actor process's exit."""
MARK = "SERVO_KUBE_DEMO_TEST_MARK"
JSON_KEYS = {"slo_p99_ms", "rate_rps", "path", "baseline", "recommendation", "baseline_cost",
             "recommendation_cost", "measured"}  # fmt: skip
"""docs/interface.md's `--json` object."""
APPLIED = re.compile(
    r"^applying (?P<what>the recommendation|the baseline): servo-actors adjust (?P<settings>.*)$",
    re.MULTILINE,
)


def marked_processes(mark: str) -> list[int]:
    """PIDs of our processes whose environment carries ``MARK=mark`` (the demo and its descendants)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"{MARK}={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours
            continue
    return found


def held(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    deployment = cluster.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/web")
    hpa = cluster.get(f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/web")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    requests_, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert requests_ == limits  # the connector sets both
    return {
        "cpu": parse_cpu(requests_["cpu"]),
        "memory": parse_memory(requests_["memory"]),
        "GC": next(e["value"] for e in container["env"] if e["name"] == "GC"),
        "hpa_min_replicas": hpa["spec"]["minReplicas"],
    }


def assert_applied_what_it_may(out: str, cluster: LocalCluster, namespace: str) -> None:
    """The demo applied its recommendation only when confirmed and better; else the baseline."""
    log = parse_demo_log(out)
    assert_summary_matches_the_log(log)
    applied = APPLIED.search(out)
    assert applied, out
    if applied["what"] == "the recommendation":
        assert log.confirmed and log.objective_after < log.objective_before, out
    else:
        assert "not applying the recommendation: " in out and "the baseline stays in place" in out
    wanted = dict(pair.split("=", 1) for pair in applied["settings"].split())
    in_cluster = held(cluster, namespace)
    assert {k: str(v) if isinstance(v, str) else float(v) for k, v in in_cluster.items()} == {
        k.split(".", 1)[1]: v if k.endswith(".GC") else float(v) for k, v in wanted.items()
    }
    assert f"the cluster holds {applied['what']}" in out


def assert_the_json_line(out: str) -> None:
    """--json: one line, the keys docs/interface.md lists (written out here), values that agree
    with what the demo applied."""
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == 1, out
    outcome = json.loads(lines[0])
    assert set(outcome) == JSON_KEYS, outcome
    assert outcome["slo_p99_ms"] == 250 and outcome["rate_rps"] is None and outcome["path"] is None
    applied = APPLIED.search(out)
    assert applied, out
    wanted = dict(pair.split("=", 1) for pair in applied["settings"].split())
    assert {f"web.{k}": str(v) for k, v in outcome["recommendation"].items()} == wanted, (outcome, wanted)
    assert set(outcome["baseline"]) == {"cpu", "memory", "GC", "hpa_min_replicas"}
    assert set(outcome["measured"]) >= {"baseline", "recommendation"}
    for readings in (outcome["measured"]["baseline"], outcome["measured"]["recommendation"]):
        assert set(readings) == {"cost", "p99_latency", "error_rate", "throughput"}, readings
        assert all(set(r) == {"mean", "spread", "values"} and r["values"] for r in readings.values())
    if applied["what"] == "the recommendation":
        assert outcome["recommendation_cost"] < outcome["baseline_cost"], outcome
    else:
        assert outcome["recommendation"] == outcome["baseline"], outcome
        assert outcome["recommendation_cost"] == outcome["baseline_cost"], outcome


def test_the_demo_applies_its_recommendation_and_leaves_nothing_running(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    mark = secrets.token_hex(8)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(kube_cluster.dir), "--namespace", kube_namespace,
         "--steps", "2", "--abort-every", "3", "--json"],
        env={**os.environ, MARK: mark}, capture_output=True, text=True, timeout=DEMO_TIMEOUT,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"

    assert f"reusing the one running in {kube_cluster.dir}" in out
    assert "the optimizer cancelled MEASURE" in out  # the 3rd operation, a 4 s MEASURE, was aborted
    assert_applied_what_it_may(out, kube_cluster, kube_namespace)
    assert f"$ kubectl get deploy,hpa -n {kube_namespace}" in out
    assert "horizontalpodautoscaler.autoscaling/web" in out
    assert_the_json_line(out)

    wait_until(lambda: not marked_processes(mark), LEFTOVER_TIMEOUT, 0.1, "no process of the demo left")
    assert kube_cluster.status().returncode == 0  # a cluster it did not start stays up


def test_after_aborts_the_demo_never_applies_a_worse_point(
    kube_cluster: LocalCluster, kube_namespace: str
) -> None:
    # The run: the default plan, Abort every 4th command (rollouts cancelled mid-way).
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(kube_cluster.dir), "--namespace", kube_namespace,
         "--abort-every", "4"],
        capture_output=True, text=True, timeout=DEMO_TIMEOUT,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"
    assert "pressed Abort during" in out
    assert_applied_what_it_may(out, kube_cluster, kube_namespace)
