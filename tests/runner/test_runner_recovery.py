"""The servo heals its own processes: the supervisor, Thespian's admin and its logger.

Each is SIGKILLed or SIGSTOPped during a MEASURE and during a SLEEP. The servo must notice (the
watchdog: PID and state checks, liveness pings), kill what is left of that actor system, start a
fresh one (a microreboot), answer the command in flight ``failed`` with reason ``supervisor-lost``,
and answer the next command with fresh connectors (also one handed out as the process died). Microreboots past their intensity end the run
with GOODBYE ``failure`` and exit 1.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from servo_actors.actors.linux import processes

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip: only a hang breaks it."""
SLEEP_SECONDS = 6.0
"""The SLEEP the optimizer answers when it has nothing queued; a fault is injected inside it."""
LIVENESS = {"interval": "200ms", "timeout": "1s"}
"""Short, so the tests are quick: a stop or a hang is noticed within 1.2 s."""
ROLES = ("supervisor", "admin", "logger")
NAMED = {"supervisor": "the supervisor", "admin": "the Thespian admin", "logger": "the Thespian logger"}
"""How the result and the log name each process: the one the signal hit, never another."""

PROBE = {
    "name": "probe",
    "type": "chaos",
    "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}},
}
OTHER = {"name": "other", "type": "chaos", "config": {"metrics": {"y": {"unit": "n"}}, "values": {"y": 2}}}


def measure(seconds: float) -> dict:
    return {"cmd": "MEASURE", "param": {"metrics": ["x", "y"], "control": {"duration": seconds}}}


def probe_pid(entry) -> int:
    return int(entry.result["annotations"]["probe.pid"])


def start(servo, optimizer, kit, *, idle_sleep: float = 0.05, max_reboots: int = 5):
    driver = kit.QueueDriver(idle_sleep=idle_sleep)
    server = optimizer(driver)
    driver.server = server
    config = kit.servo_config(server, [PROBE, OTHER])
    config["supervisor"] = {"liveness": LIVENESS, "microreboots": {"max": max_reboots, "period": "5m"}}
    return driver, server, servo(config)


def first_probe(driver, proc, kit) -> tuple[object, dict[str, int]]:
    entry = driver.push(measure(0))
    assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
    return entry, kit.own_processes(probe_pid(entry))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
@pytest.mark.parametrize("role", ROLES)
def test_a_lost_process_during_measure_fails_the_command_then_fresh_connectors_answer(
    servo, optimizer, kit, role, signum
) -> None:
    driver, server, proc = start(servo, optimizer, kit)
    first, own = first_probe(driver, proc, kit)
    running = driver.push(measure(30))
    kit.wait_until(lambda: running.progress_posts, FINISH_TIMEOUT, what="the measure running")
    os.kill(own[role], signum)
    assert running.finished.wait(FINISH_TIMEOUT), proc.log()
    assert running.result["status"] == "failed", running.result
    assert running.result["reason"] == "supervisor-lost", running.result
    # The process the signal hit is named (a dead admin or logger takes the supervisor with it).
    assert f"{NAMED[role]} (pid {own[role]})" in running.result["message"], running.result
    after = driver.push(measure(0))
    assert after.finished.wait(FINISH_TIMEOUT), proc.log()
    assert after.result["status"] == "ok", after.result
    assert probe_pid(after) != probe_pid(first), "the connectors were not started afresh"
    fresh = kit.own_processes(probe_pid(after))
    assert not set(fresh.values()) & set(own.values()), (own, fresh)
    # What the signal hit is gone for good (a stopped process was killed too).
    assert not processes.is_running(own[role])
    assert proc.proc.poll() is None, proc.log()
    assert "microreboot done" in proc.log()
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])
    assert "Traceback" not in proc.log()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
