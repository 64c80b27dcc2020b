"""A servo (`servo-actors run`, a real subprocess) tuning a Deployment with an HPA on the real local
cluster, driven command by command through the embedded optimizer: for tests/connectors_kubernetes_real
(test_real_cancels.py, test_real_faults.py), tests/kube_real_node/test_real_node_cancels.py and
scripts/bench_kube_cancels.py. ``real_manifest`` and ``real_values`` put the Deployment's pods on the
cluster's real node (the project's app, real containers) and size the settings to it.

::

    optimizer = CommandQueue.serve()                        # an OptimizerServer on a free loopback port
    create_app(cluster, namespace)                          # Deployment web + HPA web, rolled out
    servo = ServoRun.start(tmp_path, servo_config(optimizer.server, connector(cluster, namespace)))
    exchange = optimizer.push(adjust_command({...}))        # the next WHATS_NEXT gets it
    exchange.wait()                                         # its result (or a cancel) is in
    ...
    servo.stop()                                            # SIGTERM: GOODBYE, exit 0, nothing left behind

Every servo process carries a unique marker in its environment (tests/support/marked_processes.py);
``connector_pids`` finds the connector hosts among them (each is its own process group, and unlike the
actor system's admin not a session leader).
"""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import requests
import yaml
from kube_local import LocalCluster, run_script
from kube_quantity import parse as parse_quantity
from marked_processes import MARKER_VAR, marked_pids
from waiting import wait_until

from servo_actors.optimizer.server import OptimizerServer

IMAGE = "registry.local/web:1"
"""Any name: kwok pulls nothing."""
NAME = "web"
COMPONENT = "web"
CONNECTOR = "k8s"
USAGE = {"kwok.x-k8s.io/usage-cpu": "150m", "kwok.x-k8s.io/usage-memory": "200Mi"}
"""Each pod's simulated usage (metrics-server reports it; the HPA scales on it)."""
HPA_BOUNDS = {"min_replicas": 1, "max_replicas": 3, "target_cpu_utilization": 60}

COMMAND_TIMEOUT = 120.0
"""Generous bound on one command's round trip (a rollout on 2 busy cores takes 1-5 s): only a hang breaks it."""
EXIT_TIMEOUT = 30.0
"""Generous bound on a servo's exit after SIGTERM."""
LEAK_GRACE = 5.0
"""Seconds a stopped servo's processes get to disappear before they count as leaked."""
IDLE_SLEEP = 0.05
"""Seconds of SLEEP the optimizer answers while no command is queued."""

CONNECTOR_DEPLOYMENT: dict[str, Any] = {
    "name": NAME,
    "hpa": {
        "min_replicas": {"min": 1, "max": 3},
        "max_replicas": {"min": 2, "max": 5},
        "target_cpu_utilization": {"min": 30, "max": 90, "step": 5},
    },
    "containers": [
        {
            "name": "main",
            "cpu": {"min": "100m", "max": "1", "step": "50m"},
            "memory": {"min": "128Mi", "max": "1Gi", "step": "64Mi"},
            "env": [{"name": "GOGC", "type": "range", "min": 50, "max": 400, "step": 10}],
        }
    ],
}


# --- the application --------------------------------------------------------------------------


def deployment_manifest(replicas: int = 2, min_ready_seconds: int = 0) -> dict[str, Any]:
    """Deployment web: one container the connector tunes, simulated usage, a 1 s grace period;
    ``min_ready_seconds`` makes each rollout last at least that long (kwok's pods are ready at once)."""
    labels = {"app": NAME}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "labels": labels},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": min_ready_seconds,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": dict(USAGE)},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "resources": {
                                "requests": {"cpu": "250m", "memory": "256Mi"},
                                "limits": {"cpu": "250m", "memory": "256Mi"},
                            },
                            "env": [{"name": "GOGC", "value": "100"}],
                        }
                    ],
                },
            },
        },
    }


