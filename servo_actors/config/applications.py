"""The applications of one servo: every document of a servo.yaml, one ``ServoConfig`` each.

A file of one YAML document is one application, exactly as before (it may even lack an optimizer:
``check`` and ``describe`` need none). A file of several documents is several applications, each
with its own ``optimizer`` (ORG/APP unique across the documents), ``settings``, ``supervisor``
and ``connectors`` (names unique within the application)::

    apps = load_apps("servo.yaml")
    for config in apps.select(["acme.com/web"]):    # ConfigError naming the known ones if unknown
        ...

The keys of the servo itself rather than of one application (``SERVO_WIDE``: its metrics
endpoint, its convention, its run directory, its actor system's liveness watch) are read from the
first document; a later document may repeat them only with the same value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from servo_actors.config.models import ServoConfig
from servo_actors.config.problems import ConfigProblem, key_path
from servo_actors.errors import ConfigError

__all__ = ["SERVO_WIDE", "ServoApps", "document_source", "servo_wide_problems", "unique_app_problems"]

SERVO_WIDE: tuple[tuple[str, str], ...] = (
    ("settings", "metrics"),
    ("supervisor", "convention"),
    ("supervisor", "run_dir"),
    ("supervisor", "liveness"),
)
"""Keys that belong to the servo, not to one of its applications: one value for all of them."""


def document_source(source: str, index: int, app: object) -> str:
    """How a problem names document ``index`` (1-based) of ``source``: ``servo.yaml document 2 (acme.com/web)``."""
    name = app if isinstance(app, str) and app else "no optimizer.id"
    return f"{source} document {index} ({name})"


@dataclass(frozen=True)
class ServoApps:
    """The applications of one servo.yaml, in the order of its documents."""

    source: str
    configs: tuple[ServoConfig, ...]

    def __post_init__(self) -> None:
        if not self.configs:
            raise ValueError("ServoApps needs at least one configuration")

    def __iter__(self) -> Iterator[ServoConfig]:
        return iter(self.configs)

    def __len__(self) -> int:
        return len(self.configs)

    @property
    def several(self) -> bool:
        """Whether the file holds more than one application (more than one document)."""
        return len(self.configs) > 1

    @property
    def first(self) -> ServoConfig:
        """The first application: the one of a single-document file; its servo-wide keys rule."""
        return self.configs[0]

    @property
    def names(self) -> list[str]:
        """Each application's ORG/APP (a single document without an optimizer has none)."""
        return [config.app for config in self.configs if config.app is not None]

    def select(self, names: Iterable[str] = ()) -> tuple[ServoConfig, ...]:
        """The applications named (in the file's order), or all of them when ``names`` is empty.

        A name that is no application's is a ConfigError (exit 2) naming it and the known ones.
        """
        wanted = list(dict.fromkeys(name.strip() for name in names if name.strip()))
        if not wanted:
            return self.configs
        known = self.names
        unknown = [name for name in wanted if name not in known]
        if unknown:
            listed = ", ".join(known) if known else "none: the file configures no optimizer"
            raise ConfigError(
                f"no application {', '.join(repr(name) for name in unknown)} in the file (known: {listed})",
                source=self.source,
                key="optimizer.id",
            )
        return tuple(config for config in self.configs if config.app in wanted)

    def by_app(self, name: str) -> ServoConfig:
        """The application ``name`` (ORG/APP); ConfigError naming the known ones if there is none."""
        (config,) = self.select([name])
        return config


def unique_app_problems(raw_documents: Sequence[dict[str, Any]], source: str) -> list[ConfigProblem]:
    """With several documents: each needs an ``optimizer.id``, and no two the same."""
    problems = []
    first_at: dict[str, int] = {}
    for index, raw in enumerate(raw_documents, start=1):
        section = raw.get("optimizer")
        app = section.get("id") if isinstance(section, dict) else None
        where = document_source(source, index, app)
        if section is None:
            problems.append(
                ConfigProblem(
                    where,
                    "optimizer",
                    "is required when the file holds several documents (one per application)",
                )
            )
            continue
        if not isinstance(app, str):
            continue  # a missing or mistyped id is reported by the model's validation
        if app in first_at:
            problems.append(
                ConfigProblem(
                    where, "optimizer.id", f"{app!r} is already the application of document {first_at[app]}"
                )
            )
        else:
            first_at[app] = index
    return problems


def servo_wide_problems(raw_documents: Sequence[dict[str, Any]], source: str) -> list[ConfigProblem]:
    """A later document that sets a servo-wide key (``SERVO_WIDE``) to another value than the first."""
    problems = []
    first = raw_documents[0] if raw_documents else {}
    for index, raw in enumerate(raw_documents[1:], start=2):
        for section_name, key in SERVO_WIDE:
            section = raw.get(section_name)
            if not isinstance(section, dict) or key not in section:
                continue
            first_section = first.get(section_name)
            first_value = first_section.get(key) if isinstance(first_section, dict) else None
            if section[key] != first_value:
                optimizer = raw.get("optimizer")
                app = optimizer.get("id") if isinstance(optimizer, dict) else None
                problems.append(
                    ConfigProblem(
                        document_source(source, index, app),
                        key_path((section_name, key)),
                        "belongs to the whole servo, not to one application: set it in the first "
                        "document only (a later one may repeat it only with the same value)",
                    )
                )
    return problems
