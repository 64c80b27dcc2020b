"""Turning validation failures into one readable ``ConfigError``: ``SOURCE: key.path: what is wrong``.

Pydantic reports errors as ``loc`` tuples and messages written for programmers ("Input should be a
valid dictionary or instance of OptimizerConfig"). A person editing servo.yaml wants the file, the
key as they wrote it (``connectors[1].config.url``) and a sentence in YAML's words::

    servo.yaml: connectors[1].type: unknown connector type 'foo' (known: ...)
    servo.yaml: settings.backoff.min: not a duration: 'fast' (use seconds, or e.g. '250ms', ...)
    env OPSANI_OPTIMIZER: optimizer.id: ORG 'ab' must be 5-50 characters of [A-Za-z0-9.-], ...

Values are echoed to help find the mistake, except under keys that look secret (``token``,
``password``...), whose values never appear in a message.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from servo_actors.errors import ConfigError

__all__ = [
    "ConfigProblem",
    "Loc",
    "MAX_ECHO_CHARS",
    "SECRET_KEY",
    "config_error",
    "describe_error",
    "is_secret_key",
    "key_path",
    "problems_from_validation",
]

Loc = tuple[str | int, ...]

# Keys whose values are never echoed in messages or shown by `servo-actors config`.
SECRET_KEY = re.compile(r"token|secret|passw|credential|api[_-]?key|private[_-]?key|auth", re.IGNORECASE)
# Echoed values are cut to this many characters: enough to recognise, short enough for one line.
MAX_ECHO_CHARS = 60

# What a value must be, per pydantic error type, in YAML's words.
_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
}
_YAML_TYPE_NAMES = {
    dict: "a mapping",
    list: "a list",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with the configuration: where it came from, which key, what is wrong."""

    source: str
    key: str
    message: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.source, self.key, self.message) if part)


def config_error(problems: Sequence[ConfigProblem]) -> ConfigError:
    """One ConfigError listing every problem, one per line; ``.problems`` keeps them apart."""
    if not problems:
        raise ValueError("config_error() needs at least one problem")
    if len(problems) == 1:
        (problem,) = problems
        error = ConfigError(problem.message, source=problem.source or None, key=problem.key or None)
    else:
        error = ConfigError("\n".join(str(problem) for problem in problems))
        sources = {problem.source for problem in problems}
        error.source = sources.pop() if len(sources) == 1 else None
    error.problems = list(problems)  # type: ignore[attr-defined]  # extra detail for callers that list each problem; ConfigError (errors.py) is below config and cannot name Problem
    return error


def key_path(loc: Iterable[str | int]) -> str:
    """``connectors[1].config.url`` from ``("connectors", 1, "config", "url")``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def is_secret_key(loc: Iterable[str | int]) -> bool:
    """True when any key on the path looks like it holds a secret."""
    return any(isinstance(part, str) and SECRET_KEY.search(part) for part in loc)


def problems_from_validation(
    exc: ValidationError,
    *,
    model: type[BaseModel],
    source: str,
    prefix: Loc = (),
    env_sources: Mapping[Loc, str] | None = None,
) -> list[ConfigProblem]:
    """A ``ConfigProblem`` per pydantic error of ``model``, keyed under ``prefix``.

    ``env_sources`` maps a key (as a loc tuple from the top) to the label of the variable that set
    it (``env NAME``); an error at or under such a key names it as its source instead of the file.
    """
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        full_loc = prefix + loc
        problem_source = source
        for env_loc, label in (env_sources or {}).items():
            if full_loc[: len(env_loc)] == env_loc:
                problem_source = label
        message = describe_error(error, model=model, loc=loc, secret=is_secret_key(full_loc))
        problems.append(ConfigProblem(problem_source, key_path(full_loc), message))
    return problems


def describe_error(error: Mapping[str, Any], *, model: type[BaseModel], loc: Loc, secret: bool) -> str:
    """A sentence for one pydantic error, in the words of someone editing YAML."""
    kind = error["type"]
    value = error.get("input")
    context = error.get("ctx") or {}
    if kind in ("value_error", "assertion_error") and "error" in context:
        return str(context["error"])
    if kind == "missing":
        return "is required but missing"
    if kind == "extra_forbidden":
        known = _known_keys(model, loc[:-1])
        return f"unknown key (expected one of: {', '.join(known)})" if known else "unknown key"
    if kind in _EXPECTED:
        hint = " (an empty key is null: give it a value or remove it)" if value is None else ""
        return f"must be {_EXPECTED[kind]}, not {_describe_value(value, secret)}{hint}"
    if kind == "string_pattern_mismatch":
        return f"must match the pattern {context.get('pattern')!r}, not {_describe_value(value, secret)}"
    message = str(error["msg"])
    if message.startswith("Input should be "):
        message = "must be " + message.removeprefix("Input should be ")
    return f"{message}, not {_describe_value(value, secret)}"


def _describe_value(value: object, secret: bool) -> str:
    """``'fast'``, ``-1``, ``a mapping``; never the value itself when it may be secret."""
    kind = _YAML_TYPE_NAMES.get(type(value), type(value).__name__)
    if secret:
        return f"{kind} (value hidden)"
    if isinstance(value, dict | list) or value is None:
        return kind
    text = repr(value)
    if len(text) > MAX_ECHO_CHARS:
        text = text[: MAX_ECHO_CHARS - 3] + "..."
    return text


def _known_keys(model: type[BaseModel], loc: Loc) -> list[str]:
    """The field names of the model found at ``loc`` inside ``model`` (empty if not a model)."""
    current: object = model
    for part in loc:
        if isinstance(part, int):
            current = _item_type(current)
        else:
            model_class = _model_class(current)
            if model_class is None or part not in model_class.model_fields:
                return []
            current = model_class.model_fields[part].annotation
    model_class = _model_class(current)
    if model_class is None:
        return []
    # A field left out of the output (``exclude``) is one the model refuses with its own message.
    return [name for name, field in model_class.model_fields.items() if not field.exclude]


def _model_class(annotation: object) -> type[BaseModel] | None:
    """The BaseModel subclass inside ``X``, ``X | None`` or ``Annotated[X, ...]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in _union_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _item_type(annotation: object) -> object:
    """``X`` from ``list[X]`` (or ``list[X] | None``); ``None`` when not a list."""
    for candidate in (annotation, *_union_args(annotation)):
        if typing.get_origin(candidate) is list:
            (item,) = typing.get_args(candidate)
            return item
    return None


def _union_args(annotation: object) -> tuple[object, ...]:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType or origin is typing.Annotated:
        return typing.get_args(annotation)
    return ()
