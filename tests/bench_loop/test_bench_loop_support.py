"""The parts of scripts/bench_loop.py that decide what is reported: configs, log reading, verdicts, file."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from bench_support.agents import servo_actors_config, servox_config
from bench_support.phases import cancel_timings
from bench_support.report import END_MARK, START_MARK, render, write_section

from servo_actors.config import load_config
from servo_actors.connectors.registry import connector_settings_problems

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("connectors", ["noop", "cancel"])
def test_the_servo_configs_it_writes_are_valid(tmp_path: Path, connectors: str) -> None:
    path = tmp_path / "servo.yaml"
    optimizer = SimpleNamespace(url="http://127.0.0.1:9")
    path.write_text(yaml.safe_dump(servo_actors_config(connectors, optimizer)))
    config = load_config(
        path, env={}, connector_check=connector_settings_problems
    )  # resolves every connector type and validates its config
    assert len(config.connectors) == 4
    hung = [c for c in config.connectors if c.type == "chaos"]
    assert len(hung) == (1 if connectors == "cancel" else 0)


def test_servox_gets_the_same_number_of_connectors() -> None:
    for connectors in ("noop", "cancel"):
        config = servox_config(connectors)
        assert len(config["connectors"]) == 4
        assert all(len(name) >= 3 for name in config["connectors"])  # servox's own rule
        assert set(config) - {"connectors"} == set(config["connectors"])


def _entry(event: str, at: float, param: Any = None, reply: Any = None) -> dict[str, Any]:
    return {"event": event, "at": at, "replied_at": at + 0.001, "param": param, "reply": reply}


def test_cancel_timings_from_a_request_log() -> None:
    measure = {"cmd": "MEASURE", "cmd_uid": "c1", "param": {}}
    log = [
        _entry("WHATS_NEXT", 10.0, reply=measure),
        _entry("MEASUREMENT", 10.1, {"cmd_uid": "c1", "progress": 1}, {"status": "cancel"}),
        _entry(
            "MEASUREMENT",
            10.141,
            {"cmd_uid": "c1", "status": "cancelled", "reason": "bench"},
            {"status": "ok"},
        ),
        _entry("WHATS_NEXT", 10.151, reply={**measure, "cmd_uid": "c2"}),
        _entry("MEASUREMENT", 10.3, {"cmd_uid": "c2", "progress": 1}, {"status": "cancel"}),
        _entry(
            "MEASUREMENT",
            10.321,
            {"cmd_uid": "c2", "status": "cancelled", "reason": "bench"},
            {"status": "ok"},
        ),
        _entry("HELLO", 11.0, {"agent": "a new process"}),  # the agent exited: no poll of its own came
        _entry("WHATS_NEXT", 11.1),
    ]
    first, second = cancel_timings(log)
    assert first["to_cancelled_ms"] == pytest.approx(40.0)
    assert first["to_next_poll_ms"] == pytest.approx(50.0)
    assert (first["status"], first["reason"]) == ("cancelled", "bench")
    assert second["to_cancelled_ms"] == pytest.approx(20.0)
    assert second["to_next_poll_ms"] is None


def _results(per_command: float, cancelled: float, idle: float) -> dict[str, Any]:
    agent = {
        "describe": {
            "per_command_ms": [per_command] * 3,
            "result_to_next_poll_ms": [1.0],
            "loop_per_command_ms": per_command + 2,
        },
        "cancel": {
            "samples": [{"to_cancelled_ms": cancelled, "to_next_poll_ms": cancelled + 3}],
            "came_back": 1,
            "process_count_before": 8,
            "process_count_after": 8,
        },
        "idle": {"cpu_percent": idle, "scheduler_percent": idle, "processes": [], "polls_in_window": 0},
        "leaked": [],
    }
    return {
        "machine": {k: "x" for k in ("cpu", "cores", "kernel", "python", "thespian", "servo_actors", "date")}
        | {"load_at_start": "1 1 1", "tree": "abc"},
        "quick": True,
        "settings": {
            "cold_starts": 0,
            "describes": 3,
            "warmup": 0,
            "idle_window": 1.0,
            "progress_interval": 0.1,
            "log_level": "warning",
        },
        "agents": {"servo-actors": agent, "servox": {"skipped": "skipped (--no-servox)"}},
    }


def _verdict(text: str, target: str) -> str:
    row = next(line for line in text.splitlines() if line.startswith(f"| {target}"))
    return row.rstrip(" |").rsplit("|", 1)[1].strip()


def test_targets_are_marked_met_or_missed() -> None:
    good = render(_results(per_command=4.0, cancelled=50.0, idle=0.2), {})
    assert _verdict(good, "per-command overhead p50 <=") == "met"
    assert _verdict(good, "cancel reply -> `cancelled` p99 <=") == "met"
    assert _verdict(good, "idle CPU <=") == "met"
    bad = render(_results(per_command=6.0, cancelled=150.0, idle=0.7), {})
    assert _verdict(bad, "per-command overhead p50 <=") == "MISSED"
    assert _verdict(bad, "cancel reply -> `cancelled` p99 <=") == "MISSED"
    assert _verdict(bad, "idle CPU <=") == "MISSED"


def test_write_section_replaces_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    write_section(path, "first\n")  # created with a header
    assert path.read_text().startswith("# Benchmarks")
    other = "<!-- bench_actors:start -->\nactors numbers\n<!-- bench_actors:end -->\n"
    path.write_text(path.read_text() + "\n" + other)
    write_section(path, "second\n")
    text = path.read_text()
    assert "first" not in text and "second" in text
    assert other in text
    assert text.count(START_MARK) == 1 and text.count(END_MARK) == 1
