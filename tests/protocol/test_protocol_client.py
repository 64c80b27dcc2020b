"""OptimizerClient against the real embedded optimizer over loopback HTTP: shapes, retries, faults.

Timing assertions are lower bounds (a wait is never shorter than the rule says) or generous upper
bounds that only a hang would break.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
from pydantic import SecretStr
from waiting import wait_until

from servo_actors import USER_AGENT
from servo_actors.config.optimizer_section import OptimizerConfig, Settings
from servo_actors.errors import ConfigError
from servo_actors.protocol.client import OptimizerClient
from servo_actors.protocol.commands import AdjustCommand, DescribeCommand, MeasureCommand, SleepCommand
from servo_actors.protocol.writing import (
    adjustment_result,
    description_result,
    failure_result,
    measurement_result,
    progress_param,
)

TOKEN = "tok-5ecret-9f83a1c2"
COMPONENTS = {
    "web": {"settings": {"cpu": {"type": "range", "min": 0.25, "max": 4.0, "step": 0.25, "value": 1.0}}}
}


def gaps(entries: list[dict]) -> list[float]:
    """Seconds between the arrivals of successive requests."""
    return [b["at"] - a["at"] for a, b in zip(entries, entries[1:], strict=False)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(30)
def test_every_event_and_command_shape(scripted, client_for, history) -> None:
    server = scripted(
        [
            {"cmd": "DESCRIBE"},
            {
                "cmd": "MEASURE",
                "param": {
                    "metrics": {"throughput": {"unit": "rps"}},
                    "control": {"duration": "250ms", "warmup": 1},
                },
            },
            {
                "cmd": "ADJUST",
                "param": {
                    "state": {"application": {"components": {"web": {"settings": {"cpu": {"value": 1.5}}}}}},
                    "control": {"settlement": "2s"},
                },
            },
            {"cmd": "SLEEP", "param": {"duration": "100ms", "data": {"reason": "resting"}}},
        ]
    )
    client = client_for(server)
    assert client.hello({"connectors": 1}).status == "ok"

    describe = client.whats_next()
    assert isinstance(describe, DescribeCommand) and describe.cmd_uid
    description = description_result(
        describe.cmd_uid, components=COMPONENTS, metrics={"throughput": {"unit": "rps"}}
    )
    assert client.post_result("DESCRIPTION", description).status == "ok"

    measure = client.whats_next()
    assert isinstance(measure, MeasureCommand)
    assert measure.param.metrics == ["throughput"]
    assert (measure.param.control.duration, measure.param.control.warmup) == (0.25, 1.0)
    assert (
        client.post_progress("MEASUREMENT", progress_param(measure.cmd_uid, progress=50, runtime=0.1)).status
        == "ok"
    )
    metrics = {
        "throughput": {
            "unit": "rps",
            "values": [{"id": "a", "data": [[1, 1.0], [2, 2.0]]}, {"id": "b", "data": [[1, 3.0]]}],
        },
        "cost": {"unit": "$", "value": 2.5},
    }
    measurement = measurement_result(measure.cmd_uid, metrics=metrics, annotations={"note": "x"})
    assert client.post_result("MEASUREMENT", measurement).status == "ok"

    adjust = client.whats_next()
    assert isinstance(adjust, AdjustCommand)
    assert adjust.param.state.application.components["web"].settings["cpu"].value == 1.5
    assert adjust.param.control.settlement == 2.0
    adjustment = adjustment_result(adjust.cmd_uid, components=COMPONENTS)
    assert client.post_result("ADJUSTMENT", adjustment).status == "ok"

    sleep = client.whats_next()
    assert isinstance(sleep, SleepCommand) and sleep.cmd_uid is None
    assert sleep.param.duration == 0.1 and sleep.param.data == {"reason": "resting"}
    assert client.goodbye("shutdown").status == "ok"

    entries = history(server)
    assert [e["event"] for e in entries] == [
        "HELLO",
        "WHATS_NEXT",
        "DESCRIPTION",
        "WHATS_NEXT",
        "MEASUREMENT",
        "MEASUREMENT",
        "WHATS_NEXT",
        "ADJUSTMENT",
        "WHATS_NEXT",
        "GOODBYE",
    ]
    assert all(e["http_status"] == 200 and e["user_agent"] == USER_AGENT for e in entries)
    assert entries[0]["param"] == {"agent": USER_AGENT, "telemetry": {"connectors": 1}}
    assert entries[1]["param"] is None
    assert entries[2]["param"] == description
    assert entries[5]["param"] == measurement  # both series arrive, not only the last
    assert entries[-1]["param"] == {"reason": "shutdown"}
    results = server.state()["driver"]["results"]
    assert [r["event"] for r in results] == ["DESCRIPTION", "MEASUREMENT", "ADJUSTMENT"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("status", [500, 503, 404, 429])
def test_retryable_statuses_are_retried_with_backoff(scripted, client_for, history, status: int) -> None:
    server = scripted([{"fault": {"status": status, "times": 3}}, {"cmd": "DESCRIBE"}])
    client = client_for(server, backoff=(0.05, 0.2, 3.0))
    assert isinstance(client.whats_next(), DescribeCommand)
    entries = history(server, "WHATS_NEXT")
    assert [e["http_status"] for e in entries] == [status] * 3 + [200]
    assert all(gap >= 0.05 for gap in gaps(entries))  # never sooner than backoff.min


@pytest.mark.timeout(30)
def test_unreachable_optimizer_is_retried_until_stopped(client_for, caplog) -> None:
    stop = threading.Event()
    client = client_for(base_url=f"http://127.0.0.1:{free_port()}", stop=stop, backoff=(0.05, 0.2, 1.0))
    caplog.set_level(logging.WARNING, logger="servo_actors.protocol.client")
    threading.Timer(1.0, stop.set).start()
    assert client.whats_next() is None
    attempts = [r for r in caplog.records if "cannot connect" in r.getMessage()]
    # About 1 s of backoff from 0.05 s doubling to 0.2 s: several attempts, never a hot loop.
    assert 3 <= len(attempts) <= 25


@pytest.mark.timeout(30)
def test_polling_goes_on_past_max_time(scripted, client_for, history) -> None:
    server = scripted([{"fault": {"status": 503, "for": "1s"}}, {"cmd": "DESCRIBE"}])
    client = client_for(server, backoff=(0.05, 0.2, 0.3))
    assert isinstance(client.whats_next(), DescribeCommand)
    assert history(server, "WHATS_NEXT")[-1]["http_status"] == 200


@pytest.mark.timeout(30)
def test_result_post_retried_until_delivered(scripted, client_for, history) -> None:
    server = scripted(
        [{"cmd": "DESCRIBE"}, {"fault": {"status": 503, "times": 2, "events": ["DESCRIPTION"]}}]
    )
    client = client_for(server)
    command = client.whats_next()
    description = description_result(command.cmd_uid, components=COMPONENTS, metrics={})
    assert client.post_result("DESCRIPTION", description).status == "ok"
    assert [e["http_status"] for e in history(server, "DESCRIPTION")] == [503, 503, 200]
    assert len(server.state()["driver"]["results"]) == 1


@pytest.mark.timeout(30)
def test_result_post_dropped_after_max_time_with_an_error(scripted, client_for, history, caplog) -> None:
    server = scripted(
        [{"cmd": "DESCRIBE"}, {"fault": {"status": 503, "for": "60s", "events": ["DESCRIPTION"]}}]
    )
    client = client_for(server, backoff=(0.05, 0.2, 0.8))
    command = client.whats_next()
    started = time.monotonic()
    result = client.post_result("DESCRIPTION", description_result(command.cmd_uid, components={}, metrics={}))
    assert result is None
    assert time.monotonic() - started < 10
    assert any(r.levelno == logging.ERROR and "dropped DESCRIPTION" in r.getMessage() for r in caplog.records)
    assert 2 <= len(history(server, "DESCRIPTION")) <= 20
    assert isinstance(client.whats_next(), SleepCommand)  # the servo goes on


@pytest.mark.timeout(30)
def test_refusal_is_logged_and_waits_at_least_backoff_max(scripted, client_for, history, caplog) -> None:
    server = scripted([{"fault": {"status": 403, "for": "1s"}}, {"cmd": "DESCRIBE"}])
    client = client_for(server, backoff=(0.05, 0.4, 3.0))
    assert isinstance(client.whats_next(), DescribeCommand)
    entries = history(server, "WHATS_NEXT")
    refused = [e for e in entries if e["http_status"] == 403]
    assert 1 <= len(refused) <= 4  # 1 s of 403 at >= 0.4 s apart
    assert all(gap >= 0.4 for gap in gaps(entries))
    errors = [r.getMessage() for r in caplog.records if r.name == "servo_actors.protocol.client"]
    assert errors and all(server.servo_url in e and "HTTP 403" in e for e in errors)


@pytest.mark.timeout(60)
def test_401_for_ten_seconds_makes_only_a_few_requests(scripted, client_for, history, caplog) -> None:
    """The issue's case: a wrong token for 10 s must not produce hundreds of requests."""
    server = scripted([{"fault": {"status": 401, "for": "10s"}}, {"cmd": "DESCRIBE"}], token=TOKEN)
    client = client_for(server, token=TOKEN, backoff=(0.05, 2.5, 5.0))
    assert isinstance(client.whats_next(), DescribeCommand)
    entries = history(server, "WHATS_NEXT")
    assert 3 <= len([e for e in entries if e["http_status"] == 401]) <= 6
    assert all(gap >= 2.5 for gap in gaps(entries))
    logged = [r.getMessage() for r in caplog.records if r.name == "servo_actors.protocol.client"]
    assert logged and all("HTTP 401" in line and "check the token" in line for line in logged)
    assert TOKEN not in caplog.text


