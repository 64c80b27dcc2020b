"""RequestHistory: what the embedded optimizer remembers of each request, within fixed bounds.

A servo (or anyone on loopback) may post bodies of up to ``web.MAX_BODY_BYTES`` again and again;
``/admin/state`` must not grow with them. Each entry keeps a summary of its body (size, SHA-256,
a short prefix); the body itself is kept only when it is small (``KEPT_BODY_BYTES``), else only
its top-level scalar fields (``event``, ``status``, ``reason``, ``cmd_uid``...), so traces of a
run still read the same. Entries are dropped oldest first beyond ``limit`` entries or
``max_kept_bytes`` of kept bodies, and counted.

>>> history = RequestHistory(limit=2)
>>> for n in range(3):
...     history.append({"event": "HELLO", "param": {"n": n}})
>>> [entry["param"] for entry in history.entries()], history.dropped
([{'n': 1}, {'n': 2}], 1)
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import deque
from typing import Any

from servo_actors.protocol.json_bounds import (
    MAX_NESTING,
    NON_FINITE,
    TOO_DEEP,
    first_non_finite,
    json_problem,
)

HISTORY_LIMIT = 10_000
"""Requests kept for ``/admin/state``; older ones are dropped (and counted)."""
KEPT_BODY_BYTES = 64 * 1024
"""A request's body (as JSON) is kept whole up to this size; a larger one only as a summary."""
HISTORY_MAX_KEPT_BYTES = 32 * 1024 * 1024
"""All kept bodies together stay under this; the oldest entries go first."""
PREFIX_CHARS = 200
"""How much of a body the summary quotes."""
_BODY_KEYS = ("param", "request")  # where web.py puts a request's body in an entry


def summarize_body(value: Any) -> tuple[dict[str, Any], int]:
    """``(summary, size)``: ``{"bytes", "sha256", "prefix"}`` of ``value`` as JSON, and the bytes
    it may keep; 0 when it must not be kept whole, and the summary's ``problem`` says why (nested
    past ``MAX_NESTING``; NaN or infinity, which would make ``/admin/state`` invalid JSON)."""
    # One walk (a MEASUREMENT may hold a million points); where a NaN is, only if there is one.
    found = json_problem(value, MAX_NESTING)
    if found == TOO_DEEP:
        problem = f"nested deeper than {MAX_NESTING}"
        return {"bytes": None, "sha256": None, "prefix": None, "problem": problem}, 0
    encoded = json.dumps(value, separators=(",", ":"), default=repr).encode()
    summary: dict[str, Any] = {
        "bytes": len(encoded),
        "sha256": hashlib.sha256(encoded).hexdigest(),
        "prefix": encoded[:PREFIX_CHARS].decode("utf-8", errors="replace"),
    }
    where = first_non_finite(value) if found == NON_FINITE else None
    if where is not None:
        summary["problem"] = f"{where} is not a finite number"
        return summary, 0
    return summary, len(encoded)


def _scalar_fields(value: Any) -> dict[str, Any] | None:
    # What check_trace-like readers look at: status, reason, cmd_uid, progress... never the data.
    if not isinstance(value, dict):
        return None
    kept: dict[str, Any] = {}
    for key, item in list(value.items())[:PREFIX_CHARS]:
        if len(str(key)) > PREFIX_CHARS or (isinstance(item, str) and len(item) > PREFIX_CHARS):
            continue  # a cut value would mislead; the prefix shows the start of the body anyway
        if isinstance(item, float) and not math.isfinite(item):
            continue
        if item is None or isinstance(item, str | bool | int | float):
            kept[key] = item
    return kept


class RequestHistory:
    """A bounded, thread-safe list of request entries (dicts as ``web.py`` builds them)."""

    def __init__(
        self,
        *,
        limit: int = HISTORY_LIMIT,
        kept_body_bytes: int = KEPT_BODY_BYTES,
        max_kept_bytes: int = HISTORY_MAX_KEPT_BYTES,
    ) -> None:
        self.limit = limit
        self.kept_body_bytes = kept_body_bytes
        self.max_kept_bytes = max_kept_bytes
        self._lock = threading.Lock()
        self._entries: deque[tuple[dict[str, Any], int]] = deque()
        self._kept_bytes = 0
        self.seen = 0
        self.dropped = 0

    def append(self, entry: dict[str, Any]) -> None:
        """Record one request; a large body is summarized first (outside the lock: it may take a while)."""
        entry, kept = self._bounded(entry)
        with self._lock:
            self.seen += 1
            self._entries.append((entry, kept))
            self._kept_bytes += kept
            while self._entries and (
                len(self._entries) > self.limit or self._kept_bytes > self.max_kept_bytes
            ):
                _, size = self._entries.popleft()
                self._kept_bytes -= size
                self.dropped += 1

    def entries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [entry for entry, _ in self._entries]

    def take_over(self, other: RequestHistory) -> None:
        """Continue ``other``'s history (its entries first, then this one's), within this one's bounds."""
        with other._lock:
            previous = list(other._entries)
            seen, dropped = other.seen, other.dropped
        with self._lock:
            self._entries.extendleft(reversed(previous))
            self._kept_bytes += sum(size for _, size in previous)
            self.seen += seen
            self.dropped += dropped
            while self._entries and (
                len(self._entries) > self.limit or self._kept_bytes > self.max_kept_bytes
            ):
                _, size = self._entries.popleft()
                self._kept_bytes -= size
                self.dropped += 1

    def _bounded(self, entry: dict[str, Any]) -> tuple[dict[str, Any], int]:
        entry = dict(entry)
        kept = 0
        for key in _BODY_KEYS:
            if key not in entry:
                continue
            summary, size = summarize_body(entry[key])
            entry["body"] = summary
            if size == 0 or size > self.kept_body_bytes:
                entry[key] = _scalar_fields(entry[key])
                summary["kept"] = False
            else:
                summary["kept"] = True
                kept += size
        return entry, kept


__all__ = ["HISTORY_LIMIT", "KEPT_BODY_BYTES", "RequestHistory", "summarize_body"]
