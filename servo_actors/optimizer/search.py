"""``SearchDriver``: the embedded optimizer's plan, run as a search over the described settings.

The command sequence (driver.py says who calls what)::

    DESCRIBE -> MEASURE (baseline, step 0) -> [ADJUST -> MEASURE] x plan.steps
             -> [ADJUST -> MEASURE] x (confirmation) -> SLEEP (forever)

Step 0 measures the described values as they are. Each later step asks ``strategy.propose`` for
settings (on the described grid, enums from their values, pinned settings never sent), ADJUSTs
them and MEASUREs with the plan's control. The proposal for step ``n`` uses an RNG seeded with
``(plan.seed, n)``, so a run is reproducible and a resumed run proposes what the first would have.

What a step records:

- ``settings``: what the ADJUST result says is in force (else what was asked for).
- ``metrics``: one number per metric. A metric given as time series is reduced to the mean of
  every point of every series (series are instances or label sets of the same quantity, so all
  points weigh the same); a single reading ``{"value": v}`` is taken as it is. Points that are
  not finite numbers are ignored; a metric with no usable point is absent.
- ``status``: the servo's status (``ok``, ``failed``, ``rejected``, ``aborted``, ``cancelled``),
  ``failed`` with reason ``lost`` when no result came after ``COMMAND_ATTEMPTS`` issues.
- ``feasible``: status ``ok`` and every constraint met; a constraint on a missing metric is not met.
- ``objective``: the objective metric's value (None when missing).

The recommendation (``best``): after the search steps, the best-looking settings are measured
again (``plan.confirm``, confirm.py) as *confirmation steps* (``confirms``: the first step at those
settings). The recommendation is the best point (all steps at one set of settings) whose readings
meet every constraint with a margin of ``confirm.sigmas`` standard errors; until one does, the best
step not rejected, labelled ``confirmed: false``. ``/admin/state`` shows each constraint's mean
value, its standard error and the number of readings behind it.

When things go wrong the search goes on:

- A failed, rejected or aborted ADJUST or MEASURE ends its step with that status (the strategy
  treats those settings as infeasible) and the next step starts. A failed ADJUST skips its MEASURE.
- A cancelled step (someone pressed Abort) is recorded as ``cancelled`` and skipped, not retried:
  retrying would undo the Abort. The strategy takes it as "tried, no information".
- A command whose result never comes (the servo polled WHATS_NEXT again: it restarted, or the
  server answered ``unexpected-event``/``invalid``) is issued again, up to ``COMMAND_ATTEMPTS``.
- DESCRIBE that fails ``COMMAND_ATTEMPTS`` times ends the plan: phase ``failed``, then SLEEP.

Persistence: with a ``state_file``, every result rewrites it atomically (temporary file, fsync,
rename) with the steps and the best so far. A new driver on the same file resumes: it DESCRIBEs
(the servo may be new), skips the baseline if step 0 is recorded and goes on from the last step.
Feasibility, objective and best are recomputed from the stored metrics with the current plan, so
a changed objective or constraint applies to the old steps too. A state file that cannot be read
gives a ConfigError naming it.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from servo_actors.optimizer.confirm import (
    evidence,
    next_to_confirm,
    points,
    recommend,
    rejected_steps,
    verdict,
)
from servo_actors.optimizer.plan import Objective, Plan, parse_plan, plan_summary
from servo_actors.optimizer.steps import (
    STATE_VERSION,
    STATUSES,
    StepRecord,
    assess,
    finite,
    load_steps,
    reduce_metrics,
    write_atomically,
)
from servo_actors.optimizer.strategy import (
    SearchSpace,
    Settings,
    StrategyOptions,
    Trial,
    constraint_margin,
    propose,
    replay,
)
from servo_actors.vocabulary import ADJUST, DESCRIBE, MEASURE, RESULT_EVENT, SLEEP

__all__ = [
    "COMMAND_ATTEMPTS",
    "SearchDriver",
]

log = logging.getLogger(__name__)

# A command is issued at most this many times when its result never comes (and DESCRIBE when it fails).
COMMAND_ATTEMPTS = 3
_RESULT_EVENTS = RESULT_EVENT


def _trial(objective: Objective, record: StepRecord) -> Trial:
    judged = assess(objective, record)
    score = None
    if judged.objective is not None:
        score = judged.objective if objective.sense == "minimize" else -judged.objective
    # Per constraint, how far from its bound: the strategy models each one (inf when unknown).
    margins = tuple(
        constraint_margin(record.metrics.get(c.metric), c.op, c.bound) if record.status == "ok" else math.inf
        for c in objective.constraints
    )
    return Trial(
        record.settings, score, judged.violation, informative=record.status != "cancelled", margins=margins
    )


@dataclass
class _InFlight:
    """The command handed out and not yet answered."""

    kind: Literal["describe", "baseline", "adjust", "measure"]
    n: int
    command: dict[str, Any]
    settings: Settings | None = None
    attempts: int = 1
    confirms: int | None = None
    cancelled: str | None = None
    progress: float | None = None
    message: str | None = None

    def uid(self) -> str | None:
        return self.command.get("cmd_uid")


class SearchDriver:
    """A ``Driver`` (driver.py) that searches the described settings for the plan's objective.

    >>> driver = SearchDriver.from_plan({"app": "example.com/web", "steps": 5,
    ...                                  "objective": {"minimize": "cost"}})
    >>> driver.next_command()["cmd"]
    'DESCRIBE'
    """

    def __init__(
        self,
        plan: Plan,
        state_file: Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan = plan
        self.state_file = Path(state_file) if state_file is not None else None
        self._clock = clock
        self._options = StrategyOptions(initial_samples=plan.search.initial_samples)
        self._phase = "describe"
        self._message: str | None = None
        self._steps: list[StepRecord] = []
        self._space: SearchSpace | None = None
        self._described_metrics: list[str] = []
        self._inflight: _InFlight | None = None
        self._pending_measure: tuple[int, Settings, int | None] | None = None
        self._describe_attempts = 0
        self._persist_error: str | None = None
        if self.state_file is not None:
            self._steps = load_steps(self.state_file, plan.app)

    @classmethod
    def from_plan(
        cls, plan: Mapping[str, Any] | Plan, state_file: Path | None = None, *, source: str = "plan"
    ) -> SearchDriver:
        """A driver for ``plan`` (a plan file's mapping, or a ``Plan``).

        ConfigError on a bad plan (naming ``source`` and the key) or an unusable state file.
        """
        return cls(parse_plan(dict(plan) if isinstance(plan, Mapping) else plan, source=source), state_file)

    # -- Driver protocol ------------------------------------------------------------------------

    def next_command(self) -> dict[str, Any]:
        if self._inflight is not None:
            self._result_never_came(self._inflight)
            if self._inflight is not None:
                return self._inflight.command
        return self._issue()

    def progress_reply(self, command: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any] | None:
        inflight = self._matching(command)
        if inflight is not None:
            if finite(progress.get("progress")):
                inflight.progress = float(progress["progress"])
            if isinstance(progress.get("message"), str):
                inflight.message = progress["message"]
        return None

    def on_result(self, command: dict[str, Any], event: str, result: dict[str, Any]) -> dict[str, Any] | None:
        inflight = self._matching(command)
        if inflight is None or event != _RESULT_EVENTS.get(str(command.get("cmd"))):
            log.info("ignoring %s for %s: not the command in flight", event, command.get("cmd_uid"))
            return None
        status = result.get("status")
        reason, message = _text(result.get("reason")), _text(result.get("message"))
        if status not in STATUSES:
            status, reason, message = (
                "failed",
                "bad-result",
                f"the result's status {status!r} is not one of {STATUSES}",
            )
        if inflight.cancelled is not None and status == "ok":
            # Abort was pressed as the result went out: the command counts as cancelled (protocol.md).
            status, reason = "cancelled", inflight.cancelled
        if inflight.kind == "describe":
            self._described(inflight, status, reason, message, result.get("descriptor"))
        elif inflight.kind == "adjust" and status == "ok":
            self._inflight = None
            applied = _applied(inflight.settings or {}, result.get("state"))
            self._pending_measure = (inflight.n, applied, inflight.confirms)
            self._persist()
        else:
            metrics = reduce_metrics(result.get("metrics")) if inflight.kind != "adjust" else {}
            self._finish(inflight, status, reason, message, metrics)
        return None

    def on_cancelled(self, command: dict[str, Any], reason: str) -> None:
        inflight = self._matching(command)
        if inflight is not None:
            inflight.cancelled = reason or "cancelled"

    def state(self) -> dict[str, Any]:
        status = replay([_trial(self.plan.objective, r) for r in self._steps], self._options)
        return {
            "phase": self._phase,
            "message": self._message,
            "plan": plan_summary(self.plan),
            "current": self._current_json(),
            "steps": self._steps_json(),
            "best": self._best_json(),
            "confirmation": self._confirmation_json(),
            "search": {"radius": status.radius, "exploring": status.exploring},
            "space": self._space_json(),
            "state_file": str(self.state_file) if self.state_file else None,
            "persist_error": self._persist_error,
        }

    # -- what the search knows ------------------------------------------------------------------

    @property
    def phase(self) -> str:
        """``describe``, ``baseline``, ``search``, ``confirm``, ``done`` or ``failed``."""
        return self._phase

    @property
    def steps(self) -> list[StepRecord]:
        return list(self._steps)

    def best(self) -> StepRecord | None:
        """The first step at the recommended settings (confirmed or not: ``state()`` says), or None."""
        chosen = recommend(self.plan.objective, self._steps, self.plan.confirm)
        if chosen is None:
            return None
        return next(record for record in self._steps if record.n == chosen.point.first)

    # -- issuing commands -----------------------------------------------------------------------

    def _issue(self) -> dict[str, Any]:
        if self._phase == "describe":
            if self._describe_attempts >= COMMAND_ATTEMPTS:
                self._phase = "failed"
                self._message = f"DESCRIBE failed {COMMAND_ATTEMPTS} times: {self._message or 'no result'}"
                return self._sleep()
            self._describe_attempts += 1
            return self._send("describe", 0, {"cmd": DESCRIBE, "param": {}})
        if self._phase == "baseline":
            assert self._space is not None
            return self._send("baseline", 0, self._measure_command(), self._space.current())
        if self._pending_measure is not None and self._phase in ("search", "confirm"):
            n, settings, confirms = self._pending_measure
            self._pending_measure = None
            return self._send("measure", n, self._measure_command(), settings, confirms)
        if self._phase == "search":
            n = self._steps[-1].n + 1 if self._steps else 1
            searched = sum(1 for record in self._steps if record.n > 0 and record.confirms is None)
            if searched < self.plan.steps:
                settings = self._propose(n)
                return self._send("adjust", n, self._adjust_command(settings), settings)
            self._phase = "confirm"
        if self._phase == "confirm":
            point = next_to_confirm(self.plan.objective, self._steps, self.plan.confirm)
            if point is None:
                self._phase = "done"
                return self._sleep()
            n = self._steps[-1].n + 1
            assert self._space is not None
            settings = self._space.snap(point.settings)
            return self._send("adjust", n, self._adjust_command(settings), settings, point.first)
        return self._sleep()

    def _send(
        self,
        kind: Any,
        n: int,
        command: dict[str, Any],
        settings: Settings | None = None,
        confirms: int | None = None,
    ) -> dict[str, Any]:
        self._inflight = _InFlight(kind, n, command, settings, confirms=confirms)
        return command

    def _sleep(self) -> dict[str, Any]:
        reason = self._message if self._phase == "failed" else "optimization finished"
        return {"cmd": SLEEP, "param": {"duration": self.plan.sleep, "data": {"reason": reason}}}

    def _propose(self, n: int) -> Settings:
        assert self._space is not None
        history = [_trial(self.plan.objective, record) for record in self._steps]
        rng = random.Random(f"{self.plan.seed}/{n}")
        return propose(self._space, history, rng, self._options)

    def _measure_command(self) -> dict[str, Any]:
        return {
            "cmd": MEASURE,
            "param": {"metrics": self._metrics_to_measure(), "control": self.plan.measure.model_dump()},
        }

    def _adjust_command(self, settings: Settings) -> dict[str, Any]:
        assert self._space is not None
        components: dict[str, Any] = {}
        for p in self._space.free:  # pinned settings are never sent
            components.setdefault(p.component, {"settings": {}})["settings"][p.name] = {
                "value": settings[p.component][p.name]
            }
        return {
            "cmd": ADJUST,
            "param": {
                "state": {"application": {"components": components}},
                "control": {"settlement": self.plan.settlement},
            },
        }

    def _metrics_to_measure(self) -> list[str]:
        if self.plan.metrics is not None:
            return list(self.plan.metrics)
        objective = self.plan.objective
        needed = [objective.metric, *(c.metric for c in objective.constraints)]
        return sorted(set(self._described_metrics) | set(needed))

    # -- results --------------------------------------------------------------------------------

    def _matching(self, command: Mapping[str, Any]) -> _InFlight | None:
        """The command in flight if ``command`` is it (same cmd, and same cmd_uid once known)."""
        inflight = self._inflight
        if inflight is None or command.get("cmd") != inflight.command.get("cmd"):
            return None
        uid = command.get("cmd_uid")
        if inflight.uid() is None:
            if uid is not None:
                inflight.command["cmd_uid"] = uid
            return inflight
        return inflight if uid == inflight.uid() else None

    def _result_never_came(self, inflight: _InFlight) -> None:
        """The servo asked for the next command while ``inflight`` was unanswered."""
        if inflight.cancelled is not None:
            self._finish(inflight, "cancelled", inflight.cancelled, "cancelled; no result was posted", {})
        elif inflight.kind == "describe":
            self._inflight = None  # _issue counts DESCRIBE attempts
            self._message = "no DESCRIPTION came"
        elif inflight.attempts < COMMAND_ATTEMPTS:
            command = {key: value for key, value in inflight.command.items() if key != "cmd_uid"}
            self._inflight = _InFlight(
                inflight.kind,
                inflight.n,
                command,
                inflight.settings,
                inflight.attempts + 1,
                inflight.confirms,
            )
        else:
            message = f"no result after {COMMAND_ATTEMPTS} attempts"
            self._finish(inflight, "failed", "lost", message, {})

    def _described(
        self, inflight: _InFlight, status: str, reason: str | None, message: str | None, descriptor: object
    ) -> None:
        self._inflight = None
        if status != "ok":
            self._message = f"DESCRIBE {status} ({reason}): {message or 'no message'}"
            return
        try:
            # An optimizer-side reply is untrusted JSON: the except below names a wrong shape.
            application = descriptor["application"]  # type: ignore[index]  # any shape, caught below
            space = SearchSpace.from_components(application["components"])
            metrics = descriptor.get("measurement", {}).get("metrics", {})  # type: ignore[attr-defined]  # as above
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            self._message = f"DESCRIPTION unusable: {exc}"
            return
        self._space = space
        self._described_metrics = (
            [str(name) for name in metrics] if isinstance(metrics, Mapping | list) else []
        )
        self._message = None if space.free else "nothing to search: no free settings were described"
        has_baseline = any(record.n == 0 for record in self._steps)
        if not has_baseline:
            self._phase = "baseline"
        else:
            self._phase = "search" if space.free else "done"

    def _finish(
        self,
        inflight: _InFlight,
        status: str,
        reason: str | None,
        message: str | None,
        metrics: dict[str, float],
    ) -> None:
        """Record the step ``inflight`` belonged to, persist, and move on."""
        self._inflight = None
        self._steps.append(
            StepRecord(
                n=inflight.n,
                settings=inflight.settings or {},
                status=status,
                reason=reason,
                message=message,
                metrics=metrics,
                finished_at=self._clock(),
                confirms=inflight.confirms,
            )
        )
        if inflight.kind == "baseline":
            self._phase = "search" if self._space is not None and self._space.free else "done"
        self._persist()

    # -- views ----------------------------------------------------------------------------------

    def _step_json(self, record: StepRecord, rejected: set[int] | None = None) -> dict[str, Any]:
        judged = assess(self.plan.objective, record)
        return {
            "n": record.n,
            "settings": record.settings,
            "metrics": record.metrics,
            "status": record.status,
            "reason": record.reason,
            "message": record.message,
            "feasible": judged.feasible,
            "objective": judged.objective,
            "constraints": judged.constraints,
            "finished_at": record.finished_at,
            "confirms": record.confirms,
            "rejected": record.n in rejected if rejected is not None else False,
        }

    def _steps_json(self) -> list[dict[str, Any]]:
        rejected = rejected_steps(self.plan.objective, self._steps, self.plan.confirm)
        return [self._step_json(record, rejected) for record in self._steps]

    def _best_json(self) -> dict[str, Any] | None:
        chosen = recommend(self.plan.objective, self._steps, self.plan.confirm)
        if chosen is None:
            return None
        point = chosen.point
        names = sorted({name for record in point.readings for name in record.metrics})
        metrics = {name: value for name in names if (value := point.mean(name)) is not None}
        if self.plan.confirm.repeats == 0:
            note = "confirmation is off (confirm.repeats: 0): a single reading"
        elif chosen.confirmed:
            sigmas = f"{self.plan.confirm.sigmas:g}"
            note = f"{len(point.readings)} readings, every constraint held by {sigmas} standard errors"
        else:
            needed = 1 + self.plan.confirm.repeats
            # The label says "not confirmed" (console, demo): the note says why, without repeating it.
            note = f"{len(point.readings)} of {needed} readings"
            if not point.confirmations and self._phase in ("done", "failed"):
                examined = sum(1 for p in points(self._steps) if p.confirmations)
                note += f" (the {examined} settings measured again before it did not hold up)"
            elif not point.confirmations:
                note += " (not measured again yet)"
            elif verdict(self.plan.objective, point, self.plan.confirm) == "unconfirmed":
                note += " (confirmation was cancelled)"
        return {
            "step": point.first,
            "settings": point.settings,
            "metrics": metrics,
            "objective": point.mean(self.plan.objective.metric),
            "uncertainty": {name: point.standard_error(name) for name in names},
            "readings": len(point.readings),
            "steps": [record.n for record in point.readings],
            "confirmed": chosen.confirmed,
            "note": note,
            "constraints": [e.as_json() for e in chosen.evidence],
        }

    def _confirmation_json(self) -> dict[str, Any]:
        spec = self.plan.confirm
        examined = []
        # In the order they were examined.
        for point in sorted(
            (p for p in points(self._steps) if p.confirmations), key=lambda p: p.confirmations[0].n
        ):
            if point.confirmations:
                judged = evidence(self.plan.objective, point, spec.sigmas)
                examined.append(
                    {
                        "step": point.first,
                        "settings": point.settings,
                        "readings": len(point.readings),
                        "verdict": verdict(self.plan.objective, point, spec),
                        "constraints": [e.as_json() for e in judged],
                    }
                )
        return {**spec.model_dump(), "examined": examined}

    def _current_json(self) -> dict[str, Any] | None:
        inflight = self._inflight
        if inflight is None:
            return None
        return {
            "cmd": inflight.command.get("cmd"),
            "cmd_uid": inflight.uid(),
            "step": inflight.n,
            "kind": inflight.kind,
            "settings": inflight.settings,
            "attempt": inflight.attempts,
            "progress": inflight.progress,
            "message": inflight.message,
            "cancelled": inflight.cancelled,
        }

    def _space_json(self) -> list[dict[str, Any]]:
        if self._space is None:
            return []
        return [
            {
                "setting": p.label,
                "type": p.kind,
                "min": p.minimum if p.kind == "range" else None,
                "max": p.maximum if p.kind == "range" else None,
                "step": p.step if p.kind == "range" else None,
                "values": list(p.values) if p.kind == "enum" else None,
                "pinned": p.pinned,
                "value": p.value,
            }
            for p in self._space.parameters
        ]

    # -- persistence ----------------------------------------------------------------------------

    def _persist(self) -> None:
        if self.state_file is None:
            return
        document = {
            "version": STATE_VERSION,
            "app": self.plan.app,
            "plan": plan_summary(self.plan),
            "steps": self._steps_json(),
            "best": self._best_json(),
        }
        try:
            write_atomically(self.state_file, json.dumps(document, indent=1, sort_keys=True))
            self._persist_error = None
        except OSError as exc:
            # The search goes on in memory; the console and the log say the file is stale.
            self._persist_error = f"{self.state_file}: cannot write: {exc.strerror or exc}"
            log.error("%s", self._persist_error)


def _applied(requested: Settings, state: object) -> Settings:
    """The settings in force: the ADJUSTMENT's ``state`` where it says, what was asked for elsewhere."""
    applied = {component: dict(values) for component, values in requested.items()}
    try:
        components = state["application"]["components"]  # type: ignore[index]  # untrusted JSON: a wrong shape is caught below
        for component, body in components.items():
            for name, setting in body["settings"].items():
                if component in applied and name in applied[component] and "value" in setting:
                    applied[component][name] = setting["value"]
    except (TypeError, KeyError, AttributeError):
        pass  # a partial or odd state: keep what was asked for
    return applied


def _text(value: object) -> str | None:
    return None if value is None else str(value)