@pytest.mark.timeout(30)
def test_410_unexpected_servo_uid_waits_long(scripted, client_for, history, caplog) -> None:
    server = scripted([{"fault": {"status": 410, "detail": "unexpected servo_uid"}}, {"cmd": "DESCRIBE"}])
    client = client_for(server, backoff=(0.05, 0.1, 3.0), gone_wait=1.0)
    assert isinstance(client.whats_next(), DescribeCommand)
    entries = history(server, "WHATS_NEXT")
    assert [e["http_status"] for e in entries] == [410, 200]
    assert gaps(entries)[0] >= 1.0  # gone_wait, not backoff.min
    assert "replaced or deprovisioned" in caplog.text and "unexpected servo_uid" in caplog.text


@pytest.mark.timeout(30)
def test_reply_stalled_past_the_read_timeout_is_retried(scripted, client_for, history) -> None:
    server = scripted([{"fault": {"stall": "30s"}}, {"cmd": "DESCRIBE"}])
    client = client_for(server, timeouts=(1.0, 0.3))
    started = time.monotonic()
    assert isinstance(client.whats_next(), DescribeCommand)
    assert time.monotonic() - started < 15  # the stall lasts 30 s: the client did not wait it out
    assert [e["http_status"] for e in history(server, "WHATS_NEXT")] == [
        200
    ]  # the stalled one never answered


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("fault", "logged"),
    [
        ({"body": "<html>not json</html>"}, "not JSON"),
        ({"json": [1, 2, 3]}, "expected a JSON object"),
        ({"json": "DESCRIBE"}, "expected a JSON object"),
        ({"json": {"cmd": "REBOOT"}}, "unknown command"),
        ({"json": {"cmd": "MEASURE", "param": {"control": {"duration": "soon"}}}}, "param.control.duration"),
        ({"json": {"status": "ok"}}, "unexpected reply: status 'ok'"),
    ],
)
def test_malformed_replies_are_errors_and_polling_goes_on(
    scripted, client_for, caplog, fault, logged
) -> None:
    server = scripted([{"fault": fault}, {"cmd": "DESCRIBE"}])
    client = client_for(server)
    assert isinstance(client.whats_next(), DescribeCommand)
    errors = [r.getMessage() for r in caplog.records if r.name == "servo_actors.protocol.client"]
    assert len(errors) == 1 and logged in errors[0] and server.servo_url in errors[0]


