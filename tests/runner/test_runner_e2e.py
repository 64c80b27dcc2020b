"""The control loop end to end: a real `servo-actors run` process against the embedded optimizer."""

from __future__ import annotations

import signal
import time

import pytest

from servo_actors.optimizer.search import SearchDriver
from servo_actors.optimizer.server import OptimizerServer

pytestmark = pytest.mark.slow

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip in these tests: only a hang breaks it."""

SYNTHETIC = {
    "name": "app",
    "type": "synthetic",
    "config": {"seed": 3, "time_scale": 0.05, "rollout_seconds": "2s"},
}


def probe(**faults: object) -> dict:
    """A chaos connector whose measure annotations show its PID and how many ops its process served."""
    return {
        "name": "probe",
        "type": "chaos",
        "config": {"faults": faults, "metrics": {"x": {"unit": "n"}}, "values": {"x": 1}},
    }


def measure(seconds: float = 0.5, metrics: list[str] | None = None) -> dict:
    return {"cmd": "MEASURE", "param": {"metrics": metrics or ["x"], "control": {"duration": seconds}}}


def probe_pid(entry) -> int:
    return int(entry.result["annotations"]["probe.pid"])


def probe_ops(entry) -> int:
    """How many operations the probe's process had served when it answered (fresh: the same low count)."""
    return int(entry.result["annotations"]["probe.operations"])


@pytest.mark.timeout(120)
def test_full_optimization_follows_the_protocol(servo, optimizer, kit) -> None:
    driver = SearchDriver.from_plan(
        {
            "app": "example.com/web",
            "steps": 3,
            "measure": {"duration": "20s"},
            "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250"]},
            "sleep": 1,
            "confirm": {"repeats": 0},  # counts below are the search's; confirmation has its own tests
        }
    )
    server = optimizer(driver)
    proc = servo(kit.servo_config(server, [SYNTHETIC]))
    kit.wait_until(lambda: driver.phase == "done", FINISH_TIMEOUT, what="plan done")
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    history = server.state()["history"]
    posts = kit.check_trace(history)
    results = [p[-1]["param"] for p in posts.values() if p and "status" in p[-1]["param"]]
    assert len(results) == 1 + 1 + 3 * 2  # DESCRIBE, baseline MEASURE, 3 x (ADJUST, MEASURE)
    assert all(r["status"] == "ok" for r in results), results
    assert history[-1]["param"] == {"reason": "SIGTERM"}
    assert history[0]["param"]["telemetry"]["connectors"] == [{"name": "app", "type": "synthetic"}]
    # Progress went out during the 1 s measures, at most one interval after each began.
    measured = [p for p in posts.values() if any("progress" in e["param"] for e in p)]
    assert measured, "no progress was posted"
    assert "Traceback" not in proc.log()


def _queue_servo(servo, optimizer, kit, connectors, **settings):
    driver = kit.QueueDriver()
    server: OptimizerServer = optimizer(driver)
    driver.server = server
    proc = servo(kit.servo_config(server, connectors, **settings))
    return driver, server, proc


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", ["unexpected-event", "invalid"])
def test_lost_sync_stops_the_operation_without_a_result(servo, optimizer, kit, answer) -> None:
    driver, server, proc = _queue_servo(servo, optimizer, kit, [probe()])
    first = driver.push(measure(0.2))
    lost = driver.push(measure(30), progress=[answer])
    after = driver.push(measure(0.2))
    assert after.finished.wait(FINISH_TIMEOUT), proc.log()
    assert lost.result is None and len(lost.progress_posts) == 1
    assert after.result["status"] == "ok"
    # The 30 s measure was stopped by killing its connector: the next one ran in a fresh process.
    assert probe_pid(after) != probe_pid(first)
    assert probe_ops(after) == probe_ops(first)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    kit.check_trace(server.state()["history"])


