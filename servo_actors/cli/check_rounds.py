"""Checks as ``check`` and ``run --check`` run them: which checks count, what a failure halts,
the rounds of ``--wait`` with the delay between them, and the table of the results.

- Options and servo.yaml: each of ``--check-name``, ``--id``, ``--tag``, ``--wait``, ``--delay``,
  ``--halt-on``, ``--quiet``, ``--verbose`` given on the command line wins; one not given takes
  the value of the application's ``checks`` section (``config.checks_section``), whose defaults
  are the options' (``CheckOptions``).

- Selection (``check --check-name/--id/--tag``): a check counts when it matches every kind of
  filter given, and any value of each kind (servox's ``CheckFilter``). A name or id written
  ``/REGEX/`` is a regular expression searched in it. The connectors run all their checks (one
  ``check()`` call each); the others are neither shown nor counted. A name or id that no check
  has, or a tag none carries, is a usage error listing the known ones; so are filters that no
  check matches all at once.
- ``--halt-on critical|common|warning`` (servox's levels and default, ``critical``): within each
  connector's checks, in its order, a failed check at least this severe halts that connector's
  later checks: they show as ``skipped`` and count neither way. ``failure`` is taken for
  ``common``. Unlike servox, ``--halt-on warning`` also halts on a failed warning (servox's
  ``Check.failed`` is never true for a warning, so its lowest level could not halt on one).
- Outcome of a check: ``passed``; ``warning`` (a failed check of severity ``warning``: shown,
  fails nothing, as servox's table counts it; servox's ``run --check`` blocked on it, which its
  own table contradicted); ``failed``; ``skipped`` (halted). Only ``failed`` fails the command.
- ``check --name NAME`` that names an application selects it (``check_cmd``); a check of that
  name too makes it ambiguous: a usage error after the first round, which has the checks' names.
- ``--wait DURATION``: rounds until one has no failed check and every connector answered, or the
  time is up; between rounds a line on stderr says what still fails, then a pause of ``--delay``
  (a duration, or ``expo``: 1 s doubling up to ``MAX_EXPO_DELAY``), never past the deadline and
  ended at once by SIGINT/SIGTERM. Without ``--wait``, one round.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import click

from servo_actors.cli.operation_output import StyledCell, styled_table
from servo_actors.config.checks_section import DEFAULT_HALT_ON, EXPO, HALT_ON_LEVELS, MIN_DELAY, ChecksConfig
from servo_actors.connectors.check_result import SEVERITIES
from servo_actors.durations import format_duration, parse_duration
from servo_actors.errors import UsageError
from servo_actors.signals import StopRequested

if TYPE_CHECKING:
    from servo_actors.actors import OperationResult

__all__ = [
    "CHECK_FAILED",
    "CheckOptions",
    "CheckPolicy",
    "CheckSelection",
    "MAX_EXPO_DELAY",
    "checks_table",
    "failed_checks",
    "policy_options",
    "run_rounds",
]

CHECK_FAILED: Final = "check-failed"
"""The reason ``check --json`` gives when the operation ran but one of its checks failed."""
EXPO_FIRST_DELAY = 1.0
"""``--delay expo``: pauses of this many seconds, doubling up to ``MAX_EXPO_DELAY``."""
MAX_EXPO_DELAY = 30.0
OUTCOMES: Final = ("passed", "warning", "failed", "skipped")


@dataclass(frozen=True)
class CheckSelection:
    """Which checks count (module docstring): names and ids exact or ``/REGEX/``, tags any of."""

    names: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    app_names: tuple[str, ...] = ()
    """``check --name`` values taken as applications: a check of such a name makes them ambiguous."""

    @property
    def empty(self) -> bool:
        return not (self.names or self.ids or self.tags)

    def matches(self, check: dict[str, Any]) -> bool:
        return (
            _any_matches(self.names, str(check.get("name", "")))
            and _any_matches(self.ids, str(check.get("id", "")))
            and (not self.tags or bool(set(self.tags) & set(check.get("tags") or ())))
        )

    def unknown(self, checks: Sequence[dict[str, Any]]) -> str | None:
        """The sentence naming what matches no check, with the known ones; None when all match."""
        problems = []
        for kind, wanted, known in (
            ("check name", self.names, [str(c.get("name")) for c in checks]),
            ("check id", self.ids, [str(c.get("id")) for c in checks]),
            ("tag", self.tags, sorted({tag for c in checks for tag in c.get("tags") or ()})),
        ):
            missing = [value for value in wanted if not any(_matches(value, k) for k in known)]
            if missing:
                listed = ", ".join(repr(k) for k in dict.fromkeys(known)) or "none"
                problems.append(f"no {kind} {', '.join(map(repr, missing))} (known: {listed})")
        if not problems and not self.empty and not any(self.matches(c) for c in checks):
            given = [
                f"{kind} {', '.join(values)}"
                for kind, values in (("--check-name", self.names), ("--id", self.ids), ("--tag", self.tags))
                if values
            ]
            problems.append(f"no check matches {' and '.join(given)} at once")
        return "; ".join(problems) or None

    def ambiguous(self, checks: Sequence[dict[str, Any]]) -> str | None:
        """The sentence naming a ``--name`` that is both an application and a check; else None."""
        both = [name for name in self.app_names if any(c.get("name") == name for c in checks)]
        if not both:
            return None
        named = ", ".join(map(repr, both))
        return (
            f"--name {named} is both an application and a check: say --app {both[0]} for the "
            f"application or --check-name {both[0]} for the check"
        )


def _matches(pattern: str, value: str) -> bool:
    if len(pattern) > 2 and pattern.startswith("/") and pattern.endswith("/"):
        return re.search(pattern[1:-1], value) is not None
    return pattern == value


def _any_matches(patterns: Sequence[str], value: str) -> bool:
    return not patterns or any(_matches(pattern, value) for pattern in patterns)


@dataclass(frozen=True)
class CheckPolicy:
    """How a command runs its checks: which count, what halts, how long to wait and pause."""

    selection: CheckSelection = field(default_factory=CheckSelection)
    halt_on: str = DEFAULT_HALT_ON
    wait: float | None = None
    """Seconds to retry for (None: one round)."""
    delay: float | None = None
    """Seconds between rounds (None: ``expo``)."""

    def delays(self) -> Iterator[float]:
        pause = self.delay if self.delay is not None else EXPO_FIRST_DELAY
        while True:
            yield pause
            if self.delay is None:
                pause = min(pause * 2, MAX_EXPO_DELAY)

    def judge(self, checks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The selected ``checks`` in order, each with its ``outcome`` (module docstring)."""
        halt_rank = SEVERITIES.index("common" if self.halt_on == "failure" else self.halt_on)
        halted: dict[str, str] = {}  # connector -> the check that halted it
        judged = []
        for check in checks:
            if not self.selection.matches(check):
                continue
            connector = str(check.get("connector"))
            entry = dict(check)
            severity = str(check.get("severity") or "common")
            if connector in halted:
                entry["outcome"] = "skipped"
                entry["message"] = f"not counted: {halted[connector]!r} failed (--halt-on {self.halt_on})"
            elif check.get("success"):
                entry["outcome"] = "passed"
            else:
                entry["outcome"] = "warning" if severity == "warning" else "failed"
                rank = SEVERITIES.index(severity) if severity in SEVERITIES else 1
                if rank <= halt_rank:
                    halted[connector] = str(check.get("name"))
            judged.append(entry)
        return judged


