"""The watchdog ticks while the servo waits on the optimizer, not only between requests.

The optimizer goes away (nothing listens on its port), so WHATS_NEXT is retried for as long as it
stays away; meanwhile the supervisor is SIGKILLed. The servo must notice and microreboot while the
poll is still failing (the runner ticks the watchdog every ``TICK_INTERVAL`` of a request), not once
the optimizer is back; then the optimizer returns and the next command is answered by fresh
connectors.
"""

from __future__ import annotations

import os
import signal

import pytest

from servo_actors.actors.linux import processes
from servo_actors.optimizer.server import OptimizerServer

FINISH_TIMEOUT = 60.0
"""Generous bound on a command's round trip or a microreboot: only a hang breaks it."""
LIVENESS = {"interval": "200ms", "timeout": "1s"}
PROBE = {"name": "probe", "type": "chaos", "config": {"metrics": {"x": {"unit": "n"}}, "values": {"x": 1}}}
MEASURE = {"cmd": "MEASURE", "param": {"metrics": ["x"], "control": {"duration": 0}}}


def probe_pid(entry) -> int:
    return int(entry.result["annotations"]["probe.pid"])


def polls_after_result(server: OptimizerServer, cmd_uid: str | None) -> int:
    history = sorted(server.state()["history"], key=lambda e: e["at"])
    results = [i for i, e in enumerate(history) if (e.get("param") or {}).get("cmd_uid") == cmd_uid]
    return sum(1 for e in history[results[-1] + 1 :] if e.get("event") == "WHATS_NEXT") if results else 0


@pytest.mark.timeout(180)
def test_a_supervisor_killed_while_the_optimizer_is_away_is_healed_before_the_poll_returns(
    servo, optimizer, kit
) -> None:
    driver = kit.QueueDriver(idle_sleep=0.05)
    server = optimizer(driver)
    config = kit.servo_config(server, [PROBE])
    config["supervisor"] = {"liveness": LIVENESS}
    proc = servo(config)
    first = driver.push(MEASURE)
    assert first.finished.wait(FINISH_TIMEOUT), proc.log()
    supervisor = processes.proc_stat(probe_pid(first)).ppid
    # The result's reply has reached the servo once it polls again: only polls fail from now on.
    polls = polls_after_result(server, first.cmd_uid)
    kit.wait_until(lambda: polls_after_result(server, first.cmd_uid) > polls, FINISH_TIMEOUT, what="a poll")

    port = int(server.url.rsplit(":", 1)[1])
    server.stop()  # WHATS_NEXT now fails and is retried, for as long as the optimizer is away
    os.kill(supervisor, signal.SIGKILL)
    kit.wait_until(lambda: "microreboot done" in proc.log(), FINISH_TIMEOUT, what="the microreboot")
    assert not processes.is_running(supervisor)
    assert proc.proc.poll() is None, proc.log()[-5000:]

    revived = OptimizerServer(driver, app=server.app, host="127.0.0.1", port=port).take_over(server)
    revived.start()
    try:
        after = driver.push(MEASURE)
        assert after.finished.wait(FINISH_TIMEOUT), proc.log()[-5000:]
        assert after.result["status"] == "ok", after.result
        assert probe_pid(after) != probe_pid(first), "the connectors were not started afresh"
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0, proc.log()[-5000:]
        kit.check_trace(revived.state()["history"])
        assert "Traceback" not in proc.log()
    finally:
        revived.stop()
