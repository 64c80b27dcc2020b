"""End to end: a real `servo-actors run`, the embedded optimizer, a real Prometheus scraping the servo.

- What Prometheus stores equals what the optimizer saw (its request history), after a run with
  every kind of cancel, a crash, a deadline and HTTP faults; the run's JSON log tells the same.
- /healthz turns 503 while the loop is stuck (supervisor stopped, optimizer stalled) and 200 after.
- An escalation is scraped before the servo exits (it lingers), and the probes say why.
- Nothing listens unless configured, and only where configured.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_server import PrometheusServer

from servo_actors.actors.linux import processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TOKEN = "obs-e2e-token-5f4d3c2b1a"
RUN_TIMEOUT = 90.0
"""Generous bound on the scripted run: only a hang breaks it."""
PROBE_WAIT = 20.0
"""Generous bound on a probe changing its answer."""
MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["words"], "control": {"duration": "0.6s"}}}
RESULT_EVENTS = {"DESCRIPTION": "DESCRIBE", "MEASUREMENT": "MEASURE", "ADJUSTMENT": "ADJUST"}
CANCEL_KINDS = {"cancel": "progress", "unexpected-event": "unexpected-event", "invalid": "invalid"}


def adjust(component: str) -> dict[str, Any]:
    settings = {"s": {"value": 2}}
    return {
        "cmd": "ADJUST",
        "param": {"state": {"application": {"components": {component: {"settings": settings}}}}},
    }


def one_setting(component: str) -> dict[str, Any]:
    return {component: {"settings": {"s": {"type": "range", "min": 1, "max": 4, "step": 1, "value": 1}}}}


def value(prometheus: PrometheusServer, expression: str, at: float) -> float:
    result = prometheus.query(expression, at)
    assert len(result) == 1, (expression, result)
    return float(result[0]["value"][1])


def by_labels(prometheus: PrometheusServer, metric: str, labels: tuple[str, ...], at: float) -> Counter[Any]:
    """``{label values: value}`` of every series of ``metric`` that is not 0."""
    found: Counter[Any] = Counter()
    for series in prometheus.query(metric, at):
        number = float(series["value"][1])
        if number:
            key = tuple(series["metric"][label] for label in labels)
            found[key if len(key) > 1 else key[0]] = int(number)
    return found


def test_prometheus_stores_what_the_optimizer_saw(servo, optimizer, kit, tmp_path: Path) -> None:
    driver = kit.scripted(
        [
            {"cmd": "DESCRIBE"},
            {**MEASURE, "progress": ["cancel"]},
            {**MEASURE, "result_reply": "cancel"},
            {**MEASURE, "progress": ["unexpected-event"]},
            {**MEASURE, "progress": ["invalid"]},
            {"fault": {"status": 503, "times": 2, "events": ["WHATS_NEXT"]}},
            adjust("boom"),  # the crasher exits
            adjust("slow"),  # the hanger sleeps past its deadline
            MEASURE,
            {"fault": {"status": 500, "times": 1, "events": ["MEASUREMENT"]}},
            {"cmd": "DESCRIBE"},
        ],
        token=TOKEN,
    )
    server = optimizer(driver)
    address = f"127.0.0.1:{kit.free_port()}"
    connectors = [
        {"name": "chatty", "type": "obs_test_connectors:Chatty", "config": {"say": f"the token {TOKEN}"}},
        kit.chaos("crasher", components=one_setting("boom"), faults={"adjust": "exit"}),
        kit.chaos(
            "hanger", components=one_setting("slow"), faults={"adjust": {"action": "sleep", "seconds": 600}}
        ),
    ]
    config = kit.servo_config(
        server,
        connectors,
        settings={"metrics": {"listen": address}},
        supervisor={"operation_grace": "1s", "restart_backoff": {"min": "50ms", "max": "1s"}},
    )
    config["optimizer"]["token"] = TOKEN
    (tmp_path / "prometheus").mkdir()
    prometheus = PrometheusServer(tmp_path / "prometheus", [address], job="servo")
    try:
        proc = servo(config)
        prometheus.wait_ready()
        kit.wait_until(lambda: driver.state()["done"], RUN_TIMEOUT, 0.1, what="the script")
        # Done once the servo took the final SLEEP; then a scrape after that moment.
        kit.wait_until(lambda: last_poll_is_sleep(server), RUN_TIMEOUT, 0.1, what="the final SLEEP")
        settled = time.time() + 1.5  # the last listings (liveness pings) have come in
        kit.wait_until(lambda: time.time() > settled, 5.0, 0.1)
        kit.wait_until(lambda: scraped_since(prometheus, settled), RUN_TIMEOUT, 0.2, what="a scrape after it")
        at = time.time()
        history = server.state()["history"]
        saw = optimizer_view(history)
        stored = {
            "received": by_labels(prometheus, "servo_commands_received_total", ("cmd",), at),
            "results": by_labels(prometheus, "servo_command_results_total", ("cmd", "status"), at),
            "cancels": by_labels(prometheus, "servo_cancels_total", ("kind",), at),
            "requests": by_labels(prometheus, "servo_optimizer_requests_total", ("event", "status"), at),
            "retries": by_labels(prometheus, "servo_optimizer_retries_total", ("event",), at),
            "restarts": by_labels(prometheus, "servo_connector_restarts_total", ("connector", "reason"), at),
        }
        # The run did what the script asked for ...
        assert saw["cancels"] == Counter({"progress": 1, "result": 1, "unexpected-event": 1, "invalid": 1})
        assert saw["restarts"][("crasher", "crash")] == saw["restarts"][("hanger", "deadline")] == 1
        assert saw["retries"]["WHATS_NEXT"] == 2 and saw["retries"]["MEASUREMENT"] == 1
        # ... and Prometheus has it all as the optimizer saw it.
        assert stored == saw, proc.log()[-4000:]
        assert value(prometheus, "servo_microreboots_total", at) == 0
        assert value(prometheus, "sum(servo_restart_intensity_escalations_total)", at) == 0
        assert value(prometheus, "servo_connector_processes_alive", at) == 3
        assert value(prometheus, "servo_connectors_configured", at) == 3
        assert value(prometheus, "servo_healthy", at) == value(prometheus, "servo_ready", at) == 1
        assert value(prometheus, "count(servo_build_info)", at) == 1
        last_poll = max(entry["replied_at"] for entry in history if entry["event"] == "WHATS_NEXT")
        assert abs(value(prometheus, "servo_last_successful_poll_timestamp_seconds", at) - last_poll) < 1.0
        assert value(prometheus, 'servo_optimizer_backoff_seconds_total{event="WHATS_NEXT"}', at) > 0
        durations = {
            operation: value(
                prometheus, f'servo_operation_duration_seconds_count{{operation="{operation}"}}', at
            )
            for operation in ("describe", "adjust", "measure")
        }
        assert durations["describe"] == 2 and durations["adjust"] == 2 and durations["measure"] >= 2
        check_log(proc.log_lines(), saw, stored["restarts"])
        assert TOKEN not in proc.log()
    finally:
        prometheus.stop()


def last_poll_is_sleep(server: Any) -> bool:
    polls = [entry for entry in server.state()["history"] if entry["event"] == "WHATS_NEXT"]
    return bool(polls) and (polls[-1].get("reply") or {}).get("cmd") == "SLEEP"


def scraped_since(prometheus: PrometheusServer, moment: float) -> bool:
    result = prometheus.query('timestamp(up{job="servo"})')
    return bool(result) and float(result[0]["value"][1]) > moment


def optimizer_view(history: list[dict[str, Any]]) -> dict[str, Counter[Any]]:
    """The counters as the optimizer's request history has them."""
    view: dict[str, Counter[Any]] = {
        name: Counter() for name in ("received", "results", "cancels", "requests", "retries", "restarts")
    }
    connectors = ("chatty", "crasher", "hanger")
    for entry in history:
        event, status, param = entry["event"], entry["http_status"], entry.get("param") or {}
        reply = entry.get("reply") or {}
        view["requests"][(event, str(status))] += 1
        if status >= 500:
            view["retries"][event] += 1  # each one was tried again after a backoff
        if status != 200:
            continue
        if event == "WHATS_NEXT" and reply.get("cmd"):
            view["received"][reply["cmd"]] += 1
        elif event in RESULT_EVENTS and "status" in param:
            view["results"][(RESULT_EVENTS[event], param["status"])] += 1
            if reply.get("status") == "cancel":
                view["cancels"]["result"] += 1
            if param["reason"] == "timeout":
                view["restarts"][("hanger", "deadline")] += 1
            if param["reason"] == "connector-crashed":
                view["restarts"][("crasher", "crash")] += 1
        elif event in RESULT_EVENTS and reply.get("status") in CANCEL_KINDS:
            view["cancels"][CANCEL_KINDS[reply["status"]]] += 1
    for name in connectors:  # every cancel, of any kind, restarts every connector
        view["restarts"][(name, "cancel")] = sum(view["cancels"].values())
    return view