@dataclass(frozen=True)
class CheckOptions:
    """What the command line gave (module docstring): an empty tuple or None is not given, and
    the application's ``checks`` section's value counts."""

    names: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    wait: float | None = None
    delay: float | str | None = None
    """Seconds, or ``EXPO``."""
    halt_on: str | None = None
    quiet: bool | None = None
    verbose: bool | None = None

    def policy(self, checks: ChecksConfig, app_names: tuple[str, ...] = ()) -> CheckPolicy:
        """The policy for an application whose ``checks`` section is ``checks``."""
        delay = self.delay if self.delay is not None else checks.delay
        selection = CheckSelection(
            self.names or tuple(checks.name),
            ids=self.ids or tuple(checks.id),
            tags=self.tags or tuple(checks.tag),
            app_names=app_names,
        )
        return CheckPolicy(
            selection,
            self.halt_on or checks.halt_on,
            self.wait if self.wait is not None else checks.wait,
            None if delay == EXPO else float(delay),
        )

    def shown(self, checks: ChecksConfig) -> tuple[bool, bool]:
        """``(quiet, verbose)`` for an application whose ``checks`` section is ``checks``."""
        quiet = self.quiet if self.quiet is not None else checks.quiet
        verbose = self.verbose if self.verbose is not None else checks.verbose
        return quiet, verbose

    def args(self) -> list[str]:
        """The options given, as a command line of ``check`` takes them again."""
        args = [f"--check-name={n}" for n in self.names] + [f"--id={i}" for i in self.ids]
        args += [f"--tag={t}" for t in self.tags]
        args += [] if self.halt_on is None else ["--halt-on", self.halt_on]
        args += (
            []
            if self.delay is None
            else ["--delay", str(self.delay if self.delay == EXPO else repr(self.delay))]
        )
        args += [] if self.wait is None else ["--wait", repr(self.wait)]
        args += [] if self.quiet is None else ["--quiet" if self.quiet else "--no-quiet"]
        args += [] if self.verbose is None else ["--verbose" if self.verbose else "--no-verbose"]
        return args


def failed_checks(checks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in checks if c.get("outcome") == "failed"]


