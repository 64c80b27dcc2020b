"""Numbers and counts as a person reads them, in the lines the demo prints.

``number_text`` writes a float with 4 significant digits and no exponent at ordinary magnitudes
(15370, not 1.537e+04; 0.06621; 726.4); an exponent only below ``EXPONENT_BELOW`` or from
``EXPONENT_FROM``. The console's charts.js ``fmt`` follows the same rule, so the terminal and the
page show the same numbers. ``counted`` puts a noun in the singular or the plural.

>>> number_text(15370.4), number_text(1.537e4), number_text(0.066214), number_text(2.0)
('15370', '15370', '0.06621', '2')
>>> number_text(3), number_text("g1"), number_text(2.5e-7), number_text(1234.5), number_text(-0.00012)
('3', 'g1', '2.500e-07', '1235', '-0.00012')
>>> counted(1, "reading"), counted(3, "reading"), counted(0, "step")
('1 reading', '3 readings', '0 steps')
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

__all__ = ["EXPONENT_BELOW", "EXPONENT_FROM", "SIGNIFICANT", "counted", "number_text"]

SIGNIFICANT = 4
"""Significant digits of a float (fewer when the last ones are zeros: 0.25, not 0.2500)."""
EXPONENT_BELOW = 1e-4
"""Magnitudes below this (and not zero) are written with an exponent."""
EXPONENT_FROM = 1e15
"""Magnitudes from this on are written with an exponent."""


def number_text(value: Any) -> str:
    """``value`` for a person: a float as the module says, anything else as ``str`` gives it."""
    if not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < EXPONENT_BELOW or magnitude >= EXPONENT_FROM):
        return f"{value:.{SIGNIFICANT - 1}e}"
    if value.is_integer():
        return str(int(value))
    decimals = max(0, SIGNIFICANT - 1 - math.floor(math.log10(magnitude)))
    # A tie (an exact ...5 in binary) rounds away from zero, as JavaScript's toFixed does.
    text = str(Decimal(value).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text == "-0" else text


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 reading``, ``3 readings``: ``plural`` when the noun does not just take an s."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"
