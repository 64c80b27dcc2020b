"""Connectors on other hosts, end to end: a leader servo and agents as separate real processes.

Each test runs on loopback (the leader on 127.0.0.1, the agent on 127.0.0.2) and on two network
namespaces joined by a veth pair (skipped, saying why, where the machine does not allow them).
Heartbeats here: every 0.5 s, lost after 3 s of silence; the agent rejoins every 0.1-1 s.
Bounds on time are generous ones that only a hang breaks, except where the contract names one
(a lost member noticed within 10 s).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from waiting import wait_until

from servo_actors.actors.linux import processes

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
]
LOSS_BOUND = 10.0
"""The contract: a lost member is noticed within 10 s (here the timeout is 3 s)."""
PLACE_BOUND = 30.0


def chaos(name: str, capability: str | None = None, **config: object) -> dict:
    entry: dict = {"name": name, "type": "chaos", "config": config}
    if capability is not None:
        entry["placement"] = {"capability": capability}
    return entry


def placed_on(leader, name: str, member: str) -> dict:
    """Wait until ``name`` runs, ready, on ``member``; its status."""

    def ready_there():
        child = leader.status()[name]
        return child if child["state"] == "ready" and child["where"] == member else None

    return wait_until(ready_there, PLACE_BOUND, interval=0.1, what=f"{name} ready on {member}")


def hung_there(agent) -> None:
    """Wait until the placed connector's measure hangs on ``agent`` (chaos logs a fault as it enters it)."""
    wait_until(
        lambda: "chaos: sleep fault in measure" in agent.log(), PLACE_BOUND, what="the remote measure hung"
    )


def part(result: dict, name: str) -> dict:
    return result["parts"][name]


def connectors(hang_file: Path, crash_file: Path | None = None) -> list[dict]:
    faults = {"measure": {"action": "sleep", "seconds": 600, "only_if_file": str(hang_file)}}
    if crash_file is not None:
        faults["check"] = {"action": "exit", "exit_code": 3, "only_if_file": str(crash_file)}
    common = {"metrics": {"here": {"unit": "u"}}, "values": {"here": 1}}
    remote = {"metrics": {"there": {"unit": "u"}}, "values": {"there": 2}, "faults": faults}
    return [chaos("here", **common), chaos("there", "loadgen-host", **remote)]


def test_a_placed_connector_runs_on_the_member_and_answers_through_it(convention, tmp_path: Path) -> None:
    agent = convention.agent("--capability", "loadgen-host")
    leader = convention.leader(connectors(tmp_path / "hang"))
    there = placed_on(leader, "there", agent.listen)
    assert leader.status()["here"]["where"] == "local"
    answer = leader.ask("run", op="measure")
    result = answer["result"]
    assert result["status"] == "ok", result
    metrics, notes = result["data"]["metrics"], result["data"]["annotations"]
    assert (
        metrics["there"]["values"][0]["data"][0][1] == 2 and metrics["here"]["values"][0]["data"][0][1] == 1
    )
    # It ran on the member: its process is one of the agent's, none of the leader's.
    assert int(notes["there.pid"]) == there["pid"]
    assert there["pid"] in agent.pids() and there["pid"] not in leader.pids()
    assert int(notes["here.pid"]) in leader.pids()
    described = leader.ask("run", op="describe")["result"]
    assert set(described["data"]["metrics"]) == {"here", "there"}


def test_a_cancel_kills_the_hung_remote_connector_and_a_fresh_one_answers(convention, tmp_path: Path) -> None:
    hang = tmp_path / "hang"
    agent = convention.agent("--capability", "loadgen-host")
    leader = convention.leader(connectors(hang))
    before = placed_on(leader, "there", agent.listen)
    hang.touch()
    leader.ask("begin", op="measure")
    hung_there(agent)
    cancelled = leader.ask("cancel")
    assert cancelled["ok"] and cancelled["result"]["status"] == "cancelled", cancelled
    after = leader.status()["there"]
    assert after["state"] == "ready" and after["where"] == agent.listen
    assert after["generation"] > before["generation"] and after["restarts"] == before["restarts"]
    assert not processes.is_running(before["pid"]), "the hung connector survived the cancel"
    hang.unlink()
    assert leader.ask("run", op="measure")["result"]["status"] == "ok"