def hpa_manifest() -> dict[str, Any]:
    """HPA web on Deployment web: CPU utilization, scale-down at once (no stabilization window)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": NAME},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
            "minReplicas": HPA_BOUNDS["min_replicas"],
            "maxReplicas": HPA_BOUNDS["max_replicas"],
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": HPA_BOUNDS["target_cpu_utilization"],
                        },
                    },
                }
            ],
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
        },
    }


def create_app(
    cluster: LocalCluster,
    namespace: str,
    timeout: float = COMMAND_TIMEOUT,
    min_ready_seconds: int = 0,
    manifest: dict[str, Any] | None = None,
) -> None:
    """Deployment web (``manifest``, else ``deployment_manifest``) and its HPA in ``namespace``, the
    Deployment rolled out (kubectl's rule)."""
    web = manifest if manifest is not None else deployment_manifest(min_ready_seconds=min_ready_seconds)
    cluster.apply(namespace, web, hpa_manifest())
    cluster.kubectl(
        "rollout", "status", f"deployment/{NAME}", "-n", namespace, f"--timeout={timeout:.0f}s",
        timeout=timeout + 30,
    )  # fmt: skip


def deployment_path(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/deployments/{NAME}"


def hpa_path(namespace: str) -> str:
    return f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/{NAME}"


def cluster_settings(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    """The settings the cluster holds now, read as the admin and worked out here (not by the
    connector's code): cpu in cores and memory in GiB (request and limit, which must agree), GOGC,
    and the HPA's bounds and CPU target."""
    deployment = cluster.get(deployment_path(namespace))
    hpa = cluster.get(hpa_path(namespace))
    container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "main")
    resources = container["resources"]
    values: dict[str, Any] = {}
    for resource, scale in (("cpu", Fraction(1)), ("memory", Fraction(1024**3))):
        request, limit = resources["requests"][resource], resources["limits"][resource]
        assert parse_quantity(request)[0] == parse_quantity(limit)[0], (
            f"{resource}: request {request} and limit {limit} differ (the connector sets both)"
        )
        values[resource] = float(parse_quantity(request)[0] / scale)
    env = {item["name"]: item.get("value") for item in container.get("env") or []}
    values["GOGC"] = float(env["GOGC"])
    spec = hpa["spec"]
    values["min_replicas"] = spec.get("minReplicas", 1)
    values["max_replicas"] = spec["maxReplicas"]
    cpu_targets = [
        m["resource"]["target"].get("averageUtilization")
        for m in spec.get("metrics") or []
        if m.get("type") == "Resource" and m["resource"]["name"] == "cpu"
    ]
    values["target_cpu_utilization"] = cpu_targets[0] if cpu_targets else None
    return values


def described_settings(components: dict[str, Any]) -> dict[str, Any]:
    """``{setting: value}`` of component web in a DESCRIPTION's or ADJUSTMENT's components, with the
    HPA settings under the names ``cluster_settings`` uses."""
    settings = components[COMPONENT]["settings"]
    values = {name: spec["value"] for name, spec in settings.items()}
    for short in ("min_replicas", "max_replicas", "target_cpu_utilization"):
        values[short] = values.pop(f"hpa_{short}")
    values["GOGC"] = float(values["GOGC"])
    return values


def same_settings(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal, numbers compared to a millionth (cores and GiB are floats)."""
    if a.keys() != b.keys():
        return False
    return all(
        abs(float(a[k]) - float(b[k])) < 1e-6 if isinstance(a[k], int | float) and isinstance(b[k], int | float)
        else a[k] == b[k]
        for k in a
    )  # fmt: skip


# --- the same application on the real node -----------------------------------------------------

REAL_LABEL = "servo-actors.io/node"
"""The real node's label and taint key (value ``real``): its pods select it and tolerate the taint."""
REAL_IMAGE = "servo-actors.local/app:dev"
"""The project's app (kube/app), imported into the real node's containerd at `up`."""
REAL_CPU_STEPS = [0.1, 0.15, 0.2]
REAL_MEMORY_STEPS = [0.125, 0.1875, 0.25]
"""Cores and GiB per pod on the real node: 3 replicas and a surge pod fit its 1 CPU and 2 GiB."""


def real_manifest() -> dict[str, Any]:
    """``deployment_manifest`` with its pods on the real node: the project's app, ready once its
    /readyz answers (probed every second), 100m and 128Mi, a 1 s grace period."""
    manifest = deployment_manifest()
    spec = manifest["spec"]["template"]["spec"]
    spec["nodeSelector"] = {REAL_LABEL: "real"}
    spec["tolerations"] = [{"key": REAL_LABEL, "operator": "Equal", "value": "real", "effect": "NoSchedule"}]
    main = spec["containers"][0]
    main.update({
        "image": REAL_IMAGE, "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "100m", "memory": "128Mi"}},
    })  # fmt: skip
    return manifest


def real_values(rng: Any) -> dict[str, Any]:
    """``random_values`` sized to the real node: cpu and memory from the REAL steps, 1-3 replicas."""
    values = copy.deepcopy(random_values(rng))
    low = rng.randint(1, 2)
    values.update({
        "cpu": rng.choice(REAL_CPU_STEPS), "memory": rng.choice(REAL_MEMORY_STEPS),
        "min_replicas": low, "max_replicas": rng.randint(2, 3),
    })  # fmt: skip
    return values


# --- faults of the control plane (scripts/kube-cluster stop/start/restart COMPONENT) ------------

COMPONENT_TIMEOUT = 180.0
"""Bound on `scripts/kube-cluster stop/start/restart COMPONENT` (its own waits end sooner)."""
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "metrics-server")


def control_plane(cluster: LocalCluster, action: str, component: str, kill: bool = False) -> None:
    """``scripts/kube-cluster ACTION COMPONENT`` on ``cluster`` (AssertionError unless it exits 0)."""
    args = [action, component, "--dir", str(cluster.dir), *(["--kill"] if kill else [])]
    done = run_script(args, COMPONENT_TIMEOUT)
    assert done.returncode == 0, f"kube-cluster {' '.join(args)} failed: {done.stderr}"


def api_ready(cluster: LocalCluster) -> bool:
    """Whether the API server answers /readyz (its storage included) with 200."""
    try:
        return cluster.request("GET", "/readyz").status_code == 200
    except requests.RequestException:
        return False


def start_stopped(cluster: LocalCluster) -> list[str]:
    """Every recorded component that is not running started again (a fault test that failed half
    way leaves the session's cluster whole); the names started."""
    started = []
    for process in cluster.state()["processes"]:
        if not _running_as_recorded(process):
            control_plane(cluster, "start", process["name"])
            started.append(process["name"])
    return started


def _running_as_recorded(process: dict[str, Any]) -> bool:
    fields = _stat_fields(int(process["pid"]))
    return fields is not None and fields[0] not in ("Z", "X") and fields[19] == str(process["start_time"])


# --- the servo's configuration and commands --------------------------------------------------


def connector(
    cluster: LocalCluster, namespace: str, kubeconfig: Path | None = None, **config: Any
) -> dict[str, Any]:
    """The kubernetes connector's entry in servo.yaml, for web in ``namespace``."""
    return {
        "name": CONNECTOR,
        "type": "kubernetes",
        "config": {
            "kubeconfig": str(kubeconfig or cluster.kubeconfig),
            "namespace": namespace,
            "timeout": "60s",
            "request_timeout": "5s",
            "on_failure": "rollback",
            "deployments": [copy.deepcopy(CONNECTOR_DEPLOYMENT)],
            **config,
        },
    }


def servo_config(server: OptimizerServer, *connectors: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """servo.yaml (as a dict) pointed at ``server``: quick progress posts, short backoff."""
    return {
        "optimizer": {"id": server.app, "base_url": server.url},
        "settings": {
            "progress_interval": settings.pop("progress_interval", "100ms"),
            "timeouts": {"connect": "2s", "read": "10s"},
            "backoff": {"min": "50ms", "max": "500ms", "max_time": "60s"},
            **settings,
        },
        "connectors": list(connectors),
    }


def adjust_command(values: dict[str, Any], settlement: float = 0.0) -> dict[str, Any]:
    """An ADJUST of component web; ``values`` by the names of ``cluster_settings``."""
    names = {"min_replicas": "hpa_min_replicas", "max_replicas": "hpa_max_replicas",
             "target_cpu_utilization": "hpa_target_cpu_utilization"}  # fmt: skip
    settings = {names.get(k, k): {"value": v} for k, v in values.items()}
    return {
        "cmd": "ADJUST",
        "param": {
            "state": {"application": {"components": {COMPONENT: {"settings": settings}}}},
            "control": {"settlement": settlement},
        },
    }


def measure_command(duration: float, metrics: list[str] | None = None) -> dict[str, Any]:
    return {
        "cmd": "MEASURE",
        "param": {
            "metrics": metrics or [f"{NAME}.ready_replicas", f"{NAME}.restarts"],
            "control": {"duration": duration},
        },
    }


DESCRIBE: dict[str, Any] = {"cmd": "DESCRIBE", "param": {}}


# --- the embedded optimizer, fed command by command -------------------------------------------


@dataclass
class Exchange:
    """One command the optimizer sends, and what came of it."""

    command: dict[str, Any]
    cmd_uid: str | None = None
    sent_at: float | None = None
    progress: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    cancelled: bool = False
    """The optimizer answered ``cancel`` to one of its posts (a progress post or its result)."""
    sent: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    context: Callable[[], str] | None = None
    """What to show when it is not answered in time (the servo's log)."""

    def wait(self, timeout: float = COMMAND_TIMEOUT) -> Exchange:
        if not self.finished.wait(timeout):
            last = self.progress[-1] if self.progress else None
            shown = f"\n{self.context()}" if self.context else ""
            raise AssertionError(
                f"{self.command['cmd']} {self.cmd_uid}: no answer within {timeout} s (last progress {last}){shown}"
            )
        return self

    @property
    def status(self) -> str | None:
        return None if self.result is None else self.result["status"]


class CommandQueue:
    """A driver of the embedded optimizer (servo_actors/optimizer/driver.py) that sends what the test
    pushes, in order, and SLEEP meanwhile. An exchange is finished when its result arrives, or when
    the servo asks for the next command without one (after a cancel answered to the result)."""

    def __init__(self) -> None:
        self.queue: deque[Exchange] = deque()
        self.history: list[Exchange] = []
        self.server: OptimizerServer | None = None
        self.context: Callable[[], str] | None = None
        """Shown with a command not answered in time: set it to the servo's ``log``."""
        self._current: Exchange | None = None

    @classmethod
    def serve(cls, app: str = "example.com/web") -> CommandQueue:
        driver = cls()
        driver.server = OptimizerServer(driver, app=app, host="127.0.0.1", port=0)
        driver.server.start()
        return driver

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def push(self, command: dict[str, Any]) -> Exchange:
        exchange = Exchange(copy.deepcopy(command), context=self.context)
        self.queue.append(exchange)
        return exchange

    def run(self, command: dict[str, Any], timeout: float = COMMAND_TIMEOUT) -> Exchange:
        return self.push(command).wait(timeout)

    def in_flight(self, exchange: Exchange, timeout: float = COMMAND_TIMEOUT) -> str | None:
        """Once ``exchange`` was sent: its cmd_uid, or None when it is no longer in flight."""
        assert self.server is not None
        assert exchange.sent.wait(timeout), f"{exchange.command['cmd']} was not sent within {timeout} s"
        current = self.server.first.state()["current"]  # under the server's lock: the uid is assigned
        if exchange is self._current and current is not None and current["cmd"] == exchange.command["cmd"]:
            exchange.cmd_uid = exchange.cmd_uid or current["cmd_uid"]
            return str(current["cmd_uid"])
        return None

    def cancel(self, exchange: Exchange) -> bool:
        """Press the optimizer's cancel of ``exchange`` (only while it is in flight): whether it was armed."""
        assert self.server is not None
        uid = self.in_flight(exchange)
        if uid is None:
            return False
        return bool(self.server.cancel(reason="test", message="cancelled by the test", cmd_uid=uid)["armed"])

    # the Driver protocol (the server calls these under its lock)

    def next_command(self) -> dict[str, Any]:
        if self._current is not None:
            self._current.finished.set()
            self._current = None
        if not self.queue:
            return {"cmd": "SLEEP", "param": {"duration": IDLE_SLEEP}}
        exchange = self.queue.popleft()
        self.history.append(exchange)
        self._current = exchange
        exchange.sent_at = time.monotonic()
        exchange.sent.set()
        return exchange.command

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        self._entry(command).progress.append(progress)
        return None

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        exchange = self._entry(command)
        exchange.result = result
        exchange.finished.set()
        return None

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        self._entry(command).cancelled = True

    def state(self) -> dict[str, Any]:
        return {"queued": len(self.queue), "sent": len(self.history)}

    def _entry(self, command: dict[str, Any]) -> Exchange:
        assert self._current is not None, f"no command in flight for {command}"
        self._current.cmd_uid = command.get("cmd_uid")
        return self._current


# --- the servo process ------------------------------------------------------------------------


HISTORY_TIMEOUT = 10.0
"""Seconds for the optimizer's history to show a post whose answer is already known."""


def recorded(optimizer: CommandQueue, cmd_uid: str | None, event: str) -> list[dict[str, Any]]:
    """The optimizer's history once it holds ``event`` for ``cmd_uid``. The server records a post
    after answering it, outside its lock: the driver (``on_result``) learns of a result, and a test
    waiting on it wakes, before the history has it."""
    assert optimizer.server is not None
    server = optimizer.server

    def holding() -> list[dict[str, Any]] | None:
        history: list[dict[str, Any]] = server.state()["history"]
        found = any(
            (e.get("param") or {}).get("cmd_uid") == cmd_uid and e.get("event") == event for e in history
        )
        return history if found else None

    return wait_until(holding, HISTORY_TIMEOUT, what=f"{event} of {cmd_uid} in the optimizer's history")


class ServoRun:
    """A `servo-actors run` subprocess with its own config file and log, marked for leak checks."""

    def __init__(self, directory: Path, config: dict[str, Any]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        self.config_path = directory / "servo.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.connectors = len(config.get("connectors") or [])
        """How many connectors it hosts: each in a process of its own, all replaced by a cancel."""
        self.log_path = directory / "servo.log"
        self.marker = uuid.uuid4().hex
        env = {**os.environ, MARKER_VAR: self.marker, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "servo_actors", "-c", str(self.config_path), "run"]
        self._log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=directory
        )

    @classmethod
    def start(cls, directory: Path, config: dict[str, Any]) -> ServoRun:
        return cls(directory, config)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self, tail: int = 6000) -> str:
        """The end of the servo's log, without the lines of idle SLEEPs."""
        if not self._log.closed:
            self._log.flush()
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(line for line in lines if not line.endswith("command SLEEP"))[-tail:]

    def connector_pids(self) -> list[int]:
        return connector_pids(self.marker)

    def stop(self, timeout: float = EXIT_TIMEOUT) -> int:
        """SIGTERM and wait (SIGKILL after ``timeout``); the exit code. Every process the servo started
        must be gone within LEAK_GRACE, else they are killed and AssertionError names them."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._log.close()
        deadline = time.monotonic() + LEAK_GRACE
        while (alive := marked_pids(self.marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not alive, f"processes of the servo survived it: {alive}"
        return int(self.proc.returncode)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def connector_pids(marker: str) -> list[int]:
    """The connector hosts of the servo marked ``marker``: each is the leader of its own process
    group (host/actor.py's setpgrp) without leading a session (the actor system's admin does)."""
    found = []
    for pid in marked_pids(marker):
        fields = _stat_fields(pid)
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pid and int(fields[3]) != pid:
            found.append(pid)
    return sorted(found)


# --- cancels at random moments (test_real_cancels.py, scripts/bench_kube_cancels.py) ------------

ADJUST_WINDOW = 2.5
"""Seconds after an ADJUST is sent within which its cancel is pressed: its patches (the first
~0.1 s), the rollout wait (~0.2-1 s here) and the settlement (SETTLEMENT) fall inside."""
SETTLEMENT = 1.5
MEASURE_SECONDS = 1.5
AT_ONCE = 0.15
"""The share of cancels pressed the moment the command is sent (they land on its first progress
post, while the connector reads and patches)."""
EARLY, EARLY_WINDOW = 0.4, 0.6
"""The share of the others pressed within EARLY_WINDOW seconds, where an ADJUST's rollout wait is."""
CPU_STEPS = [0.1 + 0.05 * i for i in range(9)]  # 100m-500m
MEMORY_STEPS = [0.125 + 0.0625 * i for i in range(7)]  # 128Mi-512Mi


def random_values(rng: Any) -> dict[str, Any]:
    """Every setting of component web, on its grid, the HPA bounds in order."""
    low = rng.randint(1, 3)
    return {
        "cpu": round(rng.choice(CPU_STEPS), 3),
        "memory": rng.choice(MEMORY_STEPS),
        "GOGC": float(rng.randrange(50, 410, 10)),
        "min_replicas": low,
        "max_replicas": rng.randint(max(2, low), 5),
        "target_cpu_utilization": rng.randrange(30, 95, 5),
    }


@dataclass
class CancelRecord:
    trial: int
    cmd: str
    phase: str
    """Where the cancel met the command: patching (no progress from the connector yet), patched,
    rollout wait, settlement, measurement, or result (it had finished: the cancel answered its result)."""
    answered_to: str
    pressed_after: float
    fresh_after: float
    """Seconds from the optimizer answering ``cancel`` to the fresh connector's DESCRIPTION arriving."""
    cancelled_after: float | None
    """Seconds from the optimizer answering ``cancel`` to the ``cancelled`` result arriving (None when
    the cancel answered the result itself)."""


@dataclass
class CancelStorm:
    """What ``run_cancel_storm`` saw."""

    seed: int
    trials: int = 0
    cancels: list[CancelRecord] = field(default_factory=list)
    not_landed: int = 0
    """Cancels pressed after the command had finished (its result was ``ok``; no restart)."""
    completed: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0

    def phases(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for record in self.cancels:
            counted[record.phase] = counted.get(record.phase, 0) + 1
        return dict(sorted(counted.items()))

    def answered_to(self, where: str) -> list[CancelRecord]:
        return [record for record in self.cancels if record.answered_to == where]

    def summary(self) -> str:
        fresh = sorted(record.fresh_after for record in self.cancels)
        timing = ""
        if fresh:
            timing = (
                f"; cancel -> fresh connector's DESCRIPTION: p50 {fresh[len(fresh) // 2] * 1000:.0f} ms, "
                f"max {fresh[-1] * 1000:.0f} ms"
            )
        return (
            f"{len(self.cancels)} cancels in {self.trials} trials ({self.elapsed:.0f} s, seed {self.seed}): "
            f"{len(self.answered_to('progress'))} answered to a progress post (result `cancelled`), "
            f"{len(self.answered_to('result'))} to the result; by phase {self.phases()}; "
            f"{self.not_landed} pressed too late (the command had finished ok); commands completed "
            f"{self.completed}{timing}"
        )


def _cancel_phase(command: str, answered: dict[str, Any]) -> str:
    param = answered.get("param") or {}
    if "status" in param:
        return "result"
    if command == "MEASURE":
        return "measurement"
    message = param.get("message") or ""
    if not message:
        return "patching"
    if message.startswith(("patched", "nothing to change")):
        return "patched"
    if message.startswith("settling"):
        return "settlement"
    if message.startswith("rolling back"):
        return "rollback"
    return "rollout wait"


def run_cancel_storm(
    cluster: LocalCluster,
    namespace: str,
    optimizer: CommandQueue,
    servo: ServoRun,
    rng: Any,
    seed: int,
    cancels: int,
    max_trials: int,
    say: Any = print,
    values_of: Callable[[Any], dict[str, Any]] = random_values,
    measure_metrics: list[str] | None = None,
) -> CancelStorm:
    """Commands with a cancel pressed at a random moment of each, until ``cancels`` were answered to a
    progress post; after each, a DESCRIBE. An ADJUST's values are ``values_of(rng)``, a MEASURE asks
    for ``measure_metrics`` (``measure_command``'s by default). Checked on every trial (AssertionError naming the trial
    and the seed otherwise): a cancel met at a progress post is answered ``cancelled``; every cancel
    that met the command kills every connector's process and fresh ones answer; the DESCRIBE reads
    what the cluster holds; the servo keeps running; a command not cancelled is ``ok`` (an ADJUST's
    values then are the cluster's)."""
    assert optimizer.server is not None
    storm = CancelStorm(seed)
    started = time.monotonic()
    while len(storm.answered_to("progress")) < cancels and storm.trials < max_trials:
        storm.trials += 1
        adjusting = rng.random() < 0.65
        values = values_of(rng) if adjusting else None
        command = (
            adjust_command(values, SETTLEMENT)
            if values
            else measure_command(MEASURE_SECONDS, measure_metrics)
        )
        window = ADJUST_WINDOW if adjusting else MEASURE_SECONDS
        draw = rng.random()
        delay = (
            0.0 if draw < AT_ONCE else rng.uniform(0.0, EARLY_WINDOW if draw < AT_ONCE + EARLY else window)
        )
        where = (
            f"trial {storm.trials} ({command['cmd']}, cancel {delay:.2f} s after it was sent; seed {seed})"
        )
        before = servo.connector_pids()
        assert len(before) == servo.connectors, (
            f"{where}: connector processes before: {before}\n{servo.log()}"
        )
        exchange = optimizer.push(command)
        assert exchange.sent.wait(COMMAND_TIMEOUT), f"{where}: never sent\n{servo.log()}"
        assert exchange.sent_at is not None
        time.sleep(max(0.0, exchange.sent_at + delay - time.monotonic()))  # the random moment itself
        optimizer.cancel(exchange)
        probe = optimizer.push(DESCRIBE)  # next in line: sent once fresh connectors answer
        exchange.wait()
        probe.wait()
        assert servo.alive(), f"{where}: the servo exited\n{servo.log()}"
        uid = exchange.cmd_uid
        history = recorded(optimizer, probe.cmd_uid, "DESCRIPTION")
        posts = [e for e in history if (e.get("param") or {}).get("cmd_uid") == uid]
        answered = [e for e in posts if (e.get("reply") or {}).get("status") == "cancel"]
        assert len(answered) <= 1, f"{where}: cancel answered {len(answered)} times"
        after = servo.connector_pids()
        assert probe.status == "ok", f"{where}: the DESCRIBE after it: {probe.result}\n{servo.log()}"
        truth = cluster_settings(cluster, namespace)
        described = described_settings(probe.result["descriptor"]["application"]["components"])  # type: ignore[index]
        assert same_settings(described, truth), f"{where}: described {described}, the cluster holds {truth}"
        if not answered:
            assert exchange.status == "ok", f"{where}: not cancelled, yet {exchange.result}\n{servo.log()}"
            assert after == before, (
                f"{where}: the connector was replaced ({before} -> {after}) without a cancel"
            )
            if values is not None:
                assert same_settings(values, truth), (
                    f"{where}: adjusted to {values}, the cluster holds {truth}"
                )
            storm.not_landed += 1
            storm.completed[command["cmd"]] = storm.completed.get(command["cmd"], 0) + 1
            continue
        cancel = answered[0]
        to_progress = "status" not in (cancel.get("param") or {})
        if to_progress:
            assert exchange.status == "cancelled", (
                f"{where}: cancel met a progress post, result {exchange.result}"
            )
            assert exchange.result is not None and exchange.result["reason"] == "test"
        else:
            assert exchange.cancelled and exchange.result is None, f"{where}: {exchange.result}"
        assert len(after) == servo.connectors and not set(after) & set(before), (
            f"{where}: the connectors were not all replaced ({before} -> {after})\n{servo.log()}"
        )
        assert not set(before) & set(marked_pids(servo.marker)), (
            f"{where}: old connectors still live: {sorted(set(before) & set(marked_pids(servo.marker)))}"
        )
        described_post = next(
            e for e in history
            if (e.get("param") or {}).get("cmd_uid") == probe.cmd_uid and e.get("event") == "DESCRIPTION"
        )  # fmt: skip
        cancelled_post = next(
            (e for e in posts if (e.get("param") or {}).get("status") == "cancelled"), None
        )  # fmt: skip
        record = CancelRecord(
            storm.trials, command["cmd"], _cancel_phase(command["cmd"], cancel),
            "progress" if to_progress else "result", delay, described_post["at"] - cancel["replied_at"],
            None if cancelled_post is None else cancelled_post["at"] - cancel["replied_at"],
        )  # fmt: skip
        storm.cancels.append(record)
        say(
            f"{where}: {record.phase}, answered to the {record.answered_to}, fresh connectors "
            f"{', '.join(map(str, after))} described {record.fresh_after * 1000:.0f} ms after the cancel"
        )
    storm.elapsed = time.monotonic() - started
    return storm
