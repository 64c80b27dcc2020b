"""Only the servo's own processes can talk to its actors: every frame must carry this run's HMAC.

Each test attacks every listening socket of a real runtime (admin, logger, supervisor, connector
hosts, and this process's own endpoint) the way the measurement behind docs/architecture.md's Thespian facts did: a framed
pickle whose unpickling creates a file. A refused frame closes the connection; no file appears;
the actor keeps serving.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import re
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_until

from servo_actors.actors.linux import processes
from servo_actors.actors.transport import message_auth
from servo_actors.errors import SupervisorError

pytestmark = pytest.mark.timeout(90)
CLOSE_BOUND = 5.0
"""Seconds an actor gets to close a connection that sent a refused frame (only a hang breaks it)."""


class CreatesFile:
    """Unpickling this opens ``path`` for writing, so creates it: proof that a frame was executed."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def frame(body: bytes) -> bytes:
    """Thespian's TCP framing."""
    return b"%d>" % len(body) + body


def tagged(payload: bytes, key: bytes) -> bytes:
    return hmac.new(key, message_auth.MAC_DOMAIN + payload, hashlib.sha256).digest() + payload


def actor_ports(runtime) -> dict[int, int]:
    """Every loopback port the system's processes and this one listen on -> one PID holding it.

    A forked process inherits its parent's listening sockets (the admin's, this process's), so a
    port may show under several PIDs; only the process that made it accepts on it.
    """
    found: dict[int, int] = {}
    for pid in [os.getpid(), *runtime.members()]:
        for _, port in processes.listening_sockets(pid):
            found.setdefault(port, pid)
    return found