def test_a_crash_and_a_deadline_on_the_member_restart_the_connector_there(convention, tmp_path: Path) -> None:
    hang, crash = tmp_path / "hang", tmp_path / "crash"
    agent = convention.agent("--capability", "loadgen-host")
    # A short grace, so that the deadline comes soon.
    leader = convention.leader(connectors(hang, crash), supervisor={"operation_grace": "2s"})
    first = placed_on(leader, "there", agent.listen)
    crash.touch()
    result = leader.ask("run", op="check")["result"]
    assert (
        part(result, "there")["reason"] == "connector-crashed"
        and "exit code 3" in part(result, "there")["message"]
    )
    crash.unlink()
    second = placed_on(leader, "there", agent.listen)
    assert second["restarts"] == first["restarts"] + 1 and second["pid"] != first["pid"]
    hang.touch()
    result = leader.ask("run", op="measure")["result"]
    assert part(result, "there")["reason"] == "timeout", result
    hang.unlink()
    third = placed_on(leader, "there", agent.listen)
    assert not processes.is_running(second["pid"])
    assert third["restarts"] == second["restarts"]  # a deadline is not a crash
    assert leader.ask("run", op="measure")["result"]["status"] == "ok"


def test_an_agent_killed_mid_measure_is_noticed_and_its_connector_comes_back_with_it(
    convention, tmp_path: Path
) -> None:
    hang = tmp_path / "hang"
    agent = convention.agent("--capability", "loadgen-host")
    leader = convention.leader(connectors(hang))
    placed_on(leader, "there", agent.listen)
    hang.touch()
    leader.ask("begin", op="measure")
    hung_there(agent)
    killed_at = time.monotonic()
    agent.proc.send_signal(signal.SIGKILL)
    answer = leader.ask("wait", timeout=LOSS_BOUND + 5)
    noticed = time.monotonic() - killed_at
    result = answer["result"]
    assert result is not None and part(result, "there")["reason"] == "host-lost", answer
    assert part(result, "here")["status"] == "ok"
    assert noticed < LOSS_BOUND
    wait_until(lambda: not agent.pids(), 5, what="the killed agent's processes gone (its lifeline)")
    # The servo goes on: the placed part fails at once after the grace, the local one answers.
    hang.unlink()
    wait_until(lambda: leader.status()["there"]["where"].startswith("waiting"), 10)
    result = wait_until(
        lambda: (
            (r := leader.ask("run", op="measure")["result"])
            and part(r, "there")["reason"] == "host-unavailable"
            and r
        ),
        10,
        interval=0.2,
    )
    assert part(result, "here")["status"] == "ok"
    again = convention.agent("--capability", "loadgen-host")
    placed_on(leader, "there", again.listen)
    assert leader.ask("run", op="measure")["result"]["status"] == "ok"


def test_a_cut_network_is_noticed_on_both_sides_and_healed(convention, tmp_path: Path) -> None:
    if convention.hosts.namespaces is None:
        pytest.skip("only two network namespaces can be cut apart")
    hang = tmp_path / "hang"
    agent = convention.agent("--capability", "loadgen-host")
    leader = convention.leader(connectors(hang))
    before = placed_on(leader, "there", agent.listen)
    hang.touch()
    leader.ask("begin", op="measure")
    hung_there(agent)
    convention.hosts.cut()
    try:
        result = leader.ask("wait", timeout=LOSS_BOUND + 5)["result"]
        assert result is not None and part(result, "there")["reason"] == "host-lost", result
        # The member, cut off from its leader, kills what it hosted for it within its timeout.
        wait_until(
            lambda: not processes.is_running(before["pid"]), LOSS_BOUND, what="the member killed its host"
        )
        assert agent.proc.poll() is None
    finally:
        convention.hosts.restore()
    hang.unlink()
    after = placed_on(leader, "there", agent.listen)
    assert after["pid"] != before["pid"]
    assert leader.ask("run", op="measure")["result"]["status"] == "ok"


def test_with_no_member_a_placed_part_is_host_unavailable_until_one_joins(convention, tmp_path: Path) -> None:
    leader = convention.leader(connectors(tmp_path / "hang"))  # returns once the grace is over
    assert leader.status()["there"]["where"] == "waiting for a member offering loadgen-host"
    result = leader.ask("run", op="measure")["result"]
    assert (
        part(result, "there")["status"] == "failed" and part(result, "there")["reason"] == "host-unavailable"
    )
    assert "servo-actors agent --capability loadgen-host" in part(result, "there")["message"]
    assert part(result, "here")["status"] == "ok"
    assert leader.status()["there"]["restarts"] == 0  # never counted against restart intensity
    agent = convention.agent("--capability", "loadgen-host")
    placed_on(leader, "there", agent.listen)
    assert leader.ask("run", op="measure")["result"]["status"] == "ok"


def test_a_member_with_another_secret_is_refused_and_logged(convention, tmp_path: Path) -> None:
    other = tmp_path / "other.key"
    other.write_text("z" * 48)
    other.chmod(0o600)
    leader = convention.leader(connectors(tmp_path / "hang"))
    agent = convention.agent("--capability", "loadgen-host", secret=other)
    peer = "127.0.0.1" if convention.hosts.namespaces is None else convention.hosts.member_ip
    log = leader.run_dir / "thespian.log"
    wait_until(lambda: log.exists() and f"refused a message from {peer}:" in log.read_text(), 20)
    time.sleep(1.0)  # the scenario: the refused member goes on trying for a while, and never joins
    assert leader.status()["there"]["where"].startswith("waiting")
    assert part(leader.ask("run", op="check")["result"], "there")["reason"] == "host-unavailable"
    assert agent.proc.poll() is None  # it keeps trying, in vain