@pytest.mark.parametrize("role", ROLES)
def test_a_lost_process_during_sleep_is_healed_before_the_sleep_ends(
    servo, optimizer, kit, role, signum
) -> None:
    driver, server, proc = start(servo, optimizer, kit, idle_sleep=SLEEP_SECONDS)
    first, own = first_probe(driver, proc, kit)
    kit.wait_until(
        lambda: (server.state()["history"][-1].get("reply") or {}).get("cmd") == "SLEEP",
        FINISH_TIMEOUT,
        what="a SLEEP",
    )
    slept_at = time.monotonic()
    os.kill(own[role], signum)
    kit.wait_until(lambda: "microreboot done" in proc.log(), FINISH_TIMEOUT, what="the microreboot")
    healed = time.monotonic() - slept_at
    lost_line = next(line for line in proc.log().splitlines() if "the actor system was killed" in line)
    assert f"{NAMED[role]} (pid {own[role]})" in lost_line, lost_line
    print(f"{role} {signal.Signals(signum).name} during SLEEP -> healed after {healed:.2f} s")
    # Healed within the SLEEP (no poll came in between), not when it ended.
    assert server.state()["history"][-1]["reply"]["cmd"] == "SLEEP"
    after = driver.push(measure(0))
    assert after.finished.wait(FINISH_TIMEOUT), proc.log()
    assert after.result["status"] == "ok", after.result
    assert probe_pid(after) != probe_pid(first)
    assert not processes.is_running(own[role])
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("role", ROLES)
def test_a_process_lost_as_the_command_is_handed_out_does_not_fail_it(servo, optimizer, kit, role) -> None:
    """The optimizer's answer to WHATS_NEXT is on its way when the process dies (killed here inside
    the optimizer, before it answers): the servo finds the loss before it dispatches, and the
    command runs on fresh connectors instead of failing ``supervisor-lost``."""
    victim: dict[str, int] = {}

    class KillingDriver(kit.QueueDriver):
        def next_command(self) -> dict:
            if self.queue and len(self.sent) == 1 and not victim:  # the second command
                victim["pid"] = pid = own[role]
                os.kill(pid, signal.SIGKILL)
                kit.wait_until(lambda: not processes.is_running(pid), FINISH_TIMEOUT, what="the death")
            return super().next_command()

    driver = KillingDriver(idle_sleep=0.05)
    server = optimizer(driver)
    driver.server = server
    config = kit.servo_config(server, [PROBE, OTHER])
    config["supervisor"] = {"liveness": LIVENESS, "microreboots": {"max": 5, "period": "5m"}}
    proc = servo(config)
    first, own = first_probe(driver, proc, kit)
    after = driver.push(measure(0))
    assert after.finished.wait(FINISH_TIMEOUT), proc.log()
    assert victim, "the driver never handed out the command"
    assert after.result["status"] == "ok", (after.result, proc.log())
    assert probe_pid(after) != probe_pid(first), "the command ran on the lost system's connectors"
    assert "microreboot done" in proc.log()
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])


@pytest.mark.timeout(120)
def test_microreboots_past_their_intensity_end_the_run(servo, optimizer, kit) -> None:
    driver, server, proc = start(servo, optimizer, kit, max_reboots=1)
    _, own = first_probe(driver, proc, kit)
    os.kill(own["supervisor"], signal.SIGKILL)
    kit.wait_until(lambda: "microreboot done" in proc.log(), FINISH_TIMEOUT, what="the first microreboot")
    again = driver.push(measure(0))
    assert again.finished.wait(FINISH_TIMEOUT), proc.log()
    os.kill(kit.own_processes(probe_pid(again))["supervisor"], signal.SIGKILL)
    assert proc.wait() == 1, proc.log()
    history = server.state()["history"]
    assert history[-1]["event"] == "GOODBYE" and history[-1]["param"] == {"reason": "failure"}
    assert "supervisor.microreboots" in proc.log()
    assert "Traceback" not in proc.log()


@pytest.mark.timeout(120)
def test_fresh_connectors_that_do_not_answer_are_restarted_and_the_servo_goes_on(
    servo, optimizer, kit, tmp_path
) -> None:
    """After a cancel, a fresh connector hangs in startup(): the cancel is answered and the next
    command too (the hung connector's part fails ``start-timeout``, the other one's values come),
    the supervisor restarts it meanwhile, and once a fresh one comes up it answers again."""
    slow = tmp_path / "slow-startup"
    driver = kit.QueueDriver()
    server = optimizer(driver)
    driver.server = server
    hanging = {
        **PROBE,
        "config": {**PROBE["config"], "faults": {"startup": {"action": "sleep", "only_if_file": str(slow)}}},
    }
    config = kit.servo_config(server, [hanging, OTHER])
    config["supervisor"] = {
        "startup_timeout": "1s",
        "max_restarts": 50,
        "period": "1m",
        "restart_backoff": {"min": "10ms", "max": "200ms"},
        "liveness": LIVENESS,
    }
    proc = servo(config)
    first = driver.push(measure(0))
    assert first.finished.wait(FINISH_TIMEOUT), proc.log()
    slow.touch()
    cancelled = driver.push(measure(30), progress=["cancel"])
    kit.wait_until(lambda: cancelled.result is not None, FINISH_TIMEOUT, what="the cancelled result")
    assert cancelled.result["status"] == "cancelled"
    during = driver.push(measure(0))
    assert during.finished.wait(FINISH_TIMEOUT), proc.log()
    assert during.result["status"] == "failed", during.result
    assert during.result["reason"] == "start-timeout" and "probe" in during.result["message"]
    assert set(during.result["metrics"]) == {"y"}
    assert proc.proc.poll() is None, proc.log()
    slow.unlink()

    def probe_back() -> bool:
        entry = driver.push(measure(0))
        assert entry.finished.wait(FINISH_TIMEOUT), proc.log()
        return entry.result["status"] == "ok"

    kit.wait_until(probe_back, FINISH_TIMEOUT, what="the fresh probe answering")
    after = driver.push(measure(0))
    assert after.finished.wait(FINISH_TIMEOUT), proc.log()
    assert after.result["status"] == "ok", after.result
    assert probe_pid(after) != probe_pid(first)
    proc.signal(signal.SIGTERM)
    assert proc.wait() == 0, proc.log()
    kit.check_trace(server.state()["history"])
