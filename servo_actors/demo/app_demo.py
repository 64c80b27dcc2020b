"""AppDemo: one application's part of a demo, told of its servo loop's commands and results.

It prints that application's steps and cancels as the optimizer records them, presses Abort on
every ``abort_every``-th MEASURE or ADJUST of its own, ends its loop once the optimizer's plan is
over (the first SLEEP) and closes with that application's recommendation and summary. A demo of
one application has one, speaking plainly; a demo of several has one per application, each line
of which starts with ``prefix`` (``[web-2] ``) so the console says whose step it is.

The optimizer is read and pressed through its admin API (protocol/admin_client.py), ``?app=``
naming the application when it serves several; each thread has its own client. An Abort is
pressed by ``cmd_uid`` once the optimizer shows that command in flight (a press that comes too
late never lands on the next one), and the line that follows names the command the optimizer
actually cancelled, from its own record (``/admin/state``'s ``cancels``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servo_actors.demo.errors import DemoError
from servo_actors.demo.setup import DemoOptions
from servo_actors.demo.summary import described_settings, settings_text, step_line, summary_lines
from servo_actors.protocol.admin_client import OptimizerAdminClient, OptimizerAdminError
from servo_actors.readable import number_text
from servo_actors.vocabulary import ADJUST, DESCRIBE, MEASURE, SLEEP

__all__ = [
    "ABORT_LOOK_INTERVAL",
    "ABORT_WAIT",
    "PRESS_JOIN_TIMEOUT",
    "STATE_TIMEOUT",
    "AppDemo",
]

STATE_TIMEOUT = 5.0
"""Connect/read timeout of the demo's own GET /admin/state and POST /admin/cancel."""
ABORT_WAIT = 5.0
"""Longest the demo waits for the optimizer to show a command in flight before it presses Abort."""
ABORT_LOOK_INTERVAL = 0.02
"""Between two looks at the optimizer while waiting to press Abort."""
PRESS_JOIN_TIMEOUT = STATE_TIMEOUT * 2
"""Longest the demo waits for a press of Abort to be answered before it reports what was cancelled."""


@dataclass
class _Press:
    """One press of Abort: on which command, and what the optimizer answered."""

    cmd: str
    cmd_uid: str
    step: int | None = None
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)


