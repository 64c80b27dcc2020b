"""Status and reason words of a result, made valid whatever a connector or the optimizer said.

A result's ``status`` is one of ``SERVO_STATUSES`` and its ``reason`` one word (docs/protocol.md, "Results"). Both
come from text nobody checked: a connector's ``ConnectorFailure(status=..., reason=...)``, the
optimizer's ``cancel`` reason. The servo must still post a valid result, so the words are
normalised here, and what was said is kept for people in the message.

>>> reason_word("slo violation")
'slo-violation'
>>> normalise_failure("exploded", "user/abort", "p99 too high")
('failed', 'user-abort', "p99 too high (unknown status 'exploded', reported as failed; reason was 'user/abort')")
"""

from __future__ import annotations

import re
from typing import Any

from servo_actors.vocabulary import FAILURE_STATUSES

# SERVO_STATUSES (every status a result may carry) and FAILURE_STATUSES (those of a result that is
# not ok: what ``ConnectorFailure`` and ``failure_result`` take) are the vocabulary's.
FALLBACK_STATUS = "failed"
"""What an unknown status becomes."""
WORD_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
"""A reason: one word such as ``success``, ``timeout``, ``slo-violation``."""
MAX_REASON_CHARS = 64
"""Longest reason word sent; a longer text is cut (the whole text stays in the message)."""
MAX_QUOTED_CHARS = 200
"""How much of an unusable status or reason text is quoted in the message."""
MAX_MESSAGE_CHARS = 8192
"""Longest message of a failed result: a sentence for people, not a dump (longer ones are cut)."""

_WORD = re.compile(WORD_PATTERN)
_NOT_WORD_CHARS = re.compile(r"[^A-Za-z0-9_.:-]+")


def is_word(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_REASON_CHARS and _WORD.fullmatch(value) is not None


def reason_word(text: Any, fallback: str = FALLBACK_STATUS) -> str:
    """``text`` as one reason word: runs of other characters become ``-`` (``fallback`` if nothing is left)."""
    if is_word(text):
        return text
    if not isinstance(text, str):
        return fallback
    # Only ASCII letters and digits survive: "ü" would match [A-Za-z0-9] nowhere, as intended.
    word = _NOT_WORD_CHARS.sub("-", text.encode("ascii", "replace").decode("ascii").replace("?", "-"))
    word = word.strip("-_.:")[:MAX_REASON_CHARS].rstrip("-_.:")
    return word if word and _WORD.fullmatch(word) else fallback


def _quoted(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else f"a {type(value).__name__}"
    return text if len(text) <= MAX_QUOTED_CHARS else text[: MAX_QUOTED_CHARS - 3] + "..."


def normalise_failure(status: Any, reason: Any, message: Any) -> tuple[str, str, str | None]:
    """A valid ``(status, reason, message)`` for a result that is not ok.

    An unknown status (or ``ok``, which is no failure) becomes ``failed``; a reason that is not one
    word becomes one. Whatever was changed is said, with the original text, in the message.
    """
    notes = []
    if status not in FAILURE_STATUSES:
        notes.append(f"unknown status {_quoted(status)}, reported as {FALLBACK_STATUS}")
        status = FALLBACK_STATUS
    word = reason_word(reason, fallback=status)
    if word != reason:
        notes.append(f"reason was {_quoted(reason)}")
    text = message if isinstance(message, str) else (None if message is None else _quoted(message))
    if text is not None and len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    if notes:
        note = "; ".join(notes)
        text = f"{text} ({note})" if text else note[0].upper() + note[1:]
    return status, word, text


__all__ = [
    "FALLBACK_STATUS",
    "MAX_MESSAGE_CHARS",
    "MAX_QUOTED_CHARS",
    "MAX_REASON_CHARS",
    "WORD_PATTERN",
    "is_word",
    "normalise_failure",
    "reason_word",
]
