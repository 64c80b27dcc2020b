"""What the embedded optimizer server asks of whatever decides the commands (a script or a search).

The server (``server.py``) owns HTTP, the envelope, tokens, cmd_uids, ``/admin/cancel`` and the
request history; a ``Driver`` owns the choice of commands and what to make of their results.
The server calls a driver from one thread at a time (it holds a lock around every call).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = [
    "Driver",
]


class Driver(Protocol):
    def next_command(self) -> dict[str, Any]:
        """The next command for a WHATS_NEXT: ``{"cmd": "MEASURE", "param": {...}}``.

        The server adds ``cmd_uid`` (except to SLEEP). Return a SLEEP command when there is nothing
        to do (plan finished).
        """

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        """The status to answer a progress post of ``command`` with; ``None`` means ``{"status": "ok"}``.

        ``command`` is the command as sent (with ``cmd_uid``). The server answers ``cancel`` itself
        when ``/admin/cancel`` was pressed, without asking the driver.
        """

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        """A result event (DESCRIPTION, MEASUREMENT, ADJUSTMENT) for ``command`` arrived.

        ``result`` is the event's param (status fields + descriptor/metrics/state). Return the status
        to answer with; ``None`` means ``{"status": "ok"}``.
        """

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        """The server told the servo to cancel ``command`` (admin cancel or the script)."""

    def state(self) -> dict[str, Any]:
        """A JSON-able summary for ``GET /admin/state`` (steps, best so far, ...)."""