@pytest.mark.timeout(30)
def test_unreadable_reply_to_a_result_is_not_reposted(scripted, client_for, history, caplog) -> None:
    server = scripted([{"cmd": "DESCRIBE"}, {"fault": {"body": "oops", "events": ["DESCRIPTION"]}}])
    client = client_for(server)
    command = client.whats_next()
    assert (
        client.post_result("DESCRIPTION", description_result(command.cmd_uid, components={}, metrics={}))
        is None
    )
    assert len(history(server, "DESCRIPTION")) == 1
    assert "not JSON" in caplog.text


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("written", "form"),
    [(TOKEN, "Bearer"), (f"Bearer {TOKEN}", "Bearer"), (f"X-SF-Token {TOKEN}", "X-SF-Token")],
)
def test_the_three_token_forms(scripted, client_for, history, written: str, form: str) -> None:
    server = scripted([], token=TOKEN)
    client = client_for(server, token=written)
    assert client.hello().status == "ok"
    assert history(server)[0]["auth"] == form


@pytest.mark.timeout(30)
def test_the_token_is_never_in_logs_errors_or_reprs(scripted, client_for, caplog) -> None:
    caplog.set_level(logging.DEBUG)  # urllib3's and requests' own debug lines too
    server = scripted([{"cmd": "DESCRIBE"}], token="the-right-token-123")
    stop = threading.Event()
    client = client_for(server, token=TOKEN, stop=stop, backoff=(0.05, 0.2, 0.5))
    threading.Timer(0.8, stop.set).start()
    assert client.whats_next() is None  # refused with 401 until stopped
    assert client.hello() is None  # stopped
    assert "HTTP 401" in caplog.text
    assert TOKEN not in caplog.text
    for record in caplog.records:
        assert TOKEN not in repr(record.args) and TOKEN not in str(record.exc_info)
    assert TOKEN not in repr(client) and TOKEN not in str(vars(client).get("url"))
    config = OptimizerConfig(id="example.com/web", token=TOKEN)
    assert TOKEN not in repr(config)


