"""servo.yaml's ``checks`` section: the defaults of ``check`` and ``run --check`` (an option given on
the command line wins over the section's value).

servox's ``checks:`` section (``ChecksConfiguration``) has the same keys, and the ones that mean
something here keep their meaning: ``connectors``, ``name``, ``id``, ``tag``, ``quiet``,
``verbose``, ``wait``, ``delay``, ``halt_on``. Three are refused, each with a message naming it:
``remedy`` (servox ran a check's remedy; here a remedy is shown, never run), ``progressive`` and
``check_halting`` (how servox printed and logged the checks while they ran; here a round's table
shows when the round ends). Two differ from servox on purpose:

- ``wait`` is unset by default (one round); servox waited up to 30 minutes unless told otherwise.
- ``connectors`` is the default of ``check``'s CONNECTOR arguments only: ``run --check`` runs every
  connector's checks. servox checked that the names were connectors and then ran every
  connector's checks anyway, so this is what ``run --check`` did there too.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BeforeValidator, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from servo_actors.config.fields import Duration, StrictModel, positive
from servo_actors.durations import format_duration

__all__ = [
    "DEFAULT_HALT_ON",
    "EXPO",
    "HALT_ON_LEVELS",
    "MIN_DELAY",
    "ChecksConfig",
    "HaltOn",
    "split_values",
]

HALT_ON_LEVELS: Final = ("critical", "common", "failure", "warning")
"""``halt_on``'s choices: servox's severities, and ``failure`` (the same as ``common``)."""
HaltOn = Literal["critical", "common", "failure", "warning"]
DEFAULT_HALT_ON: Final = "critical"
EXPO: Final = "expo"
"""``delay: expo``: pauses that start short and double (``cli.check_rounds``)."""
MIN_DELAY: Final = 0.1
"""The shortest delay taken between rounds (seconds): a round is never re-run in a hot loop."""

_REFUSED: Final = {
    "remedy": "servox ran a failed check's remedy; here a remedy is shown beside the check, never run",
    "progressive": "how servox printed checks while they ran; here each round's table shows when it ends",
    "check_halting": "how servox logged the checks after a failure; here halt_on decides which are counted",
}


def split_values(values: Any) -> Any:
    """A list of names, or one string of them separated by commas (``a,b``), as the command line
    takes them; a ``/REGEX/`` is kept whole. Anything else is left for validation to refuse."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list | tuple):
        return values
    split: list[Any] = []
    for value in values:
        if not isinstance(value, str):
            split.append(value)
        elif len(value) > 2 and value.startswith("/") and value.endswith("/"):
            split.append(value)
        else:
            split += [part.strip() for part in value.split(",") if part.strip()]
    return split


Names = Annotated[list[str], BeforeValidator(split_values)]


def _delay(value: Any) -> Any:
    return EXPO if isinstance(value, str) and value.strip() == EXPO else value


class ChecksConfig(StrictModel):
    """The defaults of ``check`` and ``run --check``; an option given on the command line wins."""

    connectors: Names = Field(default_factory=list)
    """Only these connectors' checks, for ``check`` (its CONNECTOR arguments); ``run --check`` runs every connector's."""
    name: Names = Field(default_factory=list)
    """Only the checks of these names (exact, or /REGEX/): ``--check-name``."""
    id: Names = Field(default_factory=list)
    """Only the checks of these ids (exact, or /REGEX/): ``--id``."""
    tag: Names = Field(default_factory=list)
    """Only the checks with one of these tags: ``--tag``."""
    quiet: bool = False
    """No table: the exit code and stderr say it (``--quiet``)."""
    verbose: bool = False
    """Show each check's id, tags and severity (``--verbose``)."""
    wait: Duration | None = None
    """Re-run the checks until all pass or this time has passed (``--wait``); unset: one round."""
    delay: Annotated[Duration | Literal["expo"], BeforeValidator(_delay)] = EXPO
    """The pause between rounds (``--delay``): a duration of at least 100ms, or expo."""
    halt_on: HaltOn = DEFAULT_HALT_ON
    """A connector's failed check this severe skips its later checks (``--halt-on``)."""

    # servox's keys with no meaning here: refused, each with the reason (module docstring).
    remedy: SkipJsonSchema[Any] = Field(default=None, exclude=True)
    progressive: SkipJsonSchema[Any] = Field(default=None, exclude=True)
    check_halting: SkipJsonSchema[Any] = Field(default=None, exclude=True)

    @field_validator("remedy", "progressive", "check_halting")
    @classmethod
    def _refused(cls, value: Any, info: Any) -> None:
        if value is not None:
            raise ValueError(f"servox's key, not a setting here: {_REFUSED[info.field_name]}")
        return None

    @field_validator("wait")
    @classmethod
    def _wait_positive(cls, value: float | None) -> float | None:
        return None if value is None else positive(value)

    @field_validator("delay")
    @classmethod
    def _delay_long_enough(cls, value: float | str) -> float | str:
        if not isinstance(value, str) and value < MIN_DELAY:
            raise ValueError(f"must be at least {format_duration(MIN_DELAY)} (or {EXPO!r})")
        return value