def check_log(lines: list[dict[str, Any]], saw: dict[str, Counter[Any]], restarts: Counter[Any]) -> None:
    """Every line parsed as JSON (``log_lines``) and carries the stable fields; the event lines
    tell what the optimizer saw; the connectors' lines are there, named."""
    stable = ("event", "cmd", "cmd_uid", "connector", "generation", "pid", "reason", "duration_ms")
    assert lines and all(set(stable) <= set(line) for line in lines)
    of = Counter(line["event"] for line in lines)
    assert of["command"] == sum(saw["received"].values())
    assert Counter(line["cmd"] for line in lines if line["event"] == "command") == saw["received"]
    results = [line for line in lines if line["event"] == "result"]
    assert Counter((line["cmd"], line["status"]) for line in results) == saw["results"]
    assert all(line["cmd_uid"] and line["reason"] and line["duration_ms"] >= 0 for line in results)
    assert of["cancel"] == sum(saw["cancels"].values())
    logged = Counter((line["connector"], line["reason"]) for line in lines if line["event"] == "restart")
    assert logged == restarts
    chatty = [line for line in lines if line["connector"] == "chatty" and line["event"] == "log"]
    assert any(line["message"].startswith("chatty measures and says the token **********") for line in chatty)
    assert all(line["generation"] and line["pid"] for line in chatty)
    assert any("exit fault in adjust" in line["message"] for line in lines if line["connector"] == "crasher")