def run_rounds(
    policy: CheckPolicy,
    one_round: Callable[[], tuple[OperationResult, list[dict[str, Any]]]],
    sleep: Callable[[float], bool],
) -> tuple[OperationResult, list[dict[str, Any]], int]:
    """Rounds of ``one_round`` (the result and its raw checks) as ``policy`` says: the last
    result, its judged checks and how many rounds ran. ``sleep(seconds)`` pauses, True when a
    stop came (then StopRequested). UsageError when the selection names what no check has."""
    deadline = None if policy.wait is None else time.monotonic() + policy.wait
    delays = policy.delays()
    rounds = 0
    while True:
        result, raw = one_round()
        rounds += 1
        if rounds == 1 and result.status == "ok":
            problem = policy.selection.ambiguous(raw) or policy.selection.unknown(raw)
            if problem:
                raise UsageError(problem)
        judged = policy.judge(raw)
        failing = failed_checks(judged)
        left = None if deadline is None else deadline - time.monotonic()
        if (result.status == "ok" and not failing) or left is None or left <= 0:
            return result, judged, rounds
        pause = min(next(delays), left)
        named = ", ".join(f"{c.get('connector')}/{c.get('name')}" for c in failing)
        if result.status != "ok":
            named = ", ".join(filter(None, [named, result.message or result.reason]))
        click.echo(
            f"checks: round {rounds}: {len(failing)} failing ({named}); "
            f"again in {_shown(pause)}, {_shown(left)} of {_shown(policy.wait or 0)} left",
            err=True,
        )
        if sleep(pause):
            raise StopRequested("stop")


def _shown(seconds: float) -> str:
    """A duration for the progress line: whole seconds from 1 s on (``4m58s``, not ``4m57s912ms``)."""
    return format_duration(round(seconds) if seconds >= 1 else round(seconds, 1))


def checks_table(checks: Sequence[dict[str, Any]], connectors: dict[str, Any], *, verbose: bool) -> str:
    """The table of judged ``checks``: a row per check, one per connector without any shown or
    whose operation failed; ``--verbose`` adds ID, TAGS and SEVERITY, and a REMEDY column shows
    when a check that did not pass has one."""
    remedies = any(c.get("remedy") and c.get("outcome") in ("failed", "warning") for c in checks)
    headers = ["CONNECTOR", "CHECK", *(["ID", "TAGS", "SEVERITY"] if verbose else []), "RESULT", "MESSAGE"]
    headers += ["REMEDY"] if remedies else []
    blanks = 3 if verbose else 0

    def row(connector: Any, check: dict[str, Any] | None, result: StyledCell, message: Any) -> list[Any]:
        cells: list[Any] = [connector, check.get("name") if check else "-"]
        if verbose:
            if check:
                cells += [check.get("id"), ",".join(check.get("tags") or ()) or None, check.get("severity")]
            else:
                cells += [None] * blanks
        cells += [result, message]
        if remedies:
            shown = check and check.get("outcome") in ("failed", "warning")
            cells.append(check.get("remedy") if shown and check else None)
        return cells

    rows = []
    for name, part in connectors.items():
        mine = [c for c in checks if c.get("connector") == name]
        if part.get("status") != "ok" and part.get("reason") != CHECK_FAILED:
            rows.append(row(name, None, _outcome_word("failed"), part.get("message")))
        elif not mine:
            rows.append(row(name, None, _outcome_word("passed"), "no checks"))
        rows += [row(name, c, _outcome_word(c.get("outcome")), c.get("message")) for c in mine]
    rows += [
        row(c.get("connector"), c, _outcome_word(c.get("outcome")), c.get("message"))
        for c in checks
        if c.get("connector") not in connectors
    ]
    return styled_table(headers, rows)


def _outcome_word(outcome: Any) -> StyledCell:
    if outcome == "passed":
        return StyledCell("ok", fg="green")
    if outcome == "warning":
        return StyledCell("warning", fg="yellow")
    if outcome == "skipped":
        return StyledCell("skipped", dim=True)
    return StyledCell("FAILED", fg="red", bold=True)


# ----- the options -------------------------------------------------------------------------------


def _duration_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds <= 0:
        raise click.BadParameter("must be more than 0")
    return seconds


def _delay_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | str | None:
    if value is None or value == EXPO:
        return value
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(f"{exc} (or {EXPO!r})") from None
    if seconds < MIN_DELAY:
        raise click.BadParameter(f"must be at least {format_duration(MIN_DELAY)}")
    return seconds


def policy_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--wait``, ``--delay`` and ``--halt-on``: parameters ``wait``, ``delay`` (seconds or
    ``EXPO``) and ``halt_on``, each None when not given (the ``checks`` section's value counts)."""
    for option in reversed(
        [
            click.option(
                "--wait",
                "-w",
                callback=_duration_option,
                metavar="DURATION",
                show_default="checks.wait, else one round",
                help="Re-run the checks until all pass or DURATION (e.g. 5m) has passed.",
            ),
            click.option(
                "--delay",
                default=None,
                show_default=f"checks.delay, else {EXPO}",
                callback=_delay_option,
                metavar="DURATION|expo",
                help=(
                    "The pause between rounds of --wait; expo: "
                    f"{format_duration(EXPO_FIRST_DELAY)} doubling up to {format_duration(MAX_EXPO_DELAY)}."
                ),
            ),
            click.option(
                "--halt-on",
                type=click.Choice(HALT_ON_LEVELS),
                default=None,
                show_default=f"checks.halt_on, else {DEFAULT_HALT_ON}",
                help=(
                    "A connector's failed check this severe (or more) skips its later checks "
                    "(failure = common; warning: any failure)."
                ),
            ),
        ]
    ):
        command = option(command)
    return command
