"""What a connector hands the host, made safe to send: plain data, and text that cannot raise.

A connector is arbitrary code, and so is everything it returns: an exception whose ``__str__``
raises, a mapping whose ``items()`` does, a structure that contains itself, an object whose
``__reduce__`` would run code in the supervisor when unpickled there. The host therefore sends
only plain data (dict with str keys, list, str, int, float, bool, None: JSON's types, which is
what reaches the optimizer anyway), converted here, and formats connector objects only through
``safe_text``/``describe_exception``, which never raise.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import pathlib
import pickle
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from servo_actors.errors import ConnectorError

__all__ = [
    "MAX_DEPTH",
    "NotPlainData",
    "PlainConverter",
    "ResultTooLarge",
    "TEXT_LIMIT",
    "describe_exception",
    "progress_percent",
    "refuse_oversize",
    "safe_text",
    "to_plain",
    "type_name",
]

MAX_DEPTH = 64
"""Deepest nesting of containers accepted in a result (the wire shapes need fewer than 10)."""
TEXT_LIMIT = 2000
"""Most characters of connector-supplied text (an exception's message) kept in an error message."""

_PLAIN_LEAVES = (str, int, float, bool, type(None))
_LEAF_TYPES = frozenset(_PLAIN_LEAVES)
_PLAIN_KEYS = (int, float, bool, type(None))
_TYPE_NAME = type.__dict__["__name__"]
_JSON_SCALARS = (
    datetime.date,
    datetime.time,
    datetime.timedelta,
    decimal.Decimal,
    uuid.UUID,
    enum.Enum,
    pathlib.PurePath,
    bytes,
    bytearray,
)
"""Other types a result may hold, as JSON has them (ISO dates, decimals as numbers...)."""
_OWN_ITERATORS: tuple[tuple[type, Callable[[Any], Iterator[Any]]], ...] = (
    (list, list.__iter__),
    (tuple, tuple.__iter__),
    (set, set.__iter__),
    (frozenset, frozenset.__iter__),
)
"""Each sequence type with its own ``__iter__``, called instead of a subclass's override."""


class NotPlainData(ConnectorError, ValueError):
    """A connector returned something that is not plain data; the message says what and where."""


class ResultTooLarge(ConnectorError, ValueError):
    """A result is over the byte limit: measured exactly (``exact``: its pickled size), or found to
    be while being converted (``at_least``: every item costs at least a byte)."""

    def __init__(self, at_least: int, limit: int, *, exact: bool = False) -> None:
        super().__init__(f"{at_least} bytes" if exact else f"more than {at_least} bytes")
        self.at_least = at_least
        self.limit = limit
        self.exact = exact


def refuse_oversize(value: Any, byte_limit: int | None) -> None:
    """ResultTooLarge when ``value`` pickles to more than ``byte_limit`` bytes: the first look at a
    connector's result, before it is walked at all (pickling is C: a million points take ~0.1 s,
    while a walk in Python that stops at the limit took seconds). A value that cannot be pickled
    (a generator, an object that refuses) passes: the conversion names what is wrong with it."""
    if byte_limit is None:
        return
    try:
        size = len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # connector objects: their __reduce__ may raise anything
        return
    if size > byte_limit:
        raise ResultTooLarge(size, byte_limit, exact=True)


def _path_text(path: Any) -> str:
    """A path kept as ``(parent, key)`` pairs while converting, as text: ``parent.key`` for a key
    of a mapping, ``parent[index]`` for an index of a sequence. Text is made only for an error
    message: formatting it for every item was most of the conversion's time."""
    parts: list[str] = []
    while isinstance(path, tuple):
        path, step = path
        parts.append(f"[{step}]" if type(step) is int else f".{step}")
    parts.append(path)
    return "".join(reversed(parts))


def type_name(value: Any) -> str:
    """The name of ``value``'s type; never raises (a metaclass may make ``__name__`` raise)."""
    try:
        # type's own descriptor: a metaclass may override __name__ (with a property that raises).
        name = _TYPE_NAME.__get__(type(value), type)
        return name if type(name) is str else "object"
    except Exception:
        return "object"


def safe_text(value: Any, limit: int = TEXT_LIMIT) -> str:
    """``str(value)`` cut to ``limit`` characters, or ``<unprintable TYPE>``; never raises."""
    try:
        # str.__str__ of a str subclass: its own __str__ (or slicing) may be overridden.
        text = str.__str__(value) if isinstance(value, str) else str.__str__(str(value))
    except Exception:
        return f"<unprintable {type_name(value)}>"
    return text if len(text) <= limit else text[:limit] + "..."


def describe_exception(exc: BaseException, limit: int = TEXT_LIMIT) -> str:
    """``TypeName: message`` of a connector's exception (``TypeName`` alone if it has no message)."""
    text = safe_text(exc, limit)
    return f"{type_name(exc)}: {text}" if text else type_name(exc)


def progress_percent(percent: Any) -> float | None:
    """``percent`` as a float clamped to 0-100, or None when it is not a number."""
    try:
        value = float(percent)
    except Exception:
        return None
    if math.isnan(value):
        return None
    return min(100.0, max(0.0, value))


def to_plain(value: Any, *, where: str = "result", byte_limit: int | None = None) -> Any:
    """``value`` as plain data (pydantic models dumped in wire shape, subclasses of the plain types
    made exact, dates and decimals as JSON has them).

    Raises NotPlainData naming the path (``where`` first) of anything else: an object of another
    type, a non-scalar key, a structure that contains itself, nesting past MAX_DEPTH. With
    ``byte_limit``, raises ResultTooLarge as soon as the result certainly pickles to more bytes.
    """
    return PlainConverter(byte_limit).convert(value, where)


class PlainConverter:
    """``to_plain`` for several values that share one byte limit (the entries of a check)."""

    def __init__(self, byte_limit: int | None = None) -> None:
        self.byte_limit = byte_limit
        self.at_least = 0
        self.active: set[int] = set()

    def convert(self, value: Any, where: str) -> Any:
        """``value`` as plain data (see ``to_plain``), counted against the shared limit."""
        return self.plain(value, where, 0)

    def count(self, size: int) -> None:
        # A lower bound of the pickled size: every item takes a byte or more, a string its length.
        self.at_least += size
        if self.byte_limit is not None and self.at_least > self.byte_limit:
            raise ResultTooLarge(self.at_least, self.byte_limit)

    def plain(self, value: Any, path: Any, depth: int) -> Any:
        """``value`` as plain data; ``path`` is text, or ``(parent, suffix)`` (see ``_path_text``)."""
        kind = type(value)
        if kind in _LEAF_TYPES:
            self.count(len(value) + 1 if kind is str else 1)
            return value
        if depth >= MAX_DEPTH:
            raise NotPlainData(f"{_path_text(path)}: nested deeper than {MAX_DEPTH} levels")
        if kind is list or kind is dict or kind is tuple:  # the usual containers, first
            return self.container(value, path, depth)
        path = _path_text(path)  # the rare kinds below: text, as their messages need it
        if isinstance(value, BaseModel):
            dumped = value.model_dump(mode="json", by_alias=True, exclude_none=True)
            return self.plain(dumped, path, depth)
        if isinstance(value, str):
            return self.plain(str.__str__(value), path, depth)
        if isinstance(value, int):  # bool cannot be subclassed: this is an int subclass (IntEnum...)
            return self.plain(int.__index__(value), path, depth)
        if isinstance(value, float):
            return self.plain(float.__float__(value), path, depth)
        if isinstance(value, (Mapping, list, tuple, set, frozenset)):
            return self.container(value, path, depth)
        if not isinstance(value, _JSON_SCALARS):
            # Not even pydantic's general conversion: it would run an iterator to its end, however
            # long, before the byte limit could stop it.
            raise NotPlainData(f"{path}: a {type_name(value)} is not plain data")
        try:
            converted = to_jsonable_python(value)
        except Exception:
            raise NotPlainData(f"{path}: a {type_name(value)} is not plain data") from None
        return self.plain(converted, path, depth)

    def container(self, value: Any, path: Any, depth: int) -> Any:
        ident = id(value)
        if ident in self.active:
            raise NotPlainData(f"{_path_text(path)}: contains itself (a recursive structure)")
        self.active.add(ident)
        limit = self.byte_limit
        try:
            self.count(1)
            kind = type(value)
            if kind is not list and kind is not tuple and isinstance(value, Mapping):
                items = dict.items(value) if isinstance(value, dict) else value.items()
                result = {}
                for key, item in items:
                    text = self.key(key, path)
                    kind = type(item)
                    if kind in _LEAF_TYPES:  # leaves in place: no call, no path
                        self.at_least += len(item) + 1 if kind is str else 1
                        if limit is not None and self.at_least > limit:
                            raise ResultTooLarge(self.at_least, limit)
                        result[text] = item
                    else:
                        result[text] = self.plain(item, (path, text), depth + 1)
                return result
            for base in (list, tuple, set, frozenset):
                if kind is base or isinstance(value, base):
                    sequence = base.__iter__(value)  # the type's own: an override may not end
                    break
            converted: list[Any] = []
            append = converted.append
            for index, item in enumerate(sequence):
                kind = type(item)
                if kind in _LEAF_TYPES:
                    self.at_least += len(item) + 1 if kind is str else 1
                    if limit is not None and self.at_least > limit:
                        raise ResultTooLarge(self.at_least, limit)
                    append(item)
                elif kind is list and depth + 1 < MAX_DEPTH and (flat := self._flat(item)) is not None:
                    append(flat)  # a list of leaves (a point [t, v]): no call per point
                else:
                    append(self.plain(item, (path, index), depth + 1))
            return converted
        finally:
            self.active.discard(ident)

    def _flat(self, items: list[Any]) -> list[Any] | None:
        """A copy of ``items`` counted against the limit when all of them are leaves; else None,
        and nothing counted (``plain`` takes it the general way)."""
        size = 1
        for item in items:
            kind = type(item)
            if kind not in _LEAF_TYPES:
                return None
            size += len(item) + 1 if kind is str else 1
        self.count(size)
        return list(items)

    def key(self, key: Any, path: Any) -> str:
        if isinstance(key, str):
            text = str.__str__(key)
        elif isinstance(key, _PLAIN_KEYS):
            text = str(self.plain(key, path, 0))  # exact type first: its str() cannot be overridden
        else:
            raise NotPlainData(f"{_path_text(path)}: a key of type {type_name(key)} (keys must be strings)")
        self.count(len(text) + 1)
        return text