def test_healthz_is_503_while_the_supervisor_is_stopped_and_200_again_after(servo, optimizer, kit) -> None:
    server = optimizer(kit.scripted([]))  # SLEEP 60 s: only the actor system's answers turn the loop
    address = f"127.0.0.1:{kit.free_port()}"
    config = kit.servo_config(
        server,
        [kit.chaos("app")],
        settings={"metrics": {"listen": address, "stall_after": "1.5s"}},
        supervisor={"liveness": {"interval": "0.3s", "timeout": "60s"}},
    )
    proc = servo(config)
    ready = kit.wait_until(lambda: ok(kit.probe_or_none(address, "/readyz")), PROBE_WAIT, 0.1, what="ready")
    assert ready["status"] == "ready"
    supervisor = kit.supervisor_pid(proc.pid, proc.marker)
    os_kill(supervisor, signal.SIGSTOP)
    try:
        stuck = kit.wait_until(lambda: failing(kit.probe(address, "/healthz")), PROBE_WAIT, 0.1, what="503")
        assert stuck["reasons"][0].startswith("the control loop has not turned for")
        assert stuck["command"] == "SLEEP"
    finally:
        os_kill(supervisor, signal.SIGCONT)
    kit.wait_until(lambda: ok(kit.probe(address, "/healthz")), PROBE_WAIT, 0.1, what="200 after SIGCONT")
    # Killed instead: a microreboot, counted; the fresh system answers and the probes say so.
    os_kill(supervisor, signal.SIGKILL)
    kit.wait_until(lambda: microreboots(kit, address) == 1, PROBE_WAIT, 0.1, what="the microreboot")
    kit.wait_until(lambda: ok(kit.probe(address, "/readyz")), PROBE_WAIT, 0.1, what="ready again")
    assert ok(kit.probe(address, "/healthz"))
    assert (
        'servo_connector_restarts_total{app="example.com/web",connector="app",reason="microreboot"} 1.0'
        in kit.probe(address, "/metrics").text
    )
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_healthz_is_503_while_the_optimizer_stalls_a_poll_and_200_after(servo, optimizer, kit) -> None:
    driver = kit.scripted([{"cmd": "DESCRIBE"}, {"fault": {"stall": "4s", "events": ["WHATS_NEXT"]}}])
    server = optimizer(driver)
    address = f"127.0.0.1:{kit.free_port()}"
    config = kit.servo_config(
        server, [kit.chaos("app")], settings={"metrics": {"listen": address, "stall_after": "1.5s"}}
    )
    proc = servo(config)
    stuck = kit.wait_until(
        lambda: failing(kit.probe_or_none(address, "/healthz")), PROBE_WAIT, 0.1, what="503"
    )
    assert "the control loop has not turned" in stuck["reasons"][0]
    assert ok(kit.probe(address, "/readyz")), "the optimizer was reached: ready, only slow"
    kit.wait_until(lambda: ok(kit.probe(address, "/healthz")), PROBE_WAIT, 0.1, what="200 after the stall")
    assert driver.state()["faults_hit"] == 1
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_a_connector_marked_failed_is_scraped_and_named_while_the_servo_goes_on(
    servo, optimizer, kit
) -> None:
    server = optimizer(kit.scripted([{"cmd": "MEASURE", "param": {"metrics": ["x"]}}]))
    address = f"127.0.0.1:{kit.free_port()}"
    config = kit.servo_config(
        server,
        [kit.chaos("crasher", metrics={"x": {"unit": "n"}}, faults={"measure": "exit"}), kit.chaos("fine")],
        settings={"metrics": {"listen": address}},
        supervisor={"max_restarts": 0, "failed_retry": "1h"},
    )
    proc = servo(config)
    for line in (
        'servo_restart_intensity_escalations_total{app="example.com/web",connector="crasher"} 1.0',
        'servo_connector_up{app="example.com/web",connector="crasher"} 0.0',
        'servo_connector_up{app="example.com/web",connector="fine"} 1.0',
    ):
        kit.wait_until(
            lambda line=line: line in (text(kit.probe_or_none(address, "/metrics"))),
            PROBE_WAIT,
            0.1,
            what=line,
        )
    # Not ready, naming it; still healthy: the loop turns, and the servo does not end the run.
    readyz = kit.wait_until(lambda: failing(kit.probe(address, "/readyz")), PROBE_WAIT, 0.1, what="503")
    assert "crasher (crash-loop)" in readyz["connectors"], readyz
    assert ok(kit.probe(address, "/healthz"))
    assert not goodbye_sent(server) and proc.proc.poll() is None
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0


