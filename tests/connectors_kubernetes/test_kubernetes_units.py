"""CPU and memory quantities both ways (units.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servo_actors.connectors.kubernetes.units import (
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "cores"),
    [("250m", 0.25), ("1", 1.0), ("0.5", 0.5), ("1500m", 1.5), (2, 2.0), ("100000000n", 0.1), ("1e3m", 1.0)],
)
def test_parse_cpu(text, cores) -> None:
    assert parse_cpu(text) == pytest.approx(cores)


@pytest.mark.parametrize(
    ("cores", "text"), [(0.25, "250m"), (1.0, "1"), (4, "4"), (0.125, "125m"), (1.0004, "1")]
)
def test_format_cpu(cores, text) -> None:
    assert format_cpu(cores) == text


@pytest.mark.parametrize(
    ("text", "gib"),
    [
        ("256Mi", 0.25),
        ("4Gi", 4.0),
        ("1048576Ki", 1.0),
        ("1073741824", 1.0),
        ("1G", 1e9 / 2**30),
        ("0.5Gi", 0.5),
    ],
)
def test_parse_memory(text, gib) -> None:
    assert parse_memory(text) == pytest.approx(gib)


@pytest.mark.parametrize(
    ("gib", "text"), [(0.25, "256Mi"), (4.0, "4Gi"), (1024.0, "1Ti"), (0.375, "384Mi"), (1 / 2**20, "1Ki")]
)
def test_format_memory(gib, text) -> None:
    assert format_memory(gib) == text


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5 Mi", "Mi", "1Zi", "-", "1mm"])
def test_bad_quantities_name_the_text(bad) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(bad)


@given(st.integers(min_value=1, max_value=64_000))
def test_millicores_round_trip(millis: int) -> None:
    assert parse_cpu(format_cpu(millis / 1000)) == pytest.approx(millis / 1000)


@given(st.integers(min_value=1, max_value=2**30))
def test_kibibytes_round_trip(kib: int) -> None:
    text = format_memory(kib / 2**20)
    assert parse_memory(text) == pytest.approx(kib / 2**20)
    assert text[-2:] in ("Ki", "Mi", "Gi", "Ti")
