"""Durations as the wire and the config write them: numbers of seconds or Go-style strings.

>>> parse_duration("1h30m")
5400.0
>>> parse_duration("250ms")
0.25
>>> format_duration(90)
'1m30s'
"""

from __future__ import annotations

import math
import re

__all__ = [
    "format_duration",
    "parse_duration",
]

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d)")


def parse_duration(value: object) -> float:
    """Seconds from ``30``, ``30.5``, ``"30"``, ``"250ms"``, ``"5m"``, ``"1h30m"``. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("empty duration")
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text) or pos == 0:
                raise ValueError(
                    f"not a duration: {value!r} (use seconds, or e.g. '250ms', '5s', '1m30s', '2h')"
                ) from None
    else:
        raise ValueError(f"not a duration: {value!r}")
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A short Go-style string for ``seconds`` (the inverse of ``parse_duration`` to the millisecond)."""
    if seconds == 0:
        return "0s"
    millis = round(seconds * 1000)
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis >= size:
            parts.append(f"{millis // size}{unit}")
            millis %= size
    if millis:
        parts.append(f"{millis}ms")
    return "".join(parts)
