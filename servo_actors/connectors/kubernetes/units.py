"""Kubernetes resource quantities both ways: CPU in cores, memory in GiB.

>>> parse_cpu("250m"), parse_cpu("2"), parse_cpu(1.5)
(0.25, 2.0, 1.5)
>>> format_cpu(0.25), format_cpu(2.0), format_cpu(1.125)
('250m', '2', '1125m')
>>> parse_memory("512Mi"), parse_memory("1Gi"), parse_memory("1G")
(0.5, 1.0, 0.9313225746154785)
>>> format_memory(0.5), format_memory(1.0), format_memory(0.125)
('512Mi', '1Gi', '128Mi')
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "GIB",
    "format_cpu",
    "format_memory",
    "parse_cpu",
    "parse_memory",
    "parse_quantity",
]

GIB = 1024**3
_BINARY = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity (``"250m"``, ``"1.5Gi"``, ``"2e3"``, ``4``) as an exact Decimal.

    Raises ValueError naming the text when it is not a quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite quantity: {value!r}")
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {value!r} (e.g. '250m', '2', '512Mi', '1Gi')")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        amount = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from None
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    return amount * _DECIMAL[suffix]


def parse_cpu(value: str | int | float) -> float:
    """Cores from ``"250m"``, ``"0.5"``, ``2``."""
    return float(parse_quantity(value))


def format_cpu(cores: float) -> str:
    """The quantity for ``cores``: whole cores as ``"2"``, else millicores (``"250m"``).

    Kubernetes keeps CPU to the millicore, so anything finer is rounded to the nearest one.
    """
    millis = round(Decimal(str(cores)) * 1000)
    if millis < 0:
        raise ValueError(f"CPU cannot be negative: {cores!r}")
    if millis % 1000 == 0:
        return str(millis // 1000)
    return f"{millis}m"


def parse_memory(value: str | int | float) -> float:
    """GiB from ``"512Mi"``, ``"1Gi"``, ``"1G"``, ``"1073741824"`` (bytes)."""
    return float(parse_quantity(value) / GIB)


def format_memory(gib: float) -> str:
    """The quantity for ``gib`` GiB in the largest binary unit that keeps it whole (``"384Mi"``).

    Rounded to the nearest KiB; a value that is not a whole number of KiB stays in bytes.
    """
    if gib < 0:
        raise ValueError(f"memory cannot be negative: {gib!r}")
    size = Decimal(str(gib)) * GIB
    kib = (size / 1024).quantize(Decimal(1))
    if kib == 0:
        return str(int(size.quantize(Decimal(1))))
    for suffix, unit in (("Ti", 1024**3), ("Gi", 1024**2), ("Mi", 1024)):
        if kib % unit == 0:
            return f"{int(kib // unit)}{suffix}"
    return f"{int(kib)}Ki"