@pytest.mark.parametrize("bad", ["line\nbreak-token", "tøken-with-non-ascii", "   "])
def test_a_token_no_header_can_carry_is_a_config_error_without_the_token(bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        OptimizerClient(OptimizerConfig(id="example.com/web"), Settings(), token=SecretStr(bad))
    assert "optimizer.token" in str(caught.value)
    assert bad.strip() not in str(caught.value) or not bad.strip()


@pytest.mark.timeout(30)
def test_stop_wakes_a_backoff_sleep_at_once(scripted, client_for, history) -> None:
    server = scripted([{"fault": {"status": 503, "for": "60s"}}])
    stop = threading.Event()
    client = client_for(server, stop=stop, backoff=(20.0, 20.0, 60.0))
    done = threading.Event()
    worker = threading.Thread(target=lambda: (client.whats_next(), done.set()), daemon=True)
    worker.start()
    # The first attempt has failed (answered 503); the client sleeps 20 s.
    wait_until(lambda: history(server, "WHATS_NEXT"), 10, what="the first attempt answered 503")
    set_at = time.monotonic()
    stop.set()
    assert done.wait(5)
    assert time.monotonic() - set_at < 5


@pytest.mark.timeout(30)
def test_stop_ends_a_request_in_flight_and_goodbye_still_goes_out(scripted, client_for, history) -> None:
    server = scripted([{"fault": {"stall": "60s", "events": ["WHATS_NEXT"]}}])
    stop = threading.Event()
    client = client_for(server, stop=stop, timeouts=(2.0, 60.0))

    def stop_once_stalled() -> None:  # the request is in flight once the server has taken its fault
        try:
            wait_until(lambda: server.state()["driver"]["faults_hit"] == 1, 10, what="the request stalled")
        finally:
            stop.set()

    threading.Thread(target=stop_once_stalled, daemon=True).start()
    started = time.monotonic()
    assert client.whats_next() is None
    assert time.monotonic() - started < 10
    assert client.goodbye("SIGTERM").status == "ok"  # after stop, on a fresh connection
    assert history(server, "GOODBYE")[0]["param"] == {"reason": "SIGTERM"}


@pytest.mark.timeout(30)
def test_progress_is_bounded_by_the_connect_and_read_timeouts(scripted, client_for) -> None:
    server = scripted(
        [{"cmd": "MEASURE"}, {"fault": {"stall": "60s", "times": 10, "events": ["MEASUREMENT"]}}]
    )
    client = client_for(server, progress_interval=0.1, timeouts=(0.5, 1.0))
    command = client.whats_next()
    started = time.monotonic()
    assert client.post_progress("MEASUREMENT", progress_param(command.cmd_uid, progress=1, runtime=0)) is None
    assert time.monotonic() - started < 10


@pytest.mark.timeout(30)
def test_a_progress_reply_slower_than_the_progress_interval_is_still_read(scripted, client_for) -> None:
    # The reply may be `cancel`: a post abandoned after one progress interval would lose it.
    server = scripted(
        [
            {"cmd": "MEASURE", "progress": ["cancel"]},
            {"fault": {"stall": "600ms", "events": ["MEASUREMENT"]}},
        ]
    )
    client = client_for(server, progress_interval=0.05, timeouts=(2.0, 5.0))
    command = client.whats_next()
    reply = client.post_progress("MEASUREMENT", progress_param(command.cmd_uid, progress=1, runtime=0))
    assert reply is not None and reply.status == "cancel"


@pytest.mark.timeout(30)
def test_progress_answers_ok_then_cancel(scripted, client_for) -> None:
    server = scripted(
        [
            {
                "cmd": "ADJUST",
                "param": {"state": {"application": {"components": {}}}},
                "progress": ["ok", "cancel"],
            }
        ]
    )
    client = client_for(server)
    command = client.whats_next()
    first = client.post_progress("ADJUSTMENT", progress_param(command.cmd_uid, progress=10, runtime=0.1))
    second = client.post_progress("ADJUSTMENT", progress_param(command.cmd_uid, progress=20, runtime=0.2))
    assert (first.status, second.status, second.reason) == ("ok", "cancel", "cancelled")
    cancelled = failure_result(
        "ADJUSTMENT", command.cmd_uid, status="cancelled", reason="cancelled", message="ok"
    )
    assert client.post_result("ADJUSTMENT", cancelled).status == "ok"


@pytest.mark.timeout(30)
def test_goodbye_is_bounded(scripted, client_for) -> None:
    server = scripted([{"fault": {"stall": "60s"}}])
    client = client_for(server, timeouts=(2.0, 60.0))
    started = time.monotonic()
    assert client.goodbye("SIGTERM", timeout=0.5) is None
    assert time.monotonic() - started < 5


@pytest.mark.timeout(30)
@pytest.mark.parametrize("suffix", ["", "/"])
def test_explicit_url_and_trailing_slashes(scripted, suffix: str) -> None:
    server = scripted([{"cmd": "DESCRIBE"}])
    settings = Settings(backoff={"min": 0.05, "max": 0.1, "max_time": 1})
    for config in (
        OptimizerConfig(id="example.com/web", url=server.url + suffix),
        OptimizerConfig(id="example.com/web", base_url=server.url + suffix),
    ):
        with OptimizerClient(config, settings) as client:
            assert not client.url.endswith("//servo")
            assert client.hello().status == "ok"
    assert [e["http_status"] for e in server.state()["history"]] == [200, 200]