def test_both_sides_exit_cleanly_and_a_member_outlives_its_leader_empty(convention, tmp_path: Path) -> None:
    agent = convention.agent("--capability", "loadgen-host")
    leader = convention.leader(connectors(tmp_path / "hang"))
    there = placed_on(leader, "there", agent.listen)
    leader.stop()
    assert leader.proc.returncode == 0
    wait_until(
        lambda: not processes.is_running(there["pid"]),
        5,
        what="the member dropped the stopped leader's connector",
    )
    wait_until(lambda: not leader.pids(), 5, what="every process of the leader gone")
    assert agent.proc.poll() is None
    # A leader SIGKILLed: its member notices within the timeout and kills what it hosted for it.
    second = convention.leader(connectors(tmp_path / "hang"))
    there = placed_on(second, "there", agent.listen)
    second.proc.send_signal(signal.SIGKILL)
    wait_until(lambda: not second.pids(), 5, what="the killed leader's processes gone (its lifeline)")
    wait_until(
        lambda: not processes.is_running(there["pid"]),
        LOSS_BOUND,
        what="the member dropped the dead leader's connector",
    )
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    wait_until(lambda: not agent.pids(), 5, what="every process of the agent gone")
    assert os.path.exists(agent.run_dir)


def test_describe_and_check_say_where_each_connector_runs(loopback_convention, tmp_path: Path) -> None:
    agent = loopback_convention.agent("--capability", "loadgen-host")
    config = tmp_path / "servo.yaml"
    config.write_text(yaml.safe_dump(loopback_convention.config(connectors(tmp_path / "hang"))))
    wait_until(lambda: "joining the servo at" in agent.log(), 30, what="the agent started")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "servo_actors", "-c", str(config), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    described = cli("describe")
    assert described.returncode == 0, described.stderr
    assert "RUNS ON" in described.stdout
    rows = dict(
        line.split(None, 1) for line in described.stdout.split("RUNS ON", 1)[1].splitlines()[2:] if line
    )
    assert rows == {"here": "local", "there": agent.listen}
    checked = cli("check", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["placement"] == {"here": "local", "there": agent.listen}


def test_the_leader_and_the_member_listen_only_where_told(convention, tmp_path: Path) -> None:
    agent = convention.agent("--capability", "loadgen-host")
    leader = convention.leader(connectors(tmp_path / "hang"))
    placed_on(leader, "there", agent.listen)
    for tracked, host, port in (
        (leader, convention.hosts.leader_ip, convention.leader_port),
        (agent, convention.hosts.member_ip, int(agent.listen.rsplit(":", 1)[1])),
    ):
        sockets = {s for pid in tracked.pids() for s in processes.listening_sockets(pid)}
        assert (host, port) in sockets
        assert {address for address, _ in sockets} == {host}, sockets


class CreatesFile:
    """Unpickling this opens ``path`` for writing, so creates it: proof that a frame was executed."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def test_every_socket_of_a_leader_refuses_a_forged_message(loopback_convention, tmp_path: Path) -> None:
    import pickle
    import socket

    agent = loopback_convention.agent("--capability", "loadgen-host")
    leader = loopback_convention.leader(connectors(tmp_path / "hang"))
    placed_on(leader, "there", agent.listen)
    # The harness's own endpoint reads only while it waits for an answer (the test process's own
    # is attacked in tests/actors); forked processes inherit it, so it shows under them too.
    own = set(processes.listening_sockets(leader.pid))
    ports = {s for pid in leader.pids() for s in processes.listening_sockets(pid)} - own
    assert len(ports) >= 4  # admin, logger, supervisor, the local connector's host
    for index, address in enumerate(sorted(ports)):
        proof = tmp_path / f"executed-{index}"
        body = pickle.dumps(CreatesFile(proof))
        with socket.create_connection(address, timeout=5.0) as conn:
            conn.sendall(b"%d>" % (32 + len(body)) + os.urandom(32) + body)
            try:
                assert conn.recv(4096) == b"", f"{address} kept the connection open"
            except ConnectionResetError:
                pass
        assert not proof.exists(), f"{address} executed a forged message"
    log = leader.run_dir / "thespian.log"
    wait_until(lambda: "refused a message from 127.0.0.1:" in log.read_text(), 10)
    assert leader.ask("run", op="check")["result"]["status"] == "ok"  # and they all keep serving
