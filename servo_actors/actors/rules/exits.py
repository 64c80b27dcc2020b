"""How a process ended, in words, for the rules' messages (pure: ``signal`` only names a signal).

>>> exit_description(3), exit_description(-9), exit_description(None)
('exit code 3', 'killed by SIGKILL', 'exited')
"""

from __future__ import annotations

import signal

__all__ = ["exit_description"]


def exit_description(code: int | None) -> str:
    """``exit code 3`` / ``killed by SIGSEGV`` / ``exited`` for a process exit status."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
