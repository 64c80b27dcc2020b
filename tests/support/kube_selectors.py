"""Label and field selectors as the API server parses them from ``?labelSelector=`` / ``?fieldSelector=``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Requirement = Callable[[Mapping[str, str]], bool]

_SET_FORM = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQUALITY_FORM = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")


class SelectorError(ValueError):
    """A selector the server cannot parse (answered 400)."""


def _split_terms(selector: str) -> list[str]:
    # Commas separate requirements except inside the parentheses of a set-based one.
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [term for term in terms if term.strip()]


def _requirement(term: str) -> Requirement:
    if match := _EQUALITY_FORM.match(term):
        key, operator, value = match.groups()
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _SET_FORM.match(term):
        negated, key, operator, values = match.groups()
        if operator is None:
            return (lambda labels: key not in labels) if negated else (lambda labels: key in labels)
        if negated:
            raise SelectorError(f"unable to parse requirement: {term.strip()!r}")
        allowed = {value.strip() for value in values.split(",") if value.strip()}
        if operator == "in":
            return lambda labels: labels.get(key) in allowed
        return lambda labels: labels.get(key) not in allowed
    raise SelectorError(f"unable to parse requirement: {term.strip()!r}")


def label_matcher(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over an object (its ``metadata.labels``); an empty selector matches everything."""
    requirements = [_requirement(term) for term in _split_terms(selector or "")]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(requirement(labels) for requirement in requirements)

    return matches


COMMON_FIELDS = ("metadata.name", "metadata.namespace")
"""The field selectors every resource supports."""
FIELD_ALIASES = {"source": "source.component"}
"""Event field selectors whose label is not the field's path."""


def field_matcher(
    selector: str | None, supported: tuple[str, ...] = ()
) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate for ``fieldSelector``: equality on the common fields and the kind's ``supported`` ones."""
    checks: list[tuple[str, str, str]] = []
    for term in _split_terms(selector or ""):
        match = _EQUALITY_FORM.match(term)
        if match is None:
            raise SelectorError(f"invalid field selector {term.strip()!r}")
        field, operator, value = match.groups()
        if field not in COMMON_FIELDS + supported:
            raise SelectorError(f'field label not supported: "{field}"')
        checks.append((FIELD_ALIASES.get(field, field), operator, value))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((_text_at(obj, path) == value) != (operator == "!=") for path, operator, value in checks)

    return matches


def _text_at(obj: Mapping[str, Any], path: str) -> str:
    """The field at a dotted path as the server compares it: a string, "" when absent."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)