def test_nothing_listens_unless_configured_and_only_where_configured(servo, optimizer, kit) -> None:
    server = optimizer(kit.scripted([]))
    quiet = servo(kit.servo_config(server, [kit.chaos("app")]))
    configured_port, override_port = kit.free_port(), kit.free_port()
    config = kit.servo_config(
        server, [kit.chaos("app")], settings={"metrics": {"listen": f"127.0.0.1:{configured_port}"}}
    )
    served = servo(config, "--metrics-listen", f"127.0.0.1:{override_port}")
    kit.wait_until(lambda: ok(kit.probe_or_none(f"127.0.0.1:{override_port}", "/healthz")), PROBE_WAIT, 0.1)
    kit.wait_until(lambda: polled_twice(server), PROBE_WAIT, 0.1, what="both servos polling")
    for proc in (quiet, served):
        sockets = {pid: set(processes.listening_sockets(pid)) for pid in kit.marked_pids(proc.marker)}
        assert {host for found in sockets.values() for host, _ in found} == {"127.0.0.1"}, sockets
        main = sockets[proc.pid]
        # The actor system's own sockets are held by several of its processes (inherited); the
        # metrics socket by the servo's process alone.
        others = set().union(*(found for pid, found in sockets.items() if pid != proc.pid))
        own = {port for _, port in main - others}
        assert own == (set() if proc is quiet else {override_port}), sockets
        assert configured_port not in {port for found in sockets.values() for _, port in found}


def goodbye_sent(server: Any) -> bool:
    return any(entry["event"] == "GOODBYE" for entry in server.state()["history"])


def polled_twice(server: Any) -> bool:
    return sum(1 for entry in server.state()["history"] if entry["event"] == "HELLO") == 2


def ok(response: Any) -> dict[str, Any] | None:
    """The JSON body of a 200 (a Response itself is falsy unless 2xx: no use to wait_until)."""
    return response.json() if response is not None and response.status_code == 200 else None


def failing(response: Any) -> dict[str, Any] | None:
    """The JSON body of a 503."""
    return response.json() if response is not None and response.status_code == 503 else None


def text(response: Any) -> str:
    return response.text if response is not None else ""


def microreboots(kit: Any, address: str) -> float:
    for line in kit.probe(address, "/metrics").text.splitlines():
        if line.startswith("servo_microreboots_total{"):
            return float(line.split()[1])
    return 0.0


def os_kill(pid: int, signum: int) -> None:
    import os

    os.kill(pid, signum)