class AppDemo:
    """One application of a demo against the optimizer at ``url`` (module docstring).

    ``app`` is its ORG/APP when the optimizer serves several (None: the only one); ``end_loop``
    ends this application's servo loop (GOODBYE ``shutdown``); ``stopping`` is set when the demo
    as a whole stops (a signal). ``ended`` is set once its loop is ending (the plan is over, or
    the demo calls ``end``): a press of Abort still waiting gives up then.
    """

    def __init__(
        self,
        url: str,
        options: DemoOptions,
        echo: Callable[[str], None],
        *,
        app: str | None = None,
        prefix: str = "",
        end_loop: Callable[[], None],
        stopping: threading.Event,
        status: Callable[[str], None] | None = None,
    ) -> None:
        self.url = url
        self.app = app
        self.options = options
        self.prefix = prefix
        self._echo = echo
        self.status = status
        self.end_loop = end_loop
        self.stopping = stopping
        # The loop thread's admin client; each helper thread has its own.
        self.admin = OptimizerAdminClient(url, timeout=STATE_TIMEOUT)
        self.operations = 0
        self.printed_steps = 0
        self.printed_cancels = 0
        self.presses: dict[str, _Press] = {}
        self.ended = threading.Event()
        self.final: dict[str, Any] | None = None  # the optimizer's record once the plan ran
        self.began = time.monotonic()
        # The command the progress line shows: (cmd_uid, its line up to the percentage).
        self.shown: tuple[str, str] | None = None

    def echo(self, text: str) -> None:
        self._echo(self.prefix + text)

    def end(self) -> None:
        """Its loop has ended (or a stop came): nothing more to press."""
        self.ended.set()

    def close(self) -> None:
        self.admin.close()

    # --- the end -------------------------------------------------------------------------------------

    def report(self) -> int:
        """Once its loop ended normally: the last steps, the recommendation and the summary; 0 when
        the plan finished with a recommendation, else 1."""
        state = self.state()
        self.print_news(state)
        final = self.final = state["driver"]
        self.echo(
            f"finished in {time.monotonic() - self.began:.1f} s: {len(final['steps'])} steps, "
            f"phase {final['phase']}"
        )
        best = final.get("best")
        if not best:
            self.echo("no step met every constraint")
            return 1
        metrics = ", ".join(f"{k}={number_text(v)}" for k, v in sorted(best["metrics"].items()))
        self.echo(f"recommended: step {best['step']}: {settings_text(best['settings'])}  ({metrics})")
        for line in summary_lines(final):
            self.echo(line)
        return 0 if final["phase"] == "done" else 1

    # --- the optimizer's state --------------------------------------------------------------------

    def state(self, admin: OptimizerAdminClient | None = None) -> dict[str, Any]:
        """``GET /admin/state``; DemoError naming the URL when the optimizer does not answer it."""
        try:
            return (admin or self.admin).state(self.app)
        except OptimizerAdminError as exc:
            raise DemoError(f"the embedded optimizer did not answer GET {exc.url}: {exc.cause}") from None

    def print_news(self, state: dict[str, Any]) -> None:
        """The cancels and steps the optimizer recorded since the last look, in that order."""
        cancels = state.get("cancels") or []
        for record in cancels[self.printed_cancels :]:
            self.echo(self._cancel_line(record))
        self.printed_cancels = len(cancels)
        steps = state["driver"]["steps"]
        for step in steps[self.printed_steps :]:
            self.echo(step_line(step))
        self.printed_steps = len(steps)

    def _cancel_line(self, record: dict[str, Any]) -> str:
        press = self.presses.get(record.get("cmd_uid", ""))
        what = f"{record['cmd']} {record['cmd_uid']}"
        if press is not None and press.step is not None:
            what += f" (step {press.step})"
        if record.get("answered_to") == "progress":
            progress = record.get("progress")
            shown = f" ({progress:.0f} %)" if isinstance(progress, int | float) else ""
            when = f"while it ran, answering its progress report{shown}"
        else:
            when = "as its result came in (it had just finished)"
        return f"  ~ the optimizer cancelled {what} {when}: the servo killed its connectors and started them fresh"

    # --- its loop's events (the loop's thread) -------------------------------------------------------

    def observe(self, what: str, detail: dict[str, Any]) -> None:
        if what == "command":
            cmd = detail["cmd"]
            if cmd == SLEEP:  # the plan is over
                self.ended.set()
                self.end_loop()
            elif cmd in (MEASURE, ADJUST):
                self.operations += 1
                every = self.options.abort_every
                if every and self.operations % every == 0:
                    self._press_abort(cmd, detail["cmd_uid"])
        elif what == "cancelled" or (what == "result" and detail["cmd"] in (MEASURE, ADJUST)):
            if what == "result":
                self._show_finished(detail)
            press = self.presses.get(detail["cmd_uid"])
            if press is not None:
                press.done.wait(PRESS_JOIN_TIMEOUT)  # its line first, then what came of it
            self.print_news(self.state())
        elif what == "result" and detail["cmd"] == DESCRIBE:
            self.echo(f"described: {settings_text(described_settings(detail))}")

    # --- Abort ---------------------------------------------------------------------------------------

    def _press_abort(self, cmd: str, cmd_uid: str) -> None:
        press = _Press(cmd, cmd_uid)
        press.thread = threading.Thread(target=self._press, args=(press,), name="demo-abort", daemon=True)
        self.presses[cmd_uid] = press
        press.thread.start()

    def _press(self, press: _Press) -> None:
        """Wait until the optimizer shows ``press``'s command in flight, then ask it to cancel it."""
        admin = OptimizerAdminClient(self.url, timeout=STATE_TIMEOUT)
        try:
            in_flight = self._await_in_flight(admin, press)
            if in_flight:
                answer = admin.cancel(app=self.app, reason="demo-abort", cmd_uid=press.cmd_uid)
                said = answer.get("message", "")
                step = f" (step {press.step})" if press.step is not None else ""
                if answer.get("armed"):
                    self.echo(f"  ! pressed Abort during {press.cmd} {press.cmd_uid}{step}")
                else:
                    self.echo(f"  ! pressed Abort too late for {press.cmd} {press.cmd_uid}{step}: {said}")
            else:
                self.echo(f"  ! no Abort: the optimizer never showed {press.cmd} {press.cmd_uid} in flight")
        except (DemoError, OptimizerAdminError) as exc:
            # The name of what failed, as requests names it (ConnectionError, ReadTimeout...).
            cause = exc.cause if isinstance(exc, OptimizerAdminError) else type(exc).__name__
            self.echo(f"  ! Abort not pressed: the optimizer did not answer ({cause})")
        finally:
            admin.close()
            press.done.set()

    def _await_in_flight(self, admin: OptimizerAdminClient, press: _Press) -> bool:
        deadline = time.monotonic() + ABORT_WAIT
        while time.monotonic() < deadline and not self.stopping.is_set() and not self.ended.is_set():
            state = self.state(admin)
            current = state.get("current") or {}
            if current.get("cmd_uid") == press.cmd_uid:
                # The driver learns the cmd_uid only from the first post about it: match the command.
                driver_current = state["driver"].get("current") or {}
                if driver_current.get("cmd") == press.cmd:
                    press.step = driver_current.get("step")
                return True
            self.ended.wait(ABORT_LOOK_INTERVAL)
        return False

    # --- the progress line ---------------------------------------------------------------------------

    def status_text(self, state: dict[str, Any], *, elapsed: bool = True) -> str:
        """Where this application's plan is and its command in flight, from ``state``."""
        driver = state["driver"]
        took = f"  {time.monotonic() - self.began:.0f} s" if elapsed else ""
        searched = sum(1 for s in driver.get("steps", []) if s.get("n") and s.get("confirms") is None)
        planned = (driver.get("plan") or {}).get("steps")
        where = (
            f"{driver.get('phase')}: {searched} of {planned} search steps" if planned else driver.get("phase")
        )
        current = driver.get("current")
        if not current:
            return f"{where}{took}"
        progress = current.get("progress")
        shown = f" {progress:.0f} %" if isinstance(progress, int | float) else ""
        label = "baseline" if current.get("kind") == "baseline" else f"step {current.get('step')}"
        uid = (state.get("current") or {}).get("cmd_uid") or ""  # the driver learns it only later
        line = f"{where} | {current.get('cmd')} {uid} ({label})"
        if uid:
            self.shown = (uid, line)
        return f"{line}{shown}{took}"

    def _show_finished(self, detail: dict[str, Any]) -> None:
        """The command the progress line shows has its result: 100 % (or how it ended), until the
        next look at the optimizer shows the next one (only where this application has the
        progress line to itself)."""
        if self.status is None or self.shown is None or self.shown[0] != detail.get("cmd_uid"):
            return
        ended = " 100 % done" if detail.get("status") == "ok" else f" ended {detail.get('status')}"
        self.status(f"{self.shown[1]}{ended}  {time.monotonic() - self.began:.0f} s")
