"""The alerting rules (deploy/prometheus) pass promtool, use only metrics the servo exports, and the
docs/observability.md shows the same rules and every metric name."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from servo_actors.observability.registry import ServoMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "servo-alerts.yaml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "servo-alerts.test.yaml"
PROMTOOL_TIMEOUT = 60.0
"""Generous bound on one promtool run."""


def promtool() -> str:
    """The promtool binary (Debian's prometheus package); fails the test, never skips, without it."""
    found = shutil.which("promtool")
    if not found:
        pytest.fail("promtool is missing: install the Debian package prometheus (apt-get install prometheus)")
    return found


def exported_names() -> set[str]:
    """Every sample name /metrics serves (``_total``, ``_bucket``... included)."""
    metrics = ServoMetrics()
    metrics.connectors(["app"])
    text = generate_latest(metrics.registry).decode()
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def observability_page() -> str:
    return (ROOT / "docs" / "observability.md").read_text()


@pytest.mark.parametrize("command", [["check", "rules", str(RULES)], ["test", "rules", str(RULES_TEST)]])
def test_promtool_checks_the_rules_and_their_unit_tests_pass(command: list[str]) -> None:
    done = subprocess.run(
        [promtool(), *command], capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT, cwd=RULES.parent
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_the_rules_name_only_metrics_the_servo_exports() -> None:
    names = exported_names()
    assert {rule["alert"] for rule in rules()} == {
        "ServoNotPolling",
        "ServoRestartStorm",
        "ServoRestartIntensityExceeded",
    }
    for rule in rules():
        used = set(re.findall(r"\b(servo_[a-z_]+)", rule["expr"]))
        assert used and used <= names, (rule["alert"], used - names)


def test_the_observability_page_shows_the_scrape_config_the_rules_and_every_metric() -> None:
    section = observability_page()
    assert "scrape_configs:" in section and "job_name: servo" in section
    for rule in rules():
        assert f"alert: {rule['alert']}" in section
        assert f"expr: {rule['expr']}" in section, rule["alert"]
    documented = set(re.findall(r"`(servo_[a-z_]+)`", section))
    suffix = {"counter": "_total", "info": "_info"}
    families = {
        family.name + suffix.get(family.type, "")
        for family in ServoMetrics().registry.collect()
        if family.name.startswith("servo_")
    }
    assert documented == families, documented ^ families
