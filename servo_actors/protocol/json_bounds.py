"""The bounds of the JSON the servo reads and writes: nesting depth, finite numbers, strict encoding.

Python's ``json`` reads a reply nested a thousand deep by recursing (``RecursionError``), and
writes ``NaN`` and ``Infinity``, which are not JSON. Replies are checked against ``MAX_NESTING``
before anything walks them recursively; every body is encoded by ``encode_body``
(``allow_nan=False``), so nothing that is not JSON can leave; measurement points that are not
finite are dropped by ``finite_measurement`` before the result is built, and said so.

A result may hold a million points, and every walk over it in Python costs a fraction of a second
per hundred thousand: ``json_problem`` checks nesting and finiteness in one walk, and the slower
functions that say *where* (``nested_deeper_than``, ``first_non_finite``) run only once it found
something.

>>> nested_deeper_than([[[1]]], 2)
True
>>> json_problem({"a": [1, {"b": float("inf")}]}), json_problem([[[1]]], 2), json_problem([1.5])
('NON_FINITE', 'TOO_DEEP', None)
>>> finite_measurement({"x": {"values": [{"data": [[1, 2.0], [2, float("nan")]]}]}}, {})[2]
'dropped 1 value that is not a finite number (NaN or infinity): x 1'
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_NESTING = 64
"""Deepest nesting of lists and objects read in a reply (a protocol message needs about 10)."""
DROPPED_ANNOTATION = "servo_actors.dropped_values"
"""Annotation of a MEASUREMENT naming, per metric, how many non-finite values the servo dropped."""


TOO_DEEP = "TOO_DEEP"
NON_FINITE = "NON_FINITE"
_CONTAINERS = (dict, list, tuple)


def json_problem(value: Any, limit: int = MAX_NESTING) -> str | None:
    """One walk over ``value``: ``TOO_DEEP`` if lists/dicts nest more than ``limit`` deep, else
    ``NON_FINITE`` if a float is NaN or infinite, else None. Iterative: any depth is safe.

    Scalars are looked at in place, and so are the items of a list inside a container (a point of
    a series: ``[t, v]``): a series costs one step per point, not a trip through the stack.
    """
    non_finite = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    isfinite = math.isfinite
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            if isinstance(item, float) and not isfinite(item):
                non_finite = True
            continue
        if depth > limit:
            return TOO_DEEP
        for child in children:
            kind = type(child)
            if kind is float:
                if not isfinite(child):
                    non_finite = True
            elif kind is int or kind is str or kind is bool or child is None:
                continue
            elif kind is list:
                if depth >= limit:
                    return TOO_DEEP
                for grandchild in child:
                    inner = type(grandchild)
                    if inner is float:
                        if not isfinite(grandchild):
                            non_finite = True
                    elif not (inner is int or inner is str or inner is bool or grandchild is None):
                        stack.append((grandchild, depth + 2))
            else:  # other containers, and subclasses of anything (a float subclass may be NaN too)
                stack.append((child, depth + 1))
    return NON_FINITE if non_finite else None


def nested_deeper_than(value: Any, limit: int) -> bool:
    """True if lists/dicts in ``value`` nest more than ``limit`` deep. Iterative: any depth is safe."""
    return json_problem(value, limit) == TOO_DEEP


def decode_reply(content: bytes | None, limit: int) -> Any:
    """The JSON value of a reply body of at most ``limit`` bytes (None: it was longer).

    ValueError, whose message says what is wrong, for anything else: too large, not JSON (``NaN``
    included: the protocol is JSON), nested past what the decoder's recursion allows.
    """
    if content is None or len(content) > limit:
        raise ValueError(f"the reply is larger than {limit} bytes")
    try:
        return json.loads(content, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError(f"the reply is nested deeper than {MAX_NESTING} levels") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"the reply is not JSON ({str(exc)[:120]})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def first_non_finite(value: Any) -> str | None:
    """Where in ``value`` the first NaN or infinity is (``"a.0.b"``), or None. Iterative.

    Needed before pydantic dumps a message: in JSON mode it turns NaN under ``Any`` into ``null``,
    silently, so a strict encoder after it sees nothing wrong.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path or "(the value itself)"
        if isinstance(item, dict):
            stack.extend((child, f"{path}.{key}" if path else str(key)) for key, child in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}.{n}" if path else str(n)) for n, child in enumerate(item))
    return None


