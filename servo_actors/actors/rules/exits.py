"""How a process ended, in words, for the rules' messages (pure: ``signal`` only names a signal).

>>> exit_description(3), exit_description(-9), exit_description(None)
('exit code 3', 'killed by SIGKILL', 'exited')
"""

from __future__ import annotations

import signal

__all__ = ["CHANNEL_LOST_EXIT", "exit_description"]

CHANNEL_LOST_EXIT = 86
"""A connector host's own exit code when its channel to the supervisor is gone (the wake-up pipe of
its worker thread no longer writable: the connector closed the host's file descriptors). It could
never answer again, so it ends at once instead of leaving its part to wait for the deadline."""


def exit_description(code: int | None) -> str:
    """``exit code 3`` / ``killed by SIGSEGV`` / ``exited`` for a process exit status."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == CHANNEL_LOST_EXIT:
        return (
            f"exit code {code}: its host lost its channel to the supervisor, as when the connector"
            " closes file descriptors it does not own"
        )
    return f"exit code {code}"
