"""DemoError: the demo's one failure, apart so the optimizer's process and the run (which both
raise it) share it without importing each other."""

from __future__ import annotations

from servo_actors.errors import ServoError

__all__ = ["DemoError"]


class DemoError(ServoError):
    """The demo could not run or did not finish its plan."""
