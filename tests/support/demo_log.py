"""Reading a demo's console output back: its step lines and its closing summary, so tests can hold
the summary to what the step log shows (the same settings measured, confirmed, cancelled)."""

from __future__ import annotations

import re
from dataclasses import dataclass

STEP = re.compile(r"^step\s+(?P<n>\d+): (?P<body>.*)\[(?P<mark>[\w-]+)\]$", re.MULTILINE)
CONFIRMING = re.compile(r"\[confirming step (?P<target>\d+)\]")
RECOMMENDED = re.compile(r"^recommended: step (?P<step>\d+): (?P<settings>.*?)  \(", re.MULTILINE)
SUMMARY = re.compile(
    r"^summary: baseline \(step 0\) -> recommendation \(step (?P<step>\d+)\), (?P<verdict>confirmed|NOT CONFIRMED)(?:: (?P<note>.*))?$",
    re.MULTILINE,
)
OBJECTIVE_ROW = re.compile(
    r"^  (?P<metric>\w+)\s+(?P<before>\S+)\s+(?P<after>\S+)\s+\S+ %\s+objective", re.MULTILINE
)


@dataclass(frozen=True)
class StepLine:
    n: int
    settings: str  # "cpu=1 gc=g1 memory=2 replicas=2"
    confirms: int | None
    mark: str  # feasible, violates, cancelled, failed...


@dataclass(frozen=True)
class DemoLog:
    steps: list[StepLine]
    recommended: int
    confirmed: bool
    note: str
    objective_before: float
    objective_after: float

    def at(self, settings: str) -> list[StepLine]:
        return [s for s in self.steps if s.settings == settings]

    def by_number(self, n: int) -> StepLine:
        return next(s for s in self.steps if s.n == n)


def parse_demo_log(out: str) -> DemoLog:
    steps = []
    for found in STEP.finditer(out):
        body = found["body"]
        confirming = CONFIRMING.search(body)
        steps.append(
            StepLine(
                int(found["n"]),
                body.split("  ")[0].strip(),
                int(confirming["target"]) if confirming else None,
                found["mark"],
            )
        )
    summary = SUMMARY.search(out)
    assert summary, out
    row = OBJECTIVE_ROW.search(out)
    assert row, out
    return DemoLog(
        steps,
        int(summary["step"]),
        summary["verdict"] == "confirmed",
        summary["note"] or "",
        float(row["before"]),
        float(row["after"]),
    )


def assert_summary_matches_the_log(log: DemoLog) -> None:
    """The summary's verdict and note say what the step lines show."""
    assert log.objective_after <= log.objective_before, "the recommendation costs more than the baseline"
    chosen = log.by_number(log.recommended)
    readings = [s for s in log.at(chosen.settings) if s.mark == "feasible"]
    measured_again = [s for s in log.steps if s.confirms == log.recommended]
    counted = re.search(r"(?:(\d+) of \d+|(\d+)) readings?", log.note)
    assert counted, log.note
    assert int(counted[1] or counted[2]) == len(readings), (log.note, readings)
    assert all(s.mark in ("feasible", "cancelled") for s in log.at(chosen.settings)), log.at(chosen.settings)
    if "not measured again" in log.note:
        assert not measured_again, (log.note, measured_again)
    turned_down = re.search(r"(\d+) better-looking settings? measured again did not hold up", log.note)
    if turned_down:
        rejected = {
            s.confirms
            for s in log.steps
            if s.confirms is not None
            and s.confirms != log.recommended
            and s.mark not in ("feasible", "cancelled")
        }
        assert int(turned_down[1]) == len(rejected), (log.note, rejected)
    cancelled_again = re.search(r"(\d+) confirmation steps? cancelled and measured again", log.note)
    if cancelled_again:
        cancelled = [s for s in log.steps if s.confirms is not None and s.mark == "cancelled"]
        assert int(cancelled_again[1]) == len(cancelled), (log.note, cancelled)