@pytest.mark.timeout(120)
def test_cancel_in_reply_to_the_result_restarts_connectors_and_posts_nothing_more(
    servo, optimizer, kit
) -> None:
    driver, server, proc = _queue_servo(servo, optimizer, kit, [probe()])
    first = driver.push(measure(0.1), result_reply="cancel")
    after = driver.push(measure(0.1))
    assert after.finished.wait(FINISH_TIMEOUT), proc.log()
    assert first.result is not None and first.result["status"] == "ok"
    assert probe_pid(after) != probe_pid(first), "connectors were not restarted after the cancel"
    proc.signal(signal.SIGINT)
    assert proc.wait() == 0
    posts = kit.check_trace(server.state()["history"])
    assert [p["param"].get("status") for p in posts[first.cmd_uid] if "status" in p["param"]] == ["ok"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_with_a_hung_connector_says_goodbye_and_exits_0(servo, optimizer, kit, signum) -> None:
    driver, server, proc = _queue_servo(servo, optimizer, kit, [probe(measure={"action": "socket_read"})])
    hung = driver.push(measure(1))
    kit.wait_until(lambda: len(hung.progress_posts) >= 2, FINISH_TIMEOUT, what="progress of the hung measure")
    sent = time.monotonic()
    proc.signal(signum)
    assert proc.wait() == 0, proc.log()
    elapsed = time.monotonic() - sent
    print(f"{signal.Signals(signum).name} -> exit: {elapsed:.2f} s")
    assert elapsed < 15, "the servo took far too long to stop"
    history = server.state()["history"]
    kit.check_trace(history)
    assert history[-1]["param"] == {"reason": signal.Signals(signum).name}
    assert hung.result is None  # abandoned: no result is owed
    # The servo's own output says so too, at info: not only the optimizer sees the GOODBYE.
    said = [line for line in proc.log().splitlines() if "GOODBYE" in line]
    assert len(said) == 1, proc.log()
    assert f"GOODBYE (reason {signal.Signals(signum).name}) posted to {server.url}/" in said[0], said
    assert "INFO" in said[0].upper(), said


@pytest.mark.timeout(120)
def test_sigkill_of_the_servo_leaves_no_process(servo, optimizer, kit) -> None:
    driver, server, proc = _queue_servo(
        servo, optimizer, kit, [probe(measure={"action": "subprocess", "seconds": 600}), SYNTHETIC]
    )
    hung = driver.push(measure(30))
    kit.wait_until(lambda: hung.progress_posts, FINISH_TIMEOUT, what="the measure running")
    assert len(kit.marked_pids(proc.marker)) >= 3
    proc.signal(signal.SIGKILL)
    proc.wait()
    start = time.monotonic()
    kit.wait_until(lambda: not kit.marked_pids(proc.marker), 15, what="every process of the servo gone")
    print(f"SIGKILL -> last process gone: {time.monotonic() - start:.2f} s")


def _port(server: OptimizerServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


@pytest.mark.timeout(120)
def test_optimizer_down_for_10s_during_a_measure_then_the_result_arrives(servo, optimizer, kit) -> None:
    driver, server, proc = _queue_servo(servo, optimizer, kit, [probe()])
    entry = driver.push(measure(2))
    kit.wait_until(lambda: entry.progress_posts, FINISH_TIMEOUT, what="the measure running")
    server.stop()
    time.sleep(10)  # nothing listens for 10 s; the 2 s measure ends meanwhile
    revived = OptimizerServer(driver, app=server.app, host="127.0.0.1", port=_port(server)).take_over(server)
    revived.start()
    try:
        assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
        assert entry.result["status"] == "ok"
        assert entry.result["metrics"]["x"]
        again = driver.push(measure(0.1))
        assert again.finished.wait(FINISH_TIMEOUT)
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0
        kit.check_trace(revived.state()["history"])
    finally:
        revived.stop()


@pytest.mark.timeout(120)
def test_optimizer_restart_without_its_state_mid_run(servo, optimizer, kit, tmp_path) -> None:
    """A restarted search optimizer resumes from its state file; the servo's late result is refused
    (the new process never issued that command) and the run goes on to the end of the plan."""
    plan = {
        "app": "example.com/web",
        "steps": 3,
        "measure": {"duration": "20s"},
        "objective": {"minimize": "cost"},
        "sleep": 1,
        "confirm": {"repeats": 0},  # the count below is the search's; confirmation has its own tests
    }
    state_file = tmp_path / "optimizer-state.json"
    first = SearchDriver.from_plan(plan, state_file)
    server = optimizer(first)
    proc = servo(kit.servo_config(server, [SYNTHETIC]))
    kit.wait_until(lambda: len(first.steps) >= 2, FINISH_TIMEOUT, what="two steps done")
    server.stop()
    second = SearchDriver.from_plan(plan, state_file)
    revived = OptimizerServer(second, app=server.app, host="127.0.0.1", port=_port(server)).start()
    try:
        kit.wait_until(lambda: second.phase == "done", FINISH_TIMEOUT, what="the resumed plan done")
        assert len(second.steps) == 4  # baseline + 3, none redone
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0
        assert "Traceback" not in proc.log()
    finally:
        revived.stop()


@pytest.mark.timeout(120)
def test_sighup_reloads_a_good_config_and_refuses_a_broken_one(servo, optimizer, kit) -> None:
    driver, server, proc = _queue_servo(servo, optimizer, kit, [probe()])
    first = driver.push(measure(0.1))
    assert first.finished.wait(FINISH_TIMEOUT), proc.log()
    assert first.result["metrics"]["x"]["values"][0]["data"][0][1] == 1

    changed = kit.servo_config(server, [probe()])
    changed["connectors"][0]["config"]["values"] = {"x": 2}
    proc.write_config(changed)
    proc.signal(signal.SIGHUP)
    kit.wait_until(lambda: "reloaded" in proc.log(), 20, what="the reload")
    second = driver.push(measure(0.1))
    assert second.finished.wait(FINISH_TIMEOUT), proc.log()
    assert second.result["metrics"]["x"]["values"][0]["data"][0][1] == 2

    proc.config_path.write_text("connectors: [{name: probe, type: no-such-type}]\n")
    proc.signal(signal.SIGHUP)
    kit.wait_until(lambda: "reload refused" in proc.log(), 20, what="the refusal")
    assert "no-such-type" in proc.log()
    third = driver.push(measure(0.1))
    assert third.finished.wait(FINISH_TIMEOUT), proc.log()
    assert third.result["metrics"]["x"]["values"][0]["data"][0][1] == 2
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0
    assert "Traceback" not in proc.log()


@pytest.mark.timeout(120)
def test_restart_intensity_exceeded_marks_the_connector_failed_and_the_loop_goes_on(
    servo, optimizer, kit
) -> None:
    driver = kit.QueueDriver()
    server = optimizer(driver)
    neighbour = {
        "name": "other",
        "type": "chaos",
        "config": {"metrics": {"y": {"unit": "n"}}, "values": {"y": 2}},
    }
    config = kit.servo_config(server, [probe(measure={"action": "exit", "exit_code": 3}), neighbour])
    config["supervisor"] = {
        "max_restarts": 1,
        "period": "1m",
        "restart_backoff": {"min": "10ms", "max": "50ms"},
        "failed_retry": "1h",
    }
    proc = servo(config)
    entries = [driver.push(measure(0.1, ["x", "y"])) for _ in range(4)]
    for entry in entries:
        assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    results = [e.result for e in entries]
    assert all(r["status"] == "failed" for r in results), results
    assert "connector-crashed" in {r["reason"] for r in results}
    # Once marked failed, its part fails at once naming why; the neighbour's values still come.
    assert results[-1]["reason"] == "crash-loop" and "connector 'probe' is not up" in results[-1]["message"]
    assert set(results[-1]["metrics"]) == {"y"}
    assert proc.proc.poll() is None, proc.log()
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    history = server.state()["history"]
    assert history[-1]["event"] == "GOODBYE" and history[-1]["param"] == {"reason": "SIGTERM"}
    log = proc.log()
    assert "marked failed" in log and "Traceback" not in log


@pytest.mark.timeout(120)
def test_sigterm_while_connectors_restart_after_a_cancel_does_not_wait_for_them(
    servo, optimizer, kit, tmp_path
) -> None:
    slow = tmp_path / "slow-startup"
    driver, server, proc = _queue_servo(
        servo, optimizer, kit, [probe(startup={"action": "sleep", "seconds": 60, "only_if_file": str(slow)})]
    )
    kit.wait_until(lambda: server.state()["history"], FINISH_TIMEOUT, what="HELLO (connectors started)")
    slow.touch()  # from now on a fresh probe takes 60 s to start
    entry = driver.push(measure(30), progress=["cancel"])
    kit.wait_until(lambda: entry.result is not None, FINISH_TIMEOUT, what="the cancelled result")
    assert entry.result["status"] == "cancelled"
    sent = time.monotonic()
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    assert time.monotonic() - sent < 30, "the servo waited for the slow respawn"
    assert server.state()["history"][-1]["param"] == {"reason": "SIGTERM"}
