"""The demo's main flow: the servo against the embedded optimizer, each step printed as it is recorded.

The optimizer runs as its own process (optimizer_process.py) on a free loopback port, so the servo
talks to it over real HTTP exactly as it would to a remote one; the servo runs here, its
connectors in supervised actor processes. Each step is printed as the optimizer records it; at the
end, the recommendation against the baseline (summary.py).

``run_demo`` optimizes the synthetic application by default; a ``DemoSetup`` (setup.py) gives it
another plan and another servo (scripts/kube-demo: a Deployment on the local Kubernetes cluster),
run by the same loop, with the same Abort presses and the same closing summary.

``abort_every=N`` presses Abort on every Nth MEASURE or ADJUST, to show crash-only recovery live:
once the optimizer shows that command in flight, the demo asks it to cancel that command (by its
``cmd_uid``: a press that comes too late never lands on the next one), and prints the command the
optimizer actually cancelled, from its own record (``/admin/state``'s ``cancels``). It looks and
presses through the admin API (protocol/admin_client.py), each thread with its own client.

What the demo says goes through ``echo`` (one line each) and, when given, ``status`` (the text
of a progress line, kept up to date every ``STATUS_INTERVAL``; ``""`` clears it). SIGTERM/SIGINT
(signals.py) end it at any moment: the servo says GOODBYE, the optimizer process is stopped, and
the exit code is 128 + the signal.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from servo_actors import signals
from servo_actors.config import ServoConfig
from servo_actors.demo.errors import DemoError
from servo_actors.demo.optimizer_process import running_optimizer
from servo_actors.demo.setup import DemoOptions, DemoSetup, synthetic_setup
from servo_actors.demo.summary import described_settings, settings_text, step_line, summary_lines
from servo_actors.protocol.admin_client import OptimizerAdminClient, OptimizerAdminError
from servo_actors.readable import number_text
from servo_actors.runner import Runner
from servo_actors.vocabulary import ADJUST, DESCRIBE, MEASURE, SLEEP

__all__ = [
    "ABORT_LOOK_INTERVAL",
    "ABORT_WAIT",
    "PRESS_JOIN_TIMEOUT",
    "STATE_TIMEOUT",
    "STATUS_INTERVAL",
    "STATUS_STOP_TIMEOUT",
    "run_demo",
]

STATE_TIMEOUT = 5.0
"""Connect/read timeout of the demo's own GET /admin/state and POST /admin/cancel."""
ABORT_WAIT = 5.0
"""Longest the demo waits for the optimizer to show a command in flight before it presses Abort."""
ABORT_LOOK_INTERVAL = 0.02
"""Between two looks at the optimizer while waiting to press Abort."""
PRESS_JOIN_TIMEOUT = STATE_TIMEOUT * 2
"""Longest the demo waits for a press of Abort to be answered before it reports what was cancelled."""
STATUS_INTERVAL = 0.5
"""How often the progress line is brought up to date (from the optimizer's state)."""
STATUS_STOP_TIMEOUT = STATE_TIMEOUT + 1.0
"""Longest the demo waits for the progress line's thread to end."""


