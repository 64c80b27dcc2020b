"""``servo-actors agent`` on its own: its options, its secret file, where it listens, how it ends.

Real agent processes (on 127.0.0.2, and inside a network namespace where the machine allows),
with no leader yet: an agent whose leader is away keeps trying to join, and must still listen
only where it is told, refuse what is not authenticated, and leave nothing behind on SIGTERM.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_until

from servo_actors.actors.linux import processes

pytestmark = pytest.mark.timeout(120)
CLOSE_BOUND = 5.0
"""Seconds an actor gets to close a connection that sent a refused frame (only a hang breaks it)."""


def agent_cli(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servo_actors", "agent", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# ----- options and the secret file ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--listen", "0.0.0.0:1901", "--join", "127.0.0.1:1900"], "would listen on every interface"),
        (["--listen", "localhost:1901", "--join", "127.0.0.1:1900"], "is not an IPv4 address"),
        (["--listen", "127.0.0.2:99999", "--join", "127.0.0.1:1900"], "is not a number from 1 to 65535"),
        (["--listen", "127.0.0.2", "--join", "127.0.0.1:1900"], "is not HOST:PORT"),
        (
            ["--listen", "127.0.0.2:1901", "--join", "127.0.0.1:1900", "--capability", "bad name"],
            "the name must be",
        ),
        (["--listen", "127.0.0.2:1901", "--join", "127.0.0.2:1901"], "an agent joins another system"),
        (
            [
                "--listen",
                "127.0.0.2:1901",
                "--join",
                "127.0.0.1:1900",
                "--rejoin-min",
                "5s",
                "--rejoin-max",
                "1s",
            ],
            "must not exceed",
        ),
        (["--listen", "192.0.2.199:1901", "--join", "127.0.0.1:1900"], "cannot listen on 192.0.2.199:1901"),
    ],
)
def test_bad_options_exit_2_naming_what_is_wrong(args: list[str], expected: str, secret_file: Path) -> None:
    done = agent_cli(*args, "--secret-file", str(secret_file))
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("content", "mode", "expected"),
    [
        (b"x" * 48, 0o644, "other users may access it (mode 0644); chmod 600 it"),
        (b"short", 0o600, "holds 5 bytes; a key needs at least 32"),
        (None, 0o600, "cannot be read"),
    ],
)
def test_an_unusable_secret_file_exits_2_without_showing_it(
    tmp_path: Path, content: bytes | None, mode: int, expected: str
) -> None:
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
        path.chmod(mode)
    done = agent_cli("--listen", "127.0.0.2:1901", "--join", "127.0.0.1:1900", "--secret-file", str(path))
    assert done.returncode == 2
    assert f"secret file {path}: {expected}" in done.stderr
    assert "xxxxxxxx" not in done.stderr


# ----- a running agent ------------------------------------------------------------------------------


def listening(pids: list[int]) -> set[tuple[str, int]]:
    return {socket for pid in pids for socket in processes.listening_sockets(pid)}


def test_an_agent_listens_only_on_its_address_and_exits_0_leaving_nothing(convention) -> None:
    agent = convention.agent("--capability", "loadgen-host", "--capability", "zone=eu-1")
    wait_until(lambda: "joining the servo at" in agent.log(), 30, what="the agent started")
    host, port = agent.listen.rsplit(":", 1)
    sockets = wait_until(lambda: len(listening(agent.pids())) >= 3 and listening(agent.pids()), 10)
    assert (host, int(port)) in sockets  # its admin, on the very port
    assert {address for address, _ in sockets} == {host}, sockets
    assert "capabilities: loadgen-host, zone=eu-1" in agent.log()
    # The leader is away: it keeps registering, backing off (100ms doubling to 1s here).
    wait_until(lambda: (agent.run_dir / "thespian.log").read_text().count("cannot register") >= 2, 20)
    assert agent.proc.poll() is None
    started = time.monotonic()
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0
    wait_until(lambda: not agent.pids(), 5, what="every process of the agent gone")
    assert time.monotonic() - started < 10


def test_sigint_ends_an_agent_too(convention) -> None:
    agent = convention.agent()
    wait_until(lambda: "joining the servo at" in agent.log(), 30, what="the agent started")
    agent.signal(signal.SIGINT)
    assert agent.wait() == 0
    wait_until(lambda: not agent.pids(), 5, what="every process of the agent gone")


class CreatesFile:
    """Unpickling this opens ``path`` for writing, so creates it: proof that a frame was executed."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def refused(address: tuple[str, int], data: bytes) -> bool:
    """Send ``data``; True once the peer closed the connection."""
    with socket.create_connection(address, timeout=CLOSE_BOUND) as conn:
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


def test_every_socket_of_an_agent_refuses_a_forged_message(loopback_convention, tmp_path: Path) -> None:
    agent = loopback_convention.agent()
    wait_until(lambda: "joining the servo at" in agent.log(), 30, what="the agent started")
    ports = wait_until(lambda: len(listening(agent.pids())) >= 3 and listening(agent.pids()), 10)
    for index, address in enumerate(sorted(ports)):
        proof = tmp_path / f"executed-{index}"
        body = pickle.dumps(CreatesFile(proof))
        assert refused(address, b"%d>" % (32 + len(body)) + os.urandom(32) + body), address
        assert not proof.exists(), f"{address} executed a forged message"
    log = agent.run_dir / "thespian.log"
    wait_until(lambda: "refused a message from 127.0.0." in log.read_text(), 10)
    assert agent.proc.poll() is None