def encode_body(body: Any) -> bytes:
    """``body`` as strict JSON bytes. ValueError (not JSON: NaN, infinity, a non-JSON type, too deep)."""
    problem = json_problem(body)
    if problem == TOO_DEEP:
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    if problem == NON_FINITE:
        raise ValueError(f"{first_non_finite(body)} is not a finite number (NaN or infinity)")
    return encode_checked(body)


def encode_checked(body: Any) -> bytes:
    """``body``, already found free of NaN and of deep nesting (``json_problem``), as strict JSON
    bytes. ValueError if it is not JSON all the same (a type JSON has not)."""
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
    except (TypeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _finite(value: Any) -> bool:
    return not (isinstance(value, float) and not math.isfinite(value))


def _finite_point(point: Any) -> bool:
    if type(point) is list or type(point) is tuple:  # the usual [t, v]: no generator per point
        for part in point:
            if isinstance(part, float) and not math.isfinite(part):
                return False
        return True
    return not isinstance(point, list | tuple) or all(_finite(part) for part in point)


def finite_measurement(metrics: Any, annotations: Any) -> tuple[Any, Any, str | None]:
    """``(metrics, annotations, note)`` with every non-finite value dropped.

    A series keeps its finite points; a single reading (``value``) that is not finite drops its
    metric. Non-finite annotation values become text ("nan", "inf"). ``note`` says what was
    dropped (None when nothing was); the counts also go into the ``DROPPED_ANNOTATION`` annotation.
    Shapes that are not the protocol's are left as they are, for validation to name.
    """
    if not isinstance(metrics, dict):
        return metrics, annotations, None
    dropped: dict[str, int] = {}
    cleaned: dict[str, Any] = {}
    for name, metric in metrics.items():
        if not isinstance(metric, dict):
            cleaned[name] = metric
            continue
        metric = dict(metric)
        if "value" in metric and not _finite(metric["value"]):
            dropped[str(name)] = dropped.get(str(name), 0) + 1
            if metric.get("values") is None:
                continue  # a reading with no finite value: nothing of this metric is left
            del metric["value"]
        series_list = metric.get("values")
        if isinstance(series_list, list):
            kept_series = []
            for series in series_list:
                if isinstance(series, dict) and isinstance(series.get("data"), list):
                    data = [point for point in series["data"] if _finite_point(point)]
                    if len(data) != len(series["data"]):
                        dropped[str(name)] = dropped.get(str(name), 0) + len(series["data"]) - len(data)
                        series = {**series, "data": data}
                kept_series.append(series)
            metric["values"] = kept_series
        cleaned[name] = metric
    if isinstance(annotations, dict):
        annotations = {
            key: (str(value) if not _finite(value) else value) for key, value in annotations.items()
        }
    if not dropped:
        return cleaned, annotations, None
    total = sum(dropped.values())
    counts = ", ".join(f"{name} {count}" for name, count in sorted(dropped.items()))
    note = (
        f"dropped {total} value{'s' if total != 1 else ''} that {'are' if total != 1 else 'is'} "
        f"not a finite number (NaN or infinity): {counts}"
    )
    if isinstance(annotations, dict) or annotations is None:
        annotations = {**(annotations or {}), DROPPED_ANNOTATION: counts}
    return cleaned, annotations, note


__all__ = [
    "DROPPED_ANNOTATION",
    "MAX_NESTING",
    "NON_FINITE",
    "TOO_DEEP",
    "decode_reply",
    "encode_body",
    "encode_checked",
    "finite_measurement",
    "first_non_finite",
    "json_problem",
    "nested_deeper_than",
]