def run_demo(
    options: DemoOptions,
    echo: Callable[[str], None] = print,
    *,
    status: Callable[[str], None] | None = None,
    setup: DemoSetup | None = None,
    finished: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Run the demo; the exit code: 0 when the plan finished with a recommendation, 1 when it did
    not, 128 + the signal when SIGTERM/SIGINT stopped it. ``finished`` is given the optimizer's
    last record of the plan (``/admin/state``'s ``driver``: its steps and ``best``) when the plan
    ran to its end, before the optimizer stops."""
    setup = setup or synthetic_setup(options)
    with signals.watching() as watcher:
        if watcher.stop.is_set():  # during start-up: nothing is started only to be stopped
            echo(f"interrupted by {watcher.stop_signal}: nothing was started")
            return 128 + (watcher.stop_signum or 0)
        with tempfile.TemporaryDirectory(prefix="servo-actors-demo-") as tmp:
            plan_path = Path(tmp, "plan.yaml")
            plan_path.write_text(yaml.safe_dump(setup.plan))
            code: int | None = None  # None: a stop signal ended it
            with running_optimizer(plan_path, Path(tmp, "state.json"), watcher) as url:
                if url is not None:
                    echo(
                        f"embedded optimizer: {url}  (console: {url}/  "
                        f"abort: servo-actors optimizer cancel --url {url})"
                    )
                    demo = _Demo(url, setup.config(url), options, echo, status, watcher)
                    code = demo.run()
                    _give_back_stop(watcher)
                    if demo.final is not None and finished is not None:
                        finished(demo.final)
        if code is None:
            echo(f"interrupted by {watcher.stop_signal}: the servo and the embedded optimizer are stopped")
            return 128 + (watcher.stop_signum or 0)
        return code


def _give_back_stop(watcher: signals.SignalWatcher) -> None:
    """The demo ends its runner with the watcher's stop event (``Runner.request_stop``); unless a
    signal set it, clear it, so a caller that goes on after the demo is not taken as stopped."""
    if watcher.stop_signal is None:
        watcher.stop.clear()
        watcher.drain_wake()
        if watcher.stop_signal is not None:  # a signal came between the look and the clear
            watcher.stop.set()


@dataclass
class _Press:
    """One press of Abort: on which command, and what the optimizer answered."""

    cmd: str
    cmd_uid: str
    step: int | None = None
    thread: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)


class _Demo:
    """One run of the servo against the optimizer at ``url``, printing what happens."""

    def __init__(
        self,
        url: str,
        config: ServoConfig,
        options: DemoOptions,
        echo: Callable[[str], None],
        status: Callable[[str], None] | None,
        watcher: signals.SignalWatcher,
    ) -> None:
        self.url = url
        self.options = options
        self.echo = echo
        self.status = status
        self.watcher = watcher
        # The main thread's admin client; each helper thread has its own.
        self.admin = OptimizerAdminClient(url, timeout=STATE_TIMEOUT)
        self.operations = 0
        self.printed_steps = 0
        self.printed_cancels = 0
        self.presses: dict[str, _Press] = {}
        self.runner = Runner(config, observer=self.observe, signals=watcher)
        self.finished = threading.Event()
        self.final: dict[str, Any] | None = None  # the optimizer's record once the plan ran
        self.began = time.monotonic()
        # The command the progress line shows: (cmd_uid, its line up to the percentage).
        self.shown: tuple[str, str] | None = None

    def run(self) -> int | None:
        """The exit code, or None if a stop signal ended the run (the servo said GOODBYE)."""
        ticker = None
        if self.status is not None:
            ticker = threading.Thread(target=self._keep_status, name="demo-status", daemon=True)
            ticker.start()
        try:
            code = self.runner.run()
        finally:
            self.finished.set()
            if ticker is not None:
                ticker.join(STATUS_STOP_TIMEOUT)
                self.status("")  # type: ignore[misc]
        if self.watcher.stop_signal is not None:
            return None
        if code:
            return code
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
            return (admin or self.admin).state()
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

    # --- the runner's events (main thread) ---------------------------------------------------------

    def observe(self, what: str, detail: dict[str, Any]) -> None:
        if what == "command":
            cmd = detail["cmd"]
            if cmd == SLEEP:
                self.runner.request_stop("shutdown")  # the plan is over
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
                answer = admin.cancel(reason="demo-abort", cmd_uid=press.cmd_uid)
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
        while time.monotonic() < deadline and not self.watcher.stop.is_set():
            state = self.state(admin)
            current = state.get("current") or {}
            if current.get("cmd_uid") == press.cmd_uid:
                # The driver learns the cmd_uid only from the first post about it: match the command.
                driver_current = state["driver"].get("current") or {}
                if driver_current.get("cmd") == press.cmd:
                    press.step = driver_current.get("step")
                return True
            self.finished.wait(ABORT_LOOK_INTERVAL)
        return False

    # --- the progress line ---------------------------------------------------------------------------

    def _keep_status(self) -> None:
        admin = OptimizerAdminClient(self.url, timeout=STATE_TIMEOUT)
        try:
            while not self.finished.wait(STATUS_INTERVAL):
                try:
                    state = self.state(admin)
                except DemoError:
                    continue  # the next look may do; the lines say what matters
                self.status(self._status_text(state))  # type: ignore[misc]
        finally:
            admin.close()

    def _status_text(self, state: dict[str, Any]) -> str:
        driver = state["driver"]
        elapsed = f"{time.monotonic() - self.began:.0f} s"
        searched = sum(1 for s in driver.get("steps", []) if s.get("n") and s.get("confirms") is None)
        planned = (driver.get("plan") or {}).get("steps")
        where = (
            f"{driver.get('phase')}: {searched} of {planned} search steps" if planned else driver.get("phase")
        )
        current = driver.get("current")
        if not current:
            return f"{where}  {elapsed}"
        progress = current.get("progress")
        shown = f" {progress:.0f} %" if isinstance(progress, int | float) else ""
        label = "baseline" if current.get("kind") == "baseline" else f"step {current.get('step')}"
        uid = (state.get("current") or {}).get("cmd_uid") or ""  # the driver learns it only later
        line = f"{where} | {current.get('cmd')} {uid} ({label})"
        if uid:
            self.shown = (uid, line)
        return f"{line}{shown}  {elapsed}"

    def _show_finished(self, detail: dict[str, Any]) -> None:
        """The command the progress line shows has its result: 100 % (or how it ended), until the
        next look at the optimizer shows the next one."""
        if self.status is None or self.shown is None or self.shown[0] != detail.get("cmd_uid"):
            return
        ended = " 100 % done" if detail.get("status") == "ok" else f" ended {detail.get('status')}"
        self.status(f"{self.shown[1]}{ended}  {time.monotonic() - self.began:.0f} s")
