"""The embedded optimizer's HTTP side: raw requests, good and bad, over loopback."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from typing import Any

import pytest
from waiting import wait_until

from servo_actors.optimizer.web import MAX_BODY_BYTES, STATIC_DIR

TOKEN = "srv-token-0a1b2c3d"
MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["rps"], "control": {"duration": 1}}}
OK_MEASUREMENT = {"status": "ok", "reason": "success", "metrics": {"rps": {"unit": "rps", "value": 3}}}


def raw_event(name: Any, param: Any = None, servo_uid: Any = None) -> dict[str, Any]:
    return {"event": name, "param": param, "servo_uid": servo_uid}


def run_command(post: Any, event: Any, server: Any) -> dict[str, Any]:
    answer = post(server, event("WHATS_NEXT"))
    assert answer.status == 200
    return answer.json()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{not json", 400, "not JSON"),
        (b"\xff\xfe\x00garbage", 400, "not JSON"),
        (b"", 400, "JSON object"),
        ([1, 2], 400, "JSON object"),
        ("HELLO", 400, "JSON object"),
        ({"event": "HELLO", "param": {"agent": "x"}}, 400, "servo_uid"),
        ({**raw_event("WHATS_NEXT"), "extra": 1}, 400, "extra"),
        (raw_event("REBOOT"), 400, "event"),
        (raw_event(42), 400, "event"),
        (raw_event("HELLO", "hi"), 400, "param"),
        (raw_event("HELLO", {"no_agent": 1}), 400, "param.agent"),
        (raw_event("GOODBYE", {}), 400, "param.reason"),
        # Deeper than Python's JSON parser goes: 400, not a RecursionError answered 500.
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested deeper"),
    ],
)
def test_malformed_requests_get_400_json_and_the_server_keeps_serving(
    post, event, start_server, body: Any, status: int, says: str
) -> None:
    server = start_server([])
    answer = post(server, body)
    assert answer.status == status
    assert answer.headers["Content-Type"] == "application/json"
    assert says in answer.json()["detail"]
    assert post(server, event("HELLO", {"agent": "test"})).json() == {"status": "ok"}


@pytest.mark.timeout(30)
def test_bad_lengths_and_huge_bodies(post, event, start_server) -> None:
    server = start_server([])
    assert post(server, b"{}", headers={"Content-Length": str(MAX_BODY_BYTES + 1)}).status == 413
    assert post(server, b"{}", headers={"Content-Length": "many"}).status == 400
    # No Content-Length at all (a raw request): 400, and the connection is closed, not misread.
    with socket.create_connection(server.url.removeprefix("http://").split(":"), timeout=10) as sock:
        sock.sendall(f"POST {server.servo_path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    assert post(server, event("HELLO", {"agent": "test"})).status == 200


@pytest.mark.timeout(30)
def test_unknown_paths_and_other_apps(post, event, start_server) -> None:
    server = start_server([])
    hello = event("HELLO", {"agent": "t"})
    assert post(server, hello, path="/accounts/example.com/applications/other/servo").status == 404
    assert post(server, hello, path="/nowhere").status == 404
    assert post(server, hello, path="/servo").status == 200  # an explicit `url` with no path
    assert post(server, hello, path="/api/v1/servo/").status == 200
    assert post(server, hello, path=server.servo_path + "?x=1").status == 200


@pytest.mark.timeout(30)
def test_tokens_are_enforced_in_all_three_forms(post, event, start_server) -> None:
    server = start_server([], token=TOKEN)
    hello = event("HELLO", {"agent": "t"})
    refused = post(server, hello)
    assert refused.status == 401 and refused.json() == {"detail": "missing or wrong token"}
    assert post(server, hello, headers={"Authorization": "Bearer wrong-token"}).status == 401
    assert post(server, hello, headers={"X-SF-Token": "wrong"}).status == 401
    assert post(server, hello, headers={"Authorization": TOKEN}).status == 401  # no scheme: not a form
    for headers in (
        {"Authorization": f"Bearer {TOKEN}"},
        {"Authorization": f"bearer  {TOKEN}"},
        {"X-SF-Token": TOKEN},
    ):
        assert post(server, hello, headers=headers).status == 200
    entries = server.state()["history"]
    assert [e["http_status"] for e in entries] == [401, 401, 401, 401, 200, 200, 200]
    assert TOKEN not in str(server.state())


@pytest.mark.timeout(30)
def test_cmd_uids_stale_uids_and_events_out_of_order(post, event, start_server) -> None:
    server = start_server([{"cmd": "DESCRIBE"}, MEASURE, {"cmd": "SLEEP", "param": {"duration": 5}}])
    describe = run_command(post, event, server)
    assert describe["cmd_uid"] == "c1"
    # a result event that does not fit the command in flight
    wrong = post(server, event("MEASUREMENT", {**OK_MEASUREMENT, "cmd_uid": "c1"})).json()
    assert wrong["status"] == "unexpected-event"
    stale = post(server, event("DESCRIPTION", {"status": "failed", "reason": "x", "cmd_uid": "c0"})).json()
    assert stale == {"status": "invalid", "reason": "unexpected cmd_uid", "message": "'c0' is not in flight"}
    malformed = post(
        server, event("DESCRIPTION", {"status": "ok", "reason": "success", "cmd_uid": "c1"})
    ).json()
    assert malformed["status"] == "invalid" and "needs a descriptor" in malformed["message"]
    failed = {"status": "failed", "reason": "unreachable", "message": "no kube", "cmd_uid": "c1"}
    assert post(server, event("DESCRIPTION", failed)).json() == {"status": "ok"}
    # c1 is done: its result again is stale; a result with no command in flight is out of order
    assert post(server, event("DESCRIPTION", failed)).json()["reason"] == "unexpected cmd_uid"
    assert post(server, event("MEASUREMENT", {"progress": 5})).json()["status"] == "unexpected-event"
    measure = run_command(post, event, server)
    assert measure["cmd_uid"] == "c2" and measure["param"]["control"] == {"duration": 1}
    sleep = run_command(post, event, server)
    assert "cmd_uid" not in sleep and sleep["param"]["duration"] == 5
    assert server.state()["current"] is None


@pytest.mark.timeout(30)
def test_admin_cancel_answers_the_next_progress_post_with_cancel(post, event, start_server) -> None:
    server = start_server([MEASURE])
    idle = post(server, {}, path="/admin/cancel").json()
    assert idle["in_flight"] is False and idle["armed"] is False
    uid = run_command(post, event, server)["cmd_uid"]
    assert post(server, event("MEASUREMENT", {"progress": 10, "runtime": 1, "cmd_uid": uid})).json() == {
        "status": "ok"
    }
    armed = post(server, {"reason": "aborted", "message": "Abort pressed"}, path="/admin/cancel").json()
    assert armed["in_flight"] is True and armed["cmd_uid"] == uid
    cancel = post(server, event("MEASUREMENT", {"progress": 20, "runtime": 2, "cmd_uid": uid})).json()
    assert cancel == {"status": "cancel", "reason": "aborted", "message": "Abort pressed"}
    # the back half of the handshake: the cancelled result is accepted, then polling goes on
    cancelled = {"status": "cancelled", "reason": "aborted", "message": "stopped", "cmd_uid": uid}
    assert post(server, event("MEASUREMENT", cancelled)).json() == {"status": "ok"}
    assert run_command(post, event, server)["cmd"] == "SLEEP"
    driver = server.state()["driver"]
    assert driver["cancelled"] == [{"cmd_uid": uid, "cmd": "MEASURE", "reason": "aborted"}]
    assert driver["results"][0]["result"]["status"] == "cancelled"


@pytest.mark.timeout(30)
def test_admin_cancel_without_progress_is_honoured_on_the_result(post, event, start_server) -> None:
    server = start_server([{"cmd": "DESCRIBE"}])
    uid = run_command(post, event, server)["cmd_uid"]
    assert post(server, b"", path="/admin/cancel").json()["armed"] is True
    descriptor = {"application": {"components": {}}}
    result = {"status": "ok", "reason": "success", "cmd_uid": uid, "descriptor": descriptor}
    assert post(server, event("DESCRIPTION", result)).json()["status"] == "cancel"
    assert server.state()["current"] is None and server.state()["driver"]["results"] == []
    assert post(server, {"reason": "two words"}, path="/admin/cancel").status == 400


@pytest.mark.timeout(30)
def test_a_cancel_for_a_named_command_never_lands_on_the_next_and_each_cancel_is_recorded(
    post, event, start_server
) -> None:
    server = start_server([MEASURE, MEASURE])
    first = run_command(post, event, server)["cmd_uid"]
    assert post(server, event("MEASUREMENT", {**OK_MEASUREMENT, "cmd_uid": first})).json()["status"] == "ok"
    second = run_command(post, event, server)["cmd_uid"]
    # Pressed for the first command, which has finished: nothing is armed for the second.
    late = post(server, {"cmd_uid": first}, path="/admin/cancel").json()
    assert (
        late["armed"] is False and f"{first} is no longer in flight (MEASURE {second} is)" in late["message"]
    )
    assert server.state()["cancel_armed"] is False
    armed = post(server, {"cmd_uid": second}, path="/admin/cancel").json()
    assert armed["armed"] is True and armed["cmd_uid"] == second
    progress = event("MEASUREMENT", {"progress": 40, "runtime": 1, "cmd_uid": second})
    assert post(server, progress).json()["status"] == "cancel"
    [record] = server.state()["cancels"]
    assert record["cmd"] == "MEASURE" and record["cmd_uid"] == second
    assert record["answered_to"] == "progress" and record["progress"] == 40
    assert post(server, {"cmd_uid": 7}, path="/admin/cancel").status == 400


@pytest.mark.timeout(30)
def test_admin_state_holds_every_request_and_reply_with_timestamps(post, event, start_server) -> None:
    server = start_server([{"cmd": "DESCRIBE"}])
    before = time.time()
    post(server, event("HELLO", {"agent": "t", "telemetry": {"a": 1}}, "uid-1"))
    run_command(post, event, server)
    post(server, b"junk")
    answer = post(server, b"", path="/admin/state", method="GET")
    assert answer.status == 200
    state = answer.json()
    assert state["app"] == "example.com/web" and state["current"]["cmd"] == "DESCRIBE"
    history = state["history"]
    assert [(e.get("event"), e["http_status"]) for e in history] == [
        ("HELLO", 200),
        ("WHATS_NEXT", 200),
        (None, 400),
    ]
    assert history[0]["param"] == {"agent": "t", "telemetry": {"a": 1}}
    assert history[1]["reply"] == {"cmd": "DESCRIBE", "cmd_uid": "c1", "param": {}}
    assert all(before <= e["at"] <= e["replied_at"] <= time.time() for e in history)
    assert state["driver"]["kind"] == "script"


@pytest.mark.timeout(30)
def test_console_page(post, event, start_server) -> None:
    server = start_server([])
    answer = post(server, b"", path="/", method="GET")
    assert answer.status == 200
    if (STATIC_DIR / "index.html").is_file():
        assert answer.headers["Content-Type"].startswith("text/html")
    else:
        assert answer.headers["Content-Type"].startswith("text/plain")
        assert b"/admin/state" in answer.body and server.servo_path.encode() in answer.body
    assert post(server, b"", path="/static/../server.py", method="GET").status == 404
    assert post(server, b"", path="/nothing", method="GET").status == 404


class ExplodingDriver:
    """A real driver whose decisions fail: the server must answer 500 and go on serving."""

    def next_command(self) -> dict[str, Any]:
        raise RuntimeError("the strategy divided by zero")

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        return {"status": "maybe"}

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        return None

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        return None

    def state(self) -> dict[str, Any]:
        return {"kind": "exploding"}


class BadCommandDriver(ExplodingDriver):
    def next_command(self) -> dict[str, Any]:
        return {"cmd": "MEASURE", "param": {"control": {"duration": "whenever"}}}


@pytest.mark.timeout(30)
def test_a_failing_driver_gets_500_and_the_server_survives(post, event, start_server, caplog) -> None:
    server = start_server(ExplodingDriver())
    answer = post(server, event("WHATS_NEXT"))
    assert answer.status == 500 and "divided by zero" in answer.json()["detail"]
    assert post(server, event("HELLO", {"agent": "t"})).status == 200
    bad = start_server(BadCommandDriver())
    answer = post(bad, event("WHATS_NEXT"))
    assert answer.status == 500 and "param.control.duration" in answer.json()["detail"]


@pytest.mark.timeout(30)
def test_stop_is_bounded_with_stalled_requests_and_idle_connections(post, event, start_server) -> None:
    server = start_server([{"fault": {"stall": "60s", "times": 5}}])
    idle = socket.create_connection(server.url.removeprefix("http://").split(":"), timeout=10)
    outcome: list[object] = []

    def stalled_request() -> None:
        try:
            outcome.append(post(server, event("WHATS_NEXT")))
        except (ConnectionError, http.client.HTTPException) as exc:
            outcome.append(exc)

    stalled = threading.Thread(target=stalled_request, daemon=True)
    stalled.start()
    # The request is stalled once the server has taken its fault (counted before the stall).
    wait_until(lambda: server.state()["driver"]["faults_hit"] == 1, 10, what="the request stalled")
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 10
    stalled.join(10)
    assert not stalled.is_alive()
    assert isinstance(outcome[0], http.client.RemoteDisconnected)  # dropped, not answered
    assert idle.recv(10) == b""  # the idle keep-alive connection was closed too
    idle.close()
    server.stop()  # twice is fine


@pytest.mark.timeout(30)
def test_keep_alive_connection_serves_many_requests(post, event, start_server) -> None:
    server = start_server([])
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for _ in range(20):
            connection.request(
                "POST", server.servo_path, body=b'{"event":"HELLO","param":{"agent":"t"},"servo_uid":null}'
            )
            response = connection.getresponse()
            assert response.status == 200 and response.read() == b'{"status": "ok"}'
        assert connection.sock is not None  # the same socket throughout
    finally:
        connection.close()


def test_commands_always_carry_a_param_object_and_sleep_its_data() -> None:
    """servox 25.3.0 dies on a DESCRIBE without param or a SLEEP without param.data (docs/interop.md)."""
    import requests

    from servo_actors.optimizer.scripted import ScriptedDriver
    from servo_actors.optimizer.server import OptimizerServer

    plan = {
        "app": "example.com/web",
        "script": [{"cmd": "DESCRIBE"}, {"cmd": "SLEEP", "param": {"duration": 1}}],
    }
    with OptimizerServer(ScriptedDriver.from_plan(plan), app="example.com/web") as server:

        def post(event: str, param: object = None) -> dict:
            body = {"event": event, "param": param, "servo_uid": None}
            return requests.post(server.servo_url, json=body, timeout=5).json()

        describe = post("WHATS_NEXT")
        assert describe["param"] == {}
        # A result with reason null (servox's cancelled result) is accepted, the status standing in.
        answer = post(
            "DESCRIPTION",
            {"status": "cancelled", "reason": None, "message": "x", "cmd_uid": describe["cmd_uid"]},
        )
        assert answer == {"status": "ok"}
        sleep = post("WHATS_NEXT")
        assert sleep["cmd"] == "SLEEP" and sleep["param"]["data"] == {}
        # POST /admin/cancel with no body at all (plain `curl -X POST`) is an empty request, not an error.
        import http.client

        host, port = server.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=5)
        connection.putrequest("POST", "/admin/cancel")  # no Content-Length header at all
        connection.endheaders()
        reply = connection.getresponse()
        assert reply.status == 200, reply.read()
        connection.close()
