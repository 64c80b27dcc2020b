"""Choosing the addresses an actor system listens on: a free loopback port, whether a port is
taken, whether this process can listen on a convention's address.

Apart from ``system``: plain sockets, no Thespian; the CLI (``agent``) and tests use them alone.
"""

from __future__ import annotations

import errno
import socket

from servo_actors.endpoints import Endpoint
from servo_actors.errors import SupervisorError

__all__ = ["LOOPBACK", "check_listen_address", "free_loopback_port", "port_is_taken"]

LOOPBACK = "127.0.0.1"


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 free right now (the kernel's choice, so parallel runs differ)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def port_is_taken(host: str, port: int) -> bool:
    """Whether something listens on ``host:port`` now: the test Thespian makes before it decides
    that an admin is already there (a bind with SO_REUSEADDR that fails with EADDRINUSE)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def check_listen_address(endpoint: Endpoint) -> None:
    """SupervisorError naming ``endpoint`` when this process cannot listen there right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((endpoint.host, endpoint.port))
        except OSError as exc:
            hint = " (is another servo or agent running there?)" if exc.errno == errno.EADDRINUSE else ""
            if exc.errno == errno.EADDRNOTAVAIL:
                hint = " (it is not an address of this host)"
            raise SupervisorError(f"cannot listen on {endpoint}: {exc.strerror or exc}{hint}") from None
