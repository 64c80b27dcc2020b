"""resource.Quantity as the API server parses and re-renders it (k8s.io/apimachinery/pkg/api/resource).

The server stores quantities in canonical form, so a client writing ``cpu: "0.5"`` reads back
``500m`` and ``memory: 1024Mi`` reads back ``1Gi``: a connector comparing what it wrote with what
it reads must cope, and the emulator makes it.
"""

from __future__ import annotations

import re
from fractions import Fraction

QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[eE][+-]?[0-9]+)|(?:[KMGTPE]i)|[numkMGTPE]?)$"
)
QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in DECIMAL.items()}


class QuantityError(ValueError):
    """Not a quantity (the real server refuses the request body with this message)."""


def parse(text: str | int | float) -> tuple[Fraction, str]:
    """(exact value, format) where format is "binary", "decimal" or "exponent"."""
    raw = str(text).strip()
    match = QUANTITY.match(raw)
    if match is None:
        raise QuantityError(QUANTITY_MESSAGE)
    number, suffix = Fraction(match.group(1)), match.group(2)
    if suffix in BINARY:
        return number * 1024 ** BINARY[suffix], "binary"
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:]), "exponent"
    return number * Fraction(10) ** DECIMAL[suffix], "decimal"


def canonical(text: str | int | float) -> str:
    """The string the API server renders for ``text`` (rounded up to nano units, as it does)."""
    value, form = parse(text)
    nanos = -((-value * 10**9) // 1)  # ceiling at the smallest scale the server keeps
    value = Fraction(nanos, 10**9)
    if value == 0:
        return "0"
    if form == "binary" and (abs(value) < 1024 or value.denominator != 1):
        form = "decimal"  # small or fractional binary values render in decimal, as the server does
    if form == "binary":
        mantissa, power = int(value), 0
        while power < 6 and mantissa % 1024 == 0:
            mantissa, power = mantissa // 1024, power + 1
        suffix = next(name for name, exponent in BINARY.items() if exponent == power) if power else ""
        return f"{mantissa}{suffix}"
    mantissa, exponent = nanos, -9
    while mantissa % 1000 == 0 and exponent < 18:
        mantissa, exponent = mantissa // 1000, exponent + 3
    if form == "exponent":
        return f"{mantissa}e{exponent}" if exponent else f"{mantissa}"
    return f"{mantissa}{DECIMAL_SUFFIX[exponent]}"


def value(text: str | int | float) -> Fraction:
    return parse(text)[0]
