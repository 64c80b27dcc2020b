"""The embedded optimizer's request history stays bounded, whatever is posted to it."""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any

import pytest

from servo_actors.optimizer.history import KEPT_BODY_BYTES, PREFIX_CHARS, RequestHistory
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.optimizer.server import OptimizerServer
from servo_actors.optimizer.web import MAX_BODY_BYTES

APP = "example.com/web"
BIG_REQUESTS = 20
STATE_BOUND = 512 * 1024
"""/admin/state after the big requests: summaries only (a kept body would be 15 MB)."""
RSS_GROWTH_BOUND = 150 * 1024 * 1024
"""Generous: keeping the bodies would grow the process by 20 x 15 MB."""


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _state_size(post: Any, server: OptimizerServer) -> int:
    answer = post(server, b"", path="/admin/state", method="GET")
    assert answer.status == 200
    json.loads(answer.body)  # strict enough for a browser: it parses
    return len(answer.body)


@pytest.mark.timeout(120)
def test_big_rejected_bodies_leave_only_bounded_summaries(post, event, start_server) -> None:
    server = start_server([{"cmd": "MEASURE", "param": {"metrics": ["x"]}}])
    assert post(server, event("WHATS_NEXT")).json()["cmd_uid"] == "c1"
    blob = "x" * (MAX_BODY_BYTES - 4096)
    # Refused as malformed (a reason of two words) after being read whole: the worst case.
    param = {"status": "ok", "reason": "two words", "cmd_uid": "c1", "blob": blob}
    raw = json.dumps(event("MEASUREMENT", param)).encode()
    assert len(raw) <= MAX_BODY_BYTES
    rss_before = _rss_bytes()
    for _ in range(BIG_REQUESTS):
        answer = post(server, raw)
        assert answer.status == 200 and answer.json()["status"] == "invalid"
    growth = _rss_bytes() - rss_before
    assert _state_size(post, server) < STATE_BOUND
    assert growth < RSS_GROWTH_BOUND, f"the process grew by {growth / 2**20:.0f} MB"
    entries = [e for e in server.state()["history"] if e.get("event") == "MEASUREMENT"]
    assert len(entries) == BIG_REQUESTS
    encoded = json.dumps(param, separators=(",", ":")).encode()
    for entry in entries:
        # The scalar fields stay (a trace still reads status and cmd_uid); the blob does not.
        assert entry["param"] == {"status": "ok", "reason": "two words", "cmd_uid": "c1"}
        assert entry["body"]["bytes"] == len(encoded)
        assert entry["body"]["sha256"] == hashlib.sha256(encoded).hexdigest()
        assert len(entry["body"]["prefix"]) <= PREFIX_CHARS and entry["body"]["kept"] is False


@pytest.mark.timeout(30)
def test_small_bodies_are_kept_whole_and_summarized(post, event, start_server) -> None:
    server = start_server([])
    post(server, event("HELLO", {"agent": "t", "telemetry": {"a": 1}}))
    entry = server.state()["history"][0]
    assert entry["param"] == {"agent": "t", "telemetry": {"a": 1}}
    assert entry["body"]["kept"] is True and entry["body"]["bytes"] < KEPT_BODY_BYTES


@pytest.mark.timeout(30)
def test_a_body_nested_too_deep_is_refused_and_summarized_not_walked(post, event, start_server) -> None:
    server = start_server([])
    deep: Any = 1
    for _ in range(300):
        deep = {"a": deep}
    answer = post(server, event("HELLO", {"agent": "t", "telemetry": deep}))
    assert answer.status == 400 and "nested deeper" in answer.json()["detail"]
    entry = server.state()["history"][-1]
    assert entry["param"] == {"agent": "t"} and "nested deeper" in entry["body"]["problem"]
    assert _state_size(post, server) < STATE_BOUND


@pytest.mark.timeout(30)
def test_history_length_is_bounded_and_drops_are_counted(post, event) -> None:
    driver = ScriptedDriver.from_plan({"app": APP, "script": []})
    with OptimizerServer(driver, app=APP, history_limit=5) as server:
        for n in range(12):
            post(server, event("HELLO", {"agent": f"a{n}"}))
        state = server.state()
    assert [e["param"]["agent"] for e in state["history"]] == [f"a{n}" for n in range(7, 12)]
    assert (state["requests"], state["history_dropped"]) == (12, 7)


def test_kept_bodies_are_bounded_in_bytes_too() -> None:
    history = RequestHistory(limit=1000, kept_body_bytes=1000, max_kept_bytes=5000)
    for n in range(20):
        history.append({"event": "HELLO", "param": {"agent": "a" * 900, "n": n}})
    entries = history.entries()
    assert len(entries) == 5 and entries[-1]["param"]["n"] == 19
    assert history.dropped == 15 and history.seen == 20


@pytest.mark.timeout(30)
def test_nan_in_a_body_stays_out_of_the_state(post, start_server) -> None:
    server = start_server([])
    raw = b'{"event": "HELLO", "param": {"agent": "t", "x": NaN, "y": [Infinity]}, "servo_uid": null}'
    assert post(server, raw).status == 200  # Python reads NaN; the state must still be JSON
    answer = post(server, b"", path="/admin/state", method="GET")
    state = json.loads(answer.body, parse_constant=lambda name: pytest.fail(f"{name} in /admin/state"))
    entry = state["history"][-1]
    assert entry["param"] == {"agent": "t"} and "not a finite number" in entry["body"]["problem"]


@pytest.mark.timeout(30)
def test_a_command_with_nan_is_never_sent(post, event, start_server) -> None:
    class NanDriver:
        """A driver whose command carries NaN (the scripted one cannot: its plans are checked)."""

        def next_command(self) -> dict[str, Any]:
            return {"cmd": "MEASURE", "param": {"control": {"userdata": {"slo": math.nan}}}}

        def progress_reply(self, command: dict, progress: dict) -> None:
            return None

        def on_result(self, command: dict, event: str, result: dict) -> None:
            return None

        def on_cancelled(self, command: dict, reason: str) -> None:
            return None

        def state(self) -> dict[str, Any]:
            return {}

    server = start_server(NanDriver())
    answer = post(server, event("WHATS_NEXT"))
    assert answer.status == 500 and "not a finite number" in answer.json()["detail"]
