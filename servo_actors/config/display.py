"""The effective configuration as plain data for people: secrets masked, durations readable.

``servo-actors config`` prints this. It is also valid input: loading it again gives the same
configuration (apart from masked secrets). Durations are written ``"1m30s"`` where that is exact,
else as seconds. Given ``connector_settings`` (``servo_actors.connectors.registry.effective_settings``), each
connector's ``config`` is shown as its ``config_model`` sees it (defaults filled in, ``SecretStr``
fields masked), else as written; values under secret-looking keys are masked in any case.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, BeforeValidator

from servo_actors.config.models import ServoConfig
from servo_actors.config.problems import Loc, is_secret_key, key_path
from servo_actors.durations import format_duration, parse_duration
from servo_actors.logs import MASK

__all__ = ["ConnectorSettings", "ValueSource", "effective_config", "value_sources"]

ConnectorSettings = Callable[[str, Mapping[str, Any]], Any]
"""``(type_name, raw settings)``: the settings as the connector type's model has them (a pydantic
model or a mapping), or None to show them as written."""


def effective_config(
    config: ServoConfig, connector_settings: ConnectorSettings | None = None
) -> dict[str, Any]:
    """``config`` as JSON-able data with secrets shown as ``**********``."""
    data = _readable(ServoConfig, config.model_dump(mode="json"))
    for spec, shown in zip(config.connectors, data["connectors"], strict=True):
        shown["config"] = _mask_secret_keys(_connector_config(spec.type, spec.config, connector_settings))
    return data


ValueSource = tuple[str, Any, str]
"""``(key path, value as shown, source)``: one row of ``servo-actors config --sources``."""


def value_sources(config: ServoConfig, shown: dict[str, Any]) -> list[ValueSource]:
    """Every leaf value of ``shown`` (``effective_config``'s output, secrets already masked) with
    where it came from: the file, ``env NAME``, ``PATH/.env NAME`` or ``default``.

    An empty mapping or list is a leaf (nothing under it to attribute).
    """
    rows: list[ValueSource] = []

    def walk(value: Any, loc: Loc) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(item, (*loc, str(key)))
        elif isinstance(value, list) and value:
            for index, item in enumerate(value):
                walk(item, (*loc, index))
        else:
            rows.append((key_path(loc), value, config.provenance.source_of(loc)))

    walk(shown, ())
    return rows


def _connector_config(
    type_name: str, raw: dict[str, Any], connector_settings: ConnectorSettings | None
) -> Any:
    """The connector's config as its model has it, or the raw mapping when there is no model."""
    validated = connector_settings(type_name, raw) if connector_settings is not None else None
    if validated is None:
        return raw
    if isinstance(validated, BaseModel):
        return _readable(type(validated), validated.model_dump(mode="json"))
    return validated


def _readable(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a JSON dump of ``model``) with its Duration fields written as duration strings."""
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        value = data[name]
        if _is_duration(field.annotation, field.metadata) and isinstance(value, int | float):
            data[name] = _duration_text(value)
            continue
        nested = _nested_model(field.annotation)
        if nested is not None and isinstance(value, dict):
            data[name] = _readable(nested, value)
        elif nested is not None and isinstance(value, list):
            data[name] = [_readable(nested, item) if isinstance(item, dict) else item for item in value]
    return data


def _duration_text(seconds: float) -> str | float:
    text = format_duration(seconds)
    return text if text and parse_duration(text) == seconds else seconds


def _is_duration(annotation: object, metadata: list[Any]) -> bool:
    """Whether a field is a ``Duration`` (directly, or as ``Duration | None``)."""
    if any(isinstance(item, BeforeValidator) and item.func is parse_duration for item in metadata):
        return True
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Annotated and _is_duration(arg, list(arg.__metadata__)):
            return True
    return False


def _nested_model(annotation: object) -> type[BaseModel] | None:
    """The model inside ``M``, ``M | None`` or ``list[M]``."""
    candidates = [annotation, *typing.get_args(annotation)]
    for candidate in candidates:
        if typing.get_origin(candidate) is list:
            candidates.extend(typing.get_args(candidate))
        elif isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _mask_secret_keys(value: Any, secret: bool = False) -> Any:
    """Mask every value under a key that looks secret (token, password, ...), at any depth."""
    if isinstance(value, dict):
        return {
            key: _mask_secret_keys(item, secret or is_secret_key([str(key)])) for key, item in value.items()
        }
    if isinstance(value, list):
        return [_mask_secret_keys(item, secret) for item in value]
    if secret and value is not None:
        return MASK
    return value
