"""servox's values read as servox read them, written as servo-actors reads them.

- CPU (servox ``Core``): ``250m``, ``0.25``, ``4``, ``100u``, ``5n``; written as a Kubernetes
  quantity (``250m``, ``4``).
- Memory (servox ``ShortByteSize``, pydantic's ByteSize): a bare integer is bytes, but a decimal
  (``0.5`` or ``"0.5"``) is GiB; units ``Ki``/``KiB`` (1024), ``K``/``KB`` (1000) and so on up to
  ``E``, any case. Written as a Kubernetes quantity (``256Mi``), whose bare number is bytes.
- Durations: Go-style strings (``5m``, ``1h30m``, ``250ms``) or seconds, as here.
- Vegeta's ``rate``: ``50`` (per second) or ``HITS/DURATION`` (``50/1s``, ``600/1m``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from servo_actors.connectors.kubernetes.units import format_cpu, format_memory, parse_cpu
from servo_actors.durations import format_duration, parse_duration

__all__ = ["cpu_quantity", "duration", "memory_quantity", "requests_per_second"]

_GIB = Decimal(1024**3)
_BYTE_UNITS = {
    "": 1,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15, "e": 10**18,
    "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50, "ei": 2**60,
}  # fmt: skip
_MEMORY = re.compile(r"^\s*(\d*\.?\d+)\s*([a-zA-Z]{0,3})\s*$")
_CORE_SUFFIXES = {"m": Decimal("0.001"), "u": Decimal("0.000001"), "n": Decimal("0.000000001")}


def cpu_quantity(value: object) -> str:
    """servox's CPU value as a Kubernetes quantity; ValueError when servox would not read it."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a CPU value: {value!r}")
    if isinstance(value, str) and value.strip()[-1:] in ("u", "n"):
        text = value.strip()
        try:
            cores = Decimal(text[:-1]) * _CORE_SUFFIXES[text[-1]]
        except InvalidOperation:
            raise ValueError(f"not a CPU value: {value!r}") from None
        return format_cpu(float(cores))
    return format_cpu(parse_cpu(value))


def memory_quantity(value: object) -> str:
    """servox's memory value as a Kubernetes quantity; ValueError when servox would not read it."""
    if isinstance(value, bool):
        raise ValueError(f"not a memory value: {value!r}")
    if isinstance(value, int):
        size = Decimal(value)
    elif isinstance(value, float):
        size = Decimal(str(value)) * _GIB
    elif isinstance(value, str):
        match = _MEMORY.match(value)
        if match is None:
            raise ValueError(f"not a memory value: {value!r}")
        number, unit = match.groups()
        unit = unit.lower()
        if unit.endswith("b") and unit != "b":
            unit = unit[:-1]
        elif unit == "b":
            unit = ""
        if unit not in _BYTE_UNITS:
            raise ValueError(f"not a memory unit: {match.group(2)!r} in {value!r}")
        if not unit and "." in number:
            size = Decimal(number) * _GIB  # servox: a unitless decimal is GiB
        else:
            size = Decimal(number) * _BYTE_UNITS[unit]
    else:
        raise ValueError(f"not a memory value: {value!r}")
    if size != size.to_integral_value() or size % 1024:
        return str(int(size.to_integral_value()))  # exact bytes: format_memory rounds to KiB
    return format_memory(float(size / _GIB))


def duration(value: object) -> str | float:
    """A servox duration as this project writes one (``5m``, ``1m30s``; seconds when not exact)."""
    seconds = parse_duration(value)
    text = format_duration(seconds)
    return text if text and parse_duration(text) == seconds else seconds


def requests_per_second(value: object) -> float:
    """Vegeta's ``rate`` (``50``, ``50/1s``, ``600/1m``) as requests per second."""
    if isinstance(value, bool):
        raise ValueError(f"not a rate: {value!r}")
    if isinstance(value, int):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"not a rate: {value!r}")
    text = value.strip()
    if text.isdigit():
        return float(text)
    hits, slash, per = text.partition("/")
    if not slash or not hits.strip().isdigit():
        raise ValueError(f"{value!r} is not HITS/DURATION (e.g. 50/1s)")
    seconds = parse_duration(per.strip())
    if seconds <= 0:
        raise ValueError(f"{value!r}: the duration must be more than 0")
    return int(hits) / seconds
