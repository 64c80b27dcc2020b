"""Thespian 4.0.1 made cheaper where a cancel of many connectors waits on it.

Measured on a cancel of 50 connectors (the supervisor forks and greets 50 hosts at once); each
patch keeps what Thespian does and drops work nobody uses. ``system.patch_thespian`` installs
them once, in the servo's process before its actor system starts, so every actor process
inherits them; ``thespian_internals`` checks at start-up that what they wrap is still there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def coalescing_interrupt_wait(original: Callable[..., None]) -> Callable[..., None]:
    """Thespian's SIGCHLD handler, once per pending check rather than once per signal.

    Each call opens a connection to this process's own listen socket, only to wake its select
    loop, and that loop accepts one connection per pass. A cancel of 50 connectors brought 50
    signals, so 50 wake-up connections queued ahead of the fresh hosts' first messages, and every
    host waited ~0.2 s to be heard. While a check is pending its connection is still queued, and
    the check it leads to sees every child that died since: no second one is needed.
    """

    @functools.wraps(original)
    def interrupt_wait(self: Any, signal_shutdown: bool = False, check_children: bool = False) -> None:
        if check_children and not signal_shutdown and self._checkChildren:
            return
        original(self, signal_shutdown=signal_shutdown, check_children=check_children)

    return interrupt_wait


class DeferredText:
    """A description computed only if somebody turns it into text (formats or pickles it)."""

    __slots__ = ("_describe", "_subject")

    def __init__(self, describe: Callable[[Any], str], subject: Any) -> None:
        self._describe, self._subject = describe, subject

    def __str__(self) -> str:
        return self._describe(self._subject)

    __repr__ = __str__

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return str, (str(self),)  # a log record carrying it goes to the logger as plain text


def deferred_identify(original: Callable[[Any], str]) -> Callable[[Any], DeferredText]:
    """``identify()`` of Thespian's envelopes and transmit intents, formatted only when logged.

    Thespian calls it on every message sent and received, for debug lines that are dropped below
    WARNING; it formats the whole message (our dataclasses' reprs, addresses, timers): ~6% of the
    supervisor's time in a cancel. Every caller passes it as a ``%s`` argument.
    """

    @functools.wraps(original)
    def identify(self: Any) -> DeferredText:
        return DeferredText(original, self)

    return identify


def install() -> None:
    """Apply the patches above to Thespian's classes (once per process)."""
    from thespian.system.transport import ReceiveEnvelope, TransmitIntent
    from thespian.system.transport.TCPTransport import TCPTransport

    TCPTransport.interrupt_wait = coalescing_interrupt_wait(TCPTransport.interrupt_wait)
    # ReceiveEnvelope.__str__ returns identify(), so it keeps the eager one; TransmitIntent's
    # formats it into a string, which works either way.
    ReceiveEnvelope.__str__ = _eager_str(ReceiveEnvelope.__str__, ReceiveEnvelope.identify)
    for cls in (ReceiveEnvelope, TransmitIntent):
        cls.identify = deferred_identify(cls.identify)


def _eager_str(original: Callable[[Any], str], identify: Callable[[Any], str]) -> Callable[[Any], str]:
    @functools.wraps(original)  # the self-check looks through it at what it replaces
    def as_text(self: Any) -> str:
        return identify(self)

    return as_text
