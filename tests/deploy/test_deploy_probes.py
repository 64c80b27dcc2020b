"""deploy/kubernetes: the probes and the metrics port match the servo.yaml the ConfigMap holds.

The manifests' schemas are checked by test_deploy_manifests.py; here, that the kubelet probes the
address the servo listens on, and that 0.0.0.0 is this deployment's choice, never a default.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from servo_actors.config.listen import parse_listen
from servo_actors.config.optimizer_section import MetricsConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"


def documents(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def servo_yaml() -> dict:
    return yaml.safe_load(documents("configmap.yaml")["data"]["servo.yaml"])


def test_the_probes_reach_the_port_the_servo_listens_on() -> None:
    host, port = parse_listen(servo_yaml()["settings"]["metrics"]["listen"])
    assert host == "0.0.0.0"  # the kubelet and Prometheus reach the pod's IP
    pod = documents("deployment.yaml")["spec"]["template"]
    container = pod["spec"]["containers"][0]
    ports = {entry["name"]: entry["containerPort"] for entry in container["ports"]}
    assert ports == {"metrics": port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port) and annotations["prometheus.io/path"] == "/metrics"


def test_the_liveness_probe_gives_the_loop_its_stall_bound_and_no_more_than_needed() -> None:
    probe = documents("deployment.yaml")["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    stall_after = MetricsConfig.model_validate(servo_yaml()["settings"]["metrics"]).stall_after
    # The probe only sees what /healthz says; it restarts a servo stuck past stall_after within
    # failureThreshold periods, and never fails on a single slow answer.
    assert probe["failureThreshold"] >= 2 and probe["timeoutSeconds"] >= 2
    assert probe["periodSeconds"] * probe["failureThreshold"] <= stall_after


def test_nothing_listens_by_default_and_no_example_listens_on_every_interface() -> None:
    assert MetricsConfig().listen is None
    for example in (ROOT / "config").glob("*.yaml"):
        assert "0.0.0.0" not in example.read_text(), example
    sources = [path for path in (ROOT / "servo_actors").rglob("*.py") if "0.0.0.0" in path.read_text()]
    # Only the code that refuses wildcard binds (Thespian's, and a convention's address) names it.
    assert sorted(path.relative_to(ROOT).as_posix() for path in sources) == [
        "servo_actors/actors/transport/system.py",
        "servo_actors/actors/transport/thespian_internals.py",
        "servo_actors/endpoints.py",
    ]
