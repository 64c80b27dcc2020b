"""``SearchDriver``: the embedded optimizer's plan, run as a search over the described settings.

The command sequence (driver.py says who calls what)::

    DESCRIBE -> MEASURE (baseline, step 0) -> [ADJUST -> MEASURE] x plan.steps
             -> [ADJUST -> MEASURE] x (confirmation) -> SLEEP (forever)

Step 0 measures the described values as they are. Each later step asks ``strategy.propose`` for
settings (on the described grid, enums from their values, pinned settings never sent), ADJUSTs
them and MEASUREs with the plan's control. The proposal for step ``n`` uses an RNG seeded with
``(plan.seed, n)``, so a run is reproducible and a resumed run proposes what the first would have.

What a step records (its settings in force, one number per metric, the servo's status, whether
it is feasible, its objective): steps.py; how ``/admin/state`` and the state file show the steps,
the recommendation and the command in flight: search_views.py.

The recommendation (``best``): after the search steps, the best-looking settings are measured
again (``plan.confirm``, confirm.py) as *confirmation steps* (``confirms``: the first step at those
settings). The recommendation is the best point whose readings meet every constraint with a
margin of ``confirm.sigmas`` standard errors (search_views.py says what ``/admin/state`` shows).

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
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from servo_actors.optimizer.confirm import next_to_confirm, recommend
from servo_actors.optimizer.plan import Plan, parse_plan, plan_summary
from servo_actors.optimizer.search_views import (
    InFlight,
    baseline_json,
    best_json,
    confirmation_json,
    current_json,
    space_json,
    state_document,
    steps_json,
)
from servo_actors.optimizer.space import SearchSpace, Settings
from servo_actors.optimizer.steps import (
    STATUSES,
    StepRecord,
    applied_settings,
    finite,
    load_steps,
    reduce_metrics,
    step_trial,
    write_atomically,
)
from servo_actors.optimizer.strategy import propose
from servo_actors.optimizer.trials import StrategyOptions, replay
from servo_actors.vocabulary import ADJUST, DESCRIBE, MEASURE, RESULT_EVENT, SLEEP

__all__ = [
    "COMMAND_ATTEMPTS",
    "SearchDriver",
]

log = logging.getLogger(__name__)

# A command is issued at most this many times when its result never comes (and DESCRIBE when it fails).
COMMAND_ATTEMPTS = 3
_RESULT_EVENTS = RESULT_EVENT


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
        self._inflight: InFlight | None = None
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
            # Abort was pressed as the result went out: the command counts as cancelled (docs/protocol.md).
            status, reason = "cancelled", inflight.cancelled
        if inflight.kind == "describe":
            self._described(inflight, status, reason, message, result.get("descriptor"))
        elif inflight.kind == "adjust" and status == "ok":
            self._inflight = None
            applied = applied_settings(inflight.settings or {}, result.get("state"))
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
        status = replay([step_trial(self.plan.objective, r) for r in self._steps], self._options)
        return {
            "phase": self._phase,
            "message": self._message,
            "plan": plan_summary(self.plan),
            "current": current_json(self._inflight),
            "steps": steps_json(self.plan, self._steps),
            "best": best_json(self.plan, self._steps, self._phase),
            "baseline": baseline_json(self.plan, self._steps),
            "confirmation": confirmation_json(self.plan, self._steps),
            "search": {"radius": status.radius, "exploring": status.exploring},
            "space": space_json(self._space),
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
        self._inflight = InFlight(kind, n, command, settings, confirms=confirms)
        return command

    def _sleep(self) -> dict[str, Any]:
        reason = self._message if self._phase == "failed" else "optimization finished"
        return {"cmd": SLEEP, "param": {"duration": self.plan.sleep, "data": {"reason": reason}}}

    def _propose(self, n: int) -> Settings:
        assert self._space is not None
        history = [step_trial(self.plan.objective, record) for record in self._steps]
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

    def _matching(self, command: Mapping[str, Any]) -> InFlight | None:
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

    def _result_never_came(self, inflight: InFlight) -> None:
        """The servo asked for the next command while ``inflight`` was unanswered."""
        if inflight.cancelled is not None:
            self._finish(inflight, "cancelled", inflight.cancelled, "cancelled; no result was posted", {})
        elif inflight.kind == "describe":
            self._inflight = None  # _issue counts DESCRIBE attempts
            self._message = "no DESCRIPTION came"
        elif inflight.attempts < COMMAND_ATTEMPTS:
            command = {key: value for key, value in inflight.command.items() if key != "cmd_uid"}
            self._inflight = InFlight(
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
        self, inflight: InFlight, status: str, reason: str | None, message: str | None, descriptor: object
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
        inflight: InFlight,
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

    # -- persistence ----------------------------------------------------------------------------

    def _persist(self) -> None:
        if self.state_file is None:
            return
        document = state_document(self.plan, self._steps, self._phase)
        try:
            write_atomically(self.state_file, json.dumps(document, indent=1, sort_keys=True))
            self._persist_error = None
        except OSError as exc:
            # The search goes on in memory; the console and the log say the file is stale.
            self._persist_error = f"{self.state_file}: cannot write: {exc.strerror or exc}"
            log.error("%s", self._persist_error)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
