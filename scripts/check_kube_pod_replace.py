"""Count the same-named pods the local cluster deletes that it did not mean to (kwok's stale delete).

    python scripts/check_kube_pod_replace.py                      # 300 replaces on a cluster of its own
    python scripts/check_kube_pod_replace.py --cycles 500 --dir /tmp/servo-actors-kube-cluster-0

Each cycle deletes a pod (default grace period), waits until it is gone and creates a pod of the same
name at once, as the kubernetes connector replaces its tuning pod (tests/support/kube_replace.py).
Prints the cycles, the new pods something else deleted (should be 0), and from the audit log every
delete of a pod in the namespace by user agent and answer code. With ``--dir`` it uses that running
cluster (its namespace is deleted afterwards); without it starts one (scripts/kube-cluster up into a
temporary directory, with --owner-pid) and takes it down at the end.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))

from kube_local import LocalCluster  # noqa: E402
from kube_replace import replace_pods  # noqa: E402


def pod_deletes(audit_log: Path, namespace: str) -> collections.Counter[str]:
    """``user agent (first word) code`` of each pod delete in ``namespace``, counted."""
    counts: collections.Counter[str] = collections.Counter()
    with audit_log.open() as lines:
        for line in lines:
            entry = json.loads(line)
            ref = entry.get("objectRef", {})
            if (
                entry.get("verb") != "delete"
                or ref.get("resource") != "pods"
                or ref.get("namespace") != namespace
            ):
                continue
            agent = entry.get("userAgent", "?").split("/")[0]
            counts[f"{agent} {entry.get('responseStatus', {}).get('code')}"] += 1
    return counts


def run(cluster: LocalCluster, cycles: int) -> int:
    namespace = cluster.new_namespace("pod-replace")
    try:
        record = replace_pods(cluster, namespace, cycles)
    finally:
        cluster.delete_namespace(namespace)
    print(
        f"{record.cycles} replaces in {record.seconds:.1f} s; new pods deleted by someone else: {len(record.killed)}"
    )
    for key, count in sorted(pod_deletes(cluster.audit_log, namespace).items()):
        print(f"  pod deletes by {key}: {count}")
    return 1 if record.killed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=300, help="replaces (default 300)")
    parser.add_argument("--dir", type=Path, help="a running cluster's state directory (default: start one)")
    args = parser.parse_args()
    if args.cycles < 1:
        parser.error("--cycles must be at least 1")
    if args.dir is not None:
        if not (args.dir / "state.json").is_file():
            parser.error(f"--dir {args.dir}: no cluster there (no state.json)")
        return run(LocalCluster(args.dir, args.dir / "kubeconfig"), args.cycles)
    with tempfile.TemporaryDirectory(prefix="pod-replace-") as directory:
        cluster = LocalCluster.up(Path(directory) / "cluster", owner_pid=os.getpid())
        try:
            return run(cluster, args.cycles)
        finally:
            cluster.down()


if __name__ == "__main__":
    sys.exit(main())