def send(port: int, data: bytes) -> bool:
    """Send ``data`` to 127.0.0.1:``port``; True once the peer closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=CLOSE_BOUND) as conn:
        try:
            conn.sendall(data)
            deadline = time.monotonic() + CLOSE_BOUND
            while time.monotonic() < deadline:
                if not conn.recv(4096):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


def attack_everything(runtime, data_for) -> tuple[dict[int, int], list[int]]:
    """``data_for(port)`` bytes to every port; the ports attacked, and those that did not close.

    Sent from a thread: this process's own endpoint only reads while the runtime waits for
    something, which the main thread does meanwhile.
    """
    ports = actor_ports(runtime)
    still_open: list[int] = []

    def attack() -> None:
        for port in ports:
            if not send(port, data_for(port)):
                still_open.append(port)

    attacker = threading.Thread(target=attack)
    attacker.start()
    while attacker.is_alive():
        runtime.poll()
        attacker.join(0.01)
    return ports, still_open


def test_a_framed_pickle_is_refused_by_every_process_and_each_keeps_serving(
    start_runtime, kit, tmp_path
) -> None:
    runtime = start_runtime(kit.chaos("a"), kit.chaos("b"))
    before = kit.pids(runtime)
    targets = tmp_path / "pwned"
    targets.mkdir()

    def evil(port: int) -> bytes:
        return frame(pickle.dumps(CreatesFile(targets / str(port))))

    ports, still_open = attack_everything(runtime, evil)
    # Admin, logger, supervisor, two hosts, and this process's endpoint.
    assert len(ports) >= 6, ports
    assert still_open == []
    assert sorted(p.name for p in targets.iterdir()) == []
    assert runtime.run("check").ok
    assert kit.pids(runtime) == before  # nobody was restarted: the actors just kept serving
    # One process per port refused and said so (the first refusal of a process is always logged),
    # in thespian.log; the logger process, where Thespian turns that log off, in connectors.log.
    log = (runtime.run_dir / "thespian.log").read_text() + (runtime.run_dir / "connectors.log").read_text()
    said = r"(?: p| )(\d+) (?:Warn|WARNING) (?:\S+: )?refused a message from 127\.0\.0\.1:\d+: "
    refusing = {int(pid) for pid in re.findall(said, log)}
    assert len(refusing & {os.getpid(), *runtime.members()}) == len(ports), log


def test_a_frame_tagged_with_another_key_is_refused(start_runtime, kit, tmp_path) -> None:
    runtime = start_runtime(kit.chaos("a"))
    other_key = os.urandom(message_auth.KEY_BYTES)

    def evil(port: int) -> bytes:
        return frame(tagged(pickle.dumps(CreatesFile(tmp_path / str(port))), other_key))

    ports, still_open = attack_everything(runtime, evil)
    assert len(ports) >= 5 and still_open == []
    assert [p.name for p in tmp_path.iterdir() if p.name[0].isdigit()] == []
    assert runtime.run("check").ok


ANOTHER_RUN = textwrap.dedent(
    """
    import sys
    from servo_actors.actors.transport import message_auth
    message_auth.ensure_key()  # that run's own random key
    payload = bytes.fromhex(sys.argv[1])
    print(message_auth.authenticated_frame(payload, serialize=lambda raw: raw).hex())
    """
)


def test_a_frame_recorded_from_another_servo_run_is_refused(start_runtime, kit, tmp_path) -> None:
    """What a dead servo's actor would still send to a port this run reuses."""
    runtime = start_runtime(kit.chaos("a"))
    target = tmp_path / "replayed"
    payload = pickle.dumps(CreatesFile(target))
    made = subprocess.run(
        [sys.executable, "-c", ANOTHER_RUN, payload.hex()], capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    recorded = bytes.fromhex(made.stdout.strip())
    assert recorded.endswith(payload)  # a well-formed frame of that run
    ports, still_open = attack_everything(runtime, lambda port: recorded)
    assert len(ports) >= 5 and still_open == []
    assert not target.exists()
    assert runtime.run("check").ok


def test_the_same_frame_with_this_runs_tag_is_executed(start_runtime, kit, tmp_path) -> None:
    """The control: the attack above is real, and the tag is all that stops it."""
    runtime = start_runtime(kit.chaos("a"))
    supervisor = runtime.status().supervisor_pid
    port = next(port for port, pid in actor_ports(runtime).items() if pid == supervisor)
    target = tmp_path / "executed"
    send(port, message_auth.authenticated_frame(CreatesFile(target)))
    kit.wait_for(target.exists, timeout=CLOSE_BOUND, what="the authenticated frame's unpickling")
    assert runtime.run("check").ok


GARBAGE = {
    "no length": b"A" * 100,
    "length not a number": b"12x4>" + b"A" * 60,
    "huge length": b"99999999999>" + b"A" * 100,
    "shorter than a tag": frame(b"hello"),
    "random bytes": frame(os.urandom(200)),
    "tag only": frame(os.urandom(message_auth.TAG_BYTES)),
}


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_frames_close_the_connection_and_the_servo_serves_on(start_runtime, kit, garbage) -> None:
    runtime = start_runtime(kit.chaos("a"))
    ports, still_open = attack_everything(runtime, lambda port: GARBAGE[garbage])
    assert len(ports) >= 5 and still_open == []
    assert runtime.run("check").ok


def test_a_flood_of_refused_frames_is_logged_at_a_bounded_rate(start_runtime, kit) -> None:
    runtime = start_runtime(kit.chaos("a"))
    supervisor = runtime.status().supervisor_pid
    port = next(port for port, pid in actor_ports(runtime).items() if pid == supervisor)
    started = time.monotonic()
    for _ in range(200):
        assert send(port, frame(os.urandom(100)))
    elapsed = time.monotonic() - started
    assert runtime.run("check").ok
    log = (runtime.run_dir / "thespian.log").read_text()
    lines = [line for line in log.splitlines() if f" p{supervisor} " in line and "refused" in line]
    assert 1 <= len(lines) <= 1 + int(elapsed // message_auth.REFUSAL_LOG_INTERVAL) + 1, lines
    assert "Traceback" not in log and "OUCH" not in log


def test_the_key_cannot_change_once_a_system_has_started(start_runtime, kit) -> None:
    start_runtime(kit.chaos("a"))
    with pytest.raises(SupervisorError, match="cannot change once an actor system"):
        message_auth.install_key(os.urandom(message_auth.KEY_BYTES))


def test_a_key_file_must_be_private_and_long_enough(tmp_path: Path) -> None:
    path = tmp_path / "key"
    with pytest.raises(SupervisorError, match=f"secret file {path}: cannot be read"):
        message_auth.key_from_file(path)
    path.write_bytes(b"x" * 40)
    path.chmod(0o644)
    with pytest.raises(SupervisorError, match="other users may access it \\(mode 0644\\); chmod 600"):
        message_auth.key_from_file(path)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    path.write_bytes(b"short\n")
    with pytest.raises(SupervisorError, match="holds 5 bytes; a key needs at least 32") as caught:
        message_auth.key_from_file(path)
    assert "short" not in str(caught.value)
    path.write_bytes(b"k" * 48 + b"\n")
    assert message_auth.key_from_file(path) == b"k" * 48
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(SupervisorError, match="not a regular file"):
        message_auth.key_from_file(fifo)


SHARED_KEY_SERVO = textwrap.dedent(
    """
    import json, sys, time
    from servo_actors.actors import ServoRuntime
    from servo_actors.actors.transport import message_auth
    from servo_actors.config.models import ServoConfig

    message_auth.install_key(message_auth.key_from_file(sys.argv[2]))
    config = ServoConfig.model_validate({"connectors": [{"name": "a", "type": "chaos"}]})
    with ServoRuntime(config, run_dir=sys.argv[1]) as runtime:
        supervisor = runtime.status().supervisor_pid
        print(json.dumps({"supervisor": supervisor}), flush=True)
        sys.stdin.readline()
        print(json.dumps({"ok": runtime.run("check").ok}), flush=True)
    """
)


def test_a_shared_key_from_a_file_is_the_one_every_process_uses(tmp_path: Path) -> None:
    import json

    key = os.urandom(48).hex().encode()
    key_path = tmp_path / "shared.key"
    key_path.write_bytes(key)
    key_path.chmod(0o600)
    servo = subprocess.Popen(
        [sys.executable, "-c", SHARED_KEY_SERVO, str(tmp_path / "run"), str(key_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = servo.stdout.readline()
        assert line, servo.stderr.read()
        supervisor = json.loads(line)["supervisor"]
        inherited = set(processes.listening_sockets(processes.proc_stat(supervisor).ppid))
        (port,) = [
            port
            for found in processes.listening_sockets(supervisor)
            if found not in inherited
            for port in found[1:]
        ]
        random_key = tmp_path / "random-key"
        shared_key = tmp_path / "shared-key"
        assert send(port, frame(tagged(pickle.dumps(CreatesFile(random_key)), os.urandom(32))))
        send(port, frame(tagged(pickle.dumps(CreatesFile(shared_key)), key)))
        wait_until(shared_key.exists, CLOSE_BOUND, what="the message under the shared key acted on")
        assert shared_key.exists() and not random_key.exists()
        servo.stdin.write("\n")
        servo.stdin.flush()
        assert json.loads(servo.stdout.readline()) == {"ok": True}
        assert servo.wait(timeout=30) == 0, servo.stderr.read()
    finally:
        if servo.poll() is None:
            servo.kill()
            servo.wait()
        for stream in (servo.stdin, servo.stdout, servo.stderr):
            stream.close()
