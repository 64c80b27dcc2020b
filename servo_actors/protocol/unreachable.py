"""When nothing answers at the optimizer's address: why, what to tell the user, and telling it once.

Apart from the client because it is about the servo's user, not the wire: a connection refused or
a name that does not resolve gets one plain message (which URL; on this machine how to start the
embedded optimizer, elsewhere which setting holds the address), and once the optimizer answers,
one line says so. Each retry still logs its own short line (the client does that).

>>> message = unreachable_message("http://127.0.0.1:9000/servo", "example.com/web", "connection refused")
>>> "servo-actors optimizer serve --port 9000 --plan PLAN" in message
True
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from urllib.parse import urlsplit

__all__ = ["EMBEDDED_OPTIMIZER_PORT", "UnreachableNotice", "connection_problem", "unreachable_message"]

log = logging.getLogger(__name__)

EMBEDDED_OPTIMIZER_PORT = 8085
"""``servo-actors optimizer serve``'s default port: the hint leaves out ``--port`` for it."""


class UnreachableNotice:
    """Says once that nothing answers at ``url``, and, after that, once that the optimizer answers."""

    def __init__(self, url: str, app: str) -> None:
        self.url = url
        self._app = app
        self._unreachable_told = False  # the plain "cannot reach" message goes out once
        self._answered_told = False  # and, after it, one line once the optimizer answers

    def unreachable(self, problem: str) -> None:
        """An attempt found nothing at the address (``problem`` says why): the message, the first time."""
        if not self._unreachable_told:
            self._unreachable_told = True
            log.warning("%s", unreachable_message(self.url, self._app, problem))

    def answered(self) -> None:
        """The optimizer answered (any HTTP status): one line, if it was said to be unreachable."""
        if self._unreachable_told and not self._answered_told:
            self._answered_told = True
            log.info("the optimizer at %s answers now", self.url)


def unreachable_message(url: str, app: str, problem: str) -> str:
    """What to tell a user whose servo finds nothing at ``url``: where, and what to do about it."""
    parts = urlsplit(url)
    said = f"cannot reach the optimizer at {url} ({problem.removeprefix('cannot connect: ')})"
    if _is_loopback(parts.hostname):
        port = f" --port {parts.port}" if parts.port not in (None, EMBEDDED_OPTIMIZER_PORT) else ""
        return (
            f"{said}: no optimizer is listening there. To run the embedded one on this machine: "
            f"servo-actors optimizer serve{port} --plan PLAN, with a plan for {app} (for the "
            f"synthetic example: config/plans/synthetic.yaml). The servo keeps trying meanwhile."
        )
    return (
        f"{said}: check optimizer.base_url (or optimizer.url) in the configuration, and that this "
        "host can reach it. The servo keeps trying meanwhile."
    )


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connection_problem(exc: BaseException) -> str:
    """A phrase for why a connection failed, from the OS error under requests' wrappers."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        error = stack.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, socket.gaierror):
            return "the host name does not resolve"
        if isinstance(error, OSError) and error.strerror:
            return error.strerror[0].lower() + error.strerror[1:]
        stack += [e for e in (error.__cause__, error.__context__) if e is not None]
        stack += [arg for arg in getattr(error, "args", ()) if isinstance(arg, BaseException)]
        reason = getattr(error, "reason", None)  # urllib3's MaxRetryError and NewConnectionError
        if isinstance(reason, BaseException):
            stack.append(reason)
    return type(exc).__name__
