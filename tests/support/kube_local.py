"""The real local Kubernetes cluster (scripts/kube-cluster) for tests marked ``kube``.

::

    def test_something(kube_cluster, kube_namespace):          # fixtures in tests/conftest.py
        kube_cluster.apply(kube_namespace, deployment_manifest)   # kubectl apply -f - -n NAMESPACE
        kube_cluster.kubectl("rollout", "status", "deploy/web", "-n", kube_namespace)
        kube_cluster.get(f"/apis/apps/v1/namespaces/{kube_namespace}/deployments/web")

``kube_cluster`` is one cluster per test session, started by ``scripts/kube-cluster up`` into a
temporary directory with ``--owner-pid`` (a killed pytest takes it down too) and
``--hpa-downscale-stabilization 0s``, and brought down after the last test that uses it; ``kube_namespace`` is a fresh namespace per test, deleted afterwards. When a test fails,
the last lines of every component's log are printed in its teardown.

Without the Go toolchain the ``kube`` tests are not run (one line says why), except under
``CI=true`` where that is a failure: see ``go_missing`` and tests/conftest.py. This is a real
control plane: real API server, controllers and scheduler; kwok plays the kubelets of the simulated
nodes (see docs/kube-cluster.md,
"What kwok does not simulate"), and the session cluster has one
real node beside them (kubelet, containerd, runc: tests/kube_real_node), tainted so that only pods that
ask for it (nodeSelector servo-actors.io/node=real and the toleration) run there.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "kube-cluster"
BUILD_TIMEOUT = 3 * 3600.0
"""`scripts/kube-cluster build`, cold: 20-40 minutes on 2 cores (see BENCHMARKS.md)."""
UP_TIMEOUT = 600.0
"""`up` with the binaries built; its own waits are bounded well under this."""
DOWN_TIMEOUT = 120.0
KUBECTL_TIMEOUT = 60.0
REQUEST_TIMEOUT = 10.0
LOG_TAIL_LINES = 40
HPA_DOWNSCALE_STABILIZATION = "0s"
"""The session cluster's default scale-down window for HPAs (Kubernetes' is 5 minutes): an HPA in
a test scales down as soon as its load falls, unless it sets behavior.scaleDown itself."""
TEST_TIMEOUT = 300.0
"""pytest-timeout for each ``kube`` test that sets none: the session's `up` is paid by the first one,
and the real controllers take their time (a new pod's first metrics: ~35 s)."""
COMPONENT_LOGS = (
    "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "metrics-server",
)  # fmt: skip


def go_missing() -> str | None:
    """Why the cluster cannot be built here, or None when the Go toolchain is present (found as
    scripts/kube-cluster finds it: $GO when set, else on PATH, else /usr/local/go/bin/go)."""
    chosen = os.environ.get("GO")
    if chosen:
        return (
            None
            if os.access(chosen, os.X_OK)
            else f"the Go toolchain is absent (GO={chosen} is not executable)"
        )
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and os.access(candidate, os.X_OK):
            return None
    return "the Go toolchain is absent (no go on PATH, no /usr/local/go/bin/go)"


def run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``scripts/kube-cluster ARGS`` with the interpreter running the tests (the script needs only
    the standard library)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def built() -> bool:
    """Whether every binary of the current versions is in the cache (nothing to build)."""
    return run_script(["build", "--check"], UP_TIMEOUT).returncode == 0


def build() -> Path:
    """Builds what is missing (quick when cached); the bin dir."""
    done = run_script(["build"], BUILD_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/kube-cluster build failed (exit {done.returncode}):\n{done.stderr}")
    return Path(done.stdout.strip().splitlines()[-1])


class LocalCluster:
    """A cluster started by ``scripts/kube-cluster up`` in ``directory``."""

    def __init__(self, directory: Path, kubeconfig: Path) -> None:
        self.dir = directory
        self.kubeconfig = kubeconfig
        state = self.state()
        self.bin_dir = Path(state["bin_dir"])
        self.server = f"https://127.0.0.1:{state['ports']['kube-apiserver']}"
        pki = directory / "pki"
        self._session = requests.Session()
        self._session.verify = str(pki / "ca.crt")
        self._session.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
        self._session.trust_env = False  # loopback only: never through a proxy

    @classmethod
    def up(
        cls,
        directory: Path,
        nodes: int = 2,
        owner_pid: int | None = None,
        hpa_downscale_stabilization: str | None = None,
        real_nodes: int = 0,
    ) -> LocalCluster:
        args = ["up", "--dir", str(directory), "--nodes", str(nodes), "--real-nodes", str(real_nodes)]
        if hpa_downscale_stabilization is not None:
            args += ["--hpa-downscale-stabilization", hpa_downscale_stabilization]
        if owner_pid is not None:
            args += ["--owner-pid", str(owner_pid)]
        done = run_script(args, UP_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/kube-cluster up failed (exit {done.returncode}):\n{done.stderr}")
        return cls(directory, Path(done.stdout.strip().splitlines()[-1]))

    def down(self) -> subprocess.CompletedProcess[str]:
        self._session.close()
        return run_script(["down", "--dir", str(self.dir)], DOWN_TIMEOUT)

    def status(self) -> subprocess.CompletedProcess[str]:
        return run_script(["status", "--dir", str(self.dir)], DOWN_TIMEOUT)

    def state(self) -> dict[str, Any]:
        return json.loads((self.dir / "state.json").read_text())

    def pids(self) -> dict[str, int]:
        return {p["name"]: p["pid"] for p in self.state()["processes"]}

    @property
    def audit_log(self) -> Path:
        return self.dir / "logs" / "audit.log"

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = KUBECTL_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """The kubectl built with the server (same version), against this cluster."""
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()}"
            )
        return done

    def apply(self, namespace: str, *manifests: dict[str, Any]) -> None:
        document = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
        self.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(document))

    def get(self, path: str) -> Any:
        """GET an API path as the admin; the decoded JSON (AssertionError unless 200)."""
        response = self._session.get(self.server + path, timeout=REQUEST_TIMEOUT)
        if response.status_code != 200:
            raise AssertionError(f"GET {path}: HTTP {response.status_code} {response.text[:300]}")
        return response.json()

    def try_get(self, path: str) -> Any:
        """GET an API path as the admin; the decoded JSON, or None unless 200 (an API still
        becoming available, such as metrics.k8s.io before the first scrapes)."""
        response = self._session.get(self.server + path, timeout=REQUEST_TIMEOUT)
        return response.json() if response.status_code == 200 else None

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> requests.Response:
        """Any request; with ``token`` as that bearer instead of the admin certificate."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if token:
            return requests.request(
                method,
                self.server + path,
                json=body,
                headers=headers,
                verify=str(self.dir / "pki" / "ca.crt"),
                timeout=REQUEST_TIMEOUT,
            )
        return self._session.request(method, self.server + path, json=body, timeout=REQUEST_TIMEOUT)

    def new_namespace(self, hint: str) -> str:
        name = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[:40].strip("-") or "test"
        name = f"{name}-{secrets.token_hex(3)}"
        self.kubectl("create", "namespace", name)
        return name

    def delete_namespace(self, name: str) -> None:
        # Not waited for: the namespace controller finishes it in the background.
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)

    def log_tails(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = []
        real_node_logs = sorted((self.dir / "logs").glob("*-real-node-*.log"))  # kubelet, containerd
        for path in [*(self.dir / "logs" / f"{name}.log" for name in COMPONENT_LOGS), *real_node_logs]:
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} (last {len(tail)} lines) ---\n" + "\n".join(tail))
        return "\n".join(parts)
