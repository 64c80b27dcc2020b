#!/usr/bin/env python3
"""The `command` connector's cost of the real demo: `cost.py ... describe|measure` prints the
metric `cost` (app.cost of the requests the Deployment holds, read from the cluster)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kube_demo_real.app import CONTAINER, DEPLOYMENT, cost  # noqa: E402
from servo_actors.connectors.kubernetes.units import parse_cpu, parse_memory  # noqa: E402

KUBECTL_TIMEOUT = 10.0


def held_cost(kubectl: Path, kubeconfig: Path, namespace: str) -> float:
    done = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "--request-timeout", "5s", "-n", namespace,
         "get", f"deployment/{DEPLOYMENT}", "-o", "json"],
        capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kubectl get deployment/{DEPLOYMENT}: {done.stderr.strip()}")
    deployment = json.loads(done.stdout)
    container = next(
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == CONTAINER
    )
    requests_ = container["resources"]["requests"]
    gib = parse_memory(requests_["memory"])
    return cost(parse_cpu(requests_["cpu"]), gib, int(deployment["spec"].get("replicas", 1)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cost.py")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--kubectl", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("operation", choices=["describe", "measure"])
    args = parser.parse_args(argv)
    if args.operation == "describe":
        print(json.dumps({"components": {}, "metrics": {"cost": {"unit": "cost"}}}))
        return 0
    try:
        value = held_cost(args.kubectl, args.kubeconfig, args.namespace)
    except (RuntimeError, KeyError, StopIteration, ValueError, subprocess.TimeoutExpired) as exc:
        print(f"cost.py: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"cost": value}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
