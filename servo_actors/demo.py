"""A complete local optimization: the embedded optimizer plus a servo with a synthetic application.

The optimizer runs as its own process (``servo-actors optimizer serve``) on a free loopback port,
so the servo talks to it over real HTTP exactly as it would to a remote one; the servo runs here,
its synthetic connector in a supervised actor process. Each step is printed as the optimizer
records it; at the end, the recommendation against the baseline.

``run_demo`` optimizes the synthetic application by default; a ``DemoSetup`` gives it another plan
and another servo (scripts/kube-demo: a Deployment on the local Kubernetes cluster), run by the
same loop, with the same Abort presses and the same closing summary.

``abort_every=N`` presses Abort on every Nth MEASURE or ADJUST, to show crash-only recovery live:
once the optimizer shows that command in flight, the demo asks it to cancel that command (by its
``cmd_uid``: a press that comes too late never lands on the next one), and prints the command the
optimizer actually cancelled, from its own record (``/admin/state``'s ``cancels``).

What the demo says goes through ``echo`` (one line each) and, when given, ``status`` (the text
of a progress line, kept up to date every ``STATUS_INTERVAL``; ``""`` clears it). SIGTERM/SIGINT
(signals.py) end it at any moment: the servo says GOODBYE, the optimizer process is stopped, and
the exit code is 128 + the signal.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from servo_actors import signals
from servo_actors.actors.linux import processes
from servo_actors.config import ServoConfig
from servo_actors.errors import ServoError
from servo_actors.protocol.admin_client import OptimizerAdminClient, OptimizerAdminError
from servo_actors.runner import Runner
from servo_actors.vocabulary import ADJUST, DESCRIBE, MEASURE, SLEEP

__all__ = [
    "ABORT_LOOK_INTERVAL",
    "ABORT_WAIT",
    "DEMO_APP",
    "DemoError",
    "DemoOptions",
    "DemoSetup",
    "OPTIMIZER_START_TIMEOUT",
    "OPTIMIZER_STOP_TIMEOUT",
    "PRESS_JOIN_TIMEOUT",
    "PROGRESS_INTERVAL",
    "STATE_TIMEOUT",
    "STATUS_INTERVAL",
    "STATUS_STOP_TIMEOUT",
    "STDERR_TAIL_LINES",
    "TIME_SCALE",
    "demo_config",
    "demo_plan",
    "run_demo",
    "summary_lines",
    "synthetic_setup",
]

DEMO_APP = "demo.local/web"
OPTIMIZER_START_TIMEOUT = 15.0
"""Seconds the optimizer process may take to print its address."""
OPTIMIZER_STOP_TIMEOUT = 5.0
"""Seconds the optimizer process gets to exit after SIGTERM before SIGKILL."""
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
STDERR_TAIL_LINES = 20
"""Last lines of the optimizer's stderr kept for an error message, should it fail to start."""
TIME_SCALE = 0.05
"""The synthetic application runs this much faster than real time (a 30 s measure takes 1.5 s)."""
PROGRESS_INTERVAL = "100ms"
"""The demo servo's progress posts: an Abort lands this soon after it is pressed."""


class DemoError(ServoError):
    """The demo could not run or did not finish its plan."""


@dataclass(frozen=True)
class DemoOptions:
    steps: int = 15
    seed: int = 0
    abort_every: int = 0
    measure_seconds: float = 30.0
    time_scale: float = TIME_SCALE


def demo_plan(options: DemoOptions) -> dict[str, Any]:
    return {
        "app": DEMO_APP,
        "steps": options.steps,
        "seed": options.seed,
        "measure": {"duration": options.measure_seconds, "warmup": 0},
        "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250", "error_rate <= 0.01"]},
        "sleep": 600,
    }


def demo_config(optimizer_url: str, options: DemoOptions) -> ServoConfig:
    return ServoConfig.model_validate(
        {
            "optimizer": {"id": DEMO_APP, "base_url": optimizer_url},
            "settings": {
                "progress_interval": PROGRESS_INTERVAL,
                "timeouts": {"connect": "2s", "read": "10s"},
                "backoff": {"min": "100ms", "max": "1s", "max_time": "30s"},
            },
            "connectors": [
                {
                    "name": "app",
                    "type": "synthetic",
                    "config": {
                        "seed": options.seed,
                        "time_scale": options.time_scale,
                        "rollout_seconds": "5s",
                    },
                }
            ],
        }
    )


@dataclass(frozen=True)
class DemoSetup:
    """What a demo optimizes: the optimizer's plan, and the servo's configuration given the
    optimizer's URL (its ``optimizer.id`` must be the plan's ``app``)."""

    plan: dict[str, Any]
    config: Callable[[str], ServoConfig]


def synthetic_setup(options: DemoOptions) -> DemoSetup:
    """The default demo: the synthetic application (``demo_plan`` and ``demo_config``)."""
    return DemoSetup(demo_plan(options), lambda url: demo_config(url, options))


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
            with _optimizer_process(plan_path, Path(tmp, "state.json"), watcher) as url:
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
        metrics = ", ".join(f"{k}={_num(v)}" for k, v in sorted(best["metrics"].items()))
        self.echo(f"recommended: step {best['step']}: {_settings_text(best['settings'])}  ({metrics})")
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
            self.echo(_step_line(step))
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
            press = self.presses.get(detail["cmd_uid"])
            if press is not None:
                press.done.wait(PRESS_JOIN_TIMEOUT)  # its line first, then what came of it
            self.print_news(self.state())
        elif what == "result" and detail["cmd"] == DESCRIBE:
            self.echo(f"described: {_settings_text(_described(detail))}")

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
        return f"{where} | {current.get('cmd')} {uid} ({label}){shown}  {elapsed}"


def summary_lines(driver_state: dict[str, Any]) -> list[str]:
    """The demo's closing summary: baseline against recommendation, per setting and per metric.

    ``driver_state`` is ``/admin/state``'s ``driver`` part. The recommendation's metrics are the
    means of its readings; each constraint is shown with its standard error and reading count.
    Improvement is in percent of the baseline, positive when the recommendation is better: lower
    for a minimized objective, higher for a maximized one. Metrics that are neither the objective
    nor constrained show their change only. One verdict runs through every line: a recommendation
    that is not confirmed never has a constraint line saying it holds.
    """
    best = driver_state.get("best")
    baseline = next((s for s in driver_state.get("steps", []) if s.get("n") == 0), None)
    if not best or not baseline or baseline.get("status") != "ok":
        return ["summary: no baseline reading and recommendation to compare"]
    plan = driver_state.get("plan", {})
    objective = plan.get("objective", {})
    sense = "minimize" if "minimize" in objective else "maximize"
    target = objective.get(sense)
    confirmed = bool(best.get("confirmed"))
    verdict = "confirmed" if confirmed else "NOT CONFIRMED"
    note = best.get("note") or ""
    lines = [
        f"summary: baseline (step 0) -> recommendation (step {best['step']}), {verdict}"
        + (f": {note}" if note else "")
    ]
    flat_base, flat_best = _flat(baseline.get("settings") or {}), _flat(best.get("settings") or {})
    changes = [
        f"{k} {_num(flat_base.get(k))} -> {_num(v)}" for k, v in flat_best.items() if flat_base.get(k) != v
    ]
    lines.append("  settings: " + (", ".join(changes) if changes else "unchanged"))
    limits: dict[str, list[str]] = {}
    for judged in best.get("constraints") or []:
        metric = str(judged["constraint"]).split()[0]
        limits.setdefault(metric, []).append(str(judged["constraint"]).split(" ", 1)[1])
    names = [target] + sorted(n for n in best.get("metrics", {}) if n != target)
    lines.append(f"  {'metric':<16}{'baseline':>12}{'recommended':>14}{'change':>10}   note")
    for name in names:
        before, after = baseline.get("metrics", {}).get(name), best.get("metrics", {}).get(name)
        if before is None or after is None:
            continue
        change = (after - before) / abs(before) * 100 if before else math.nan
        shown = f"{change:+.1f} %" if math.isfinite(change) else "-"
        if name == target:
            better = (-change if sense == "minimize" else change) + 0.0  # never "-0.0 % better"
            note = f"objective ({sense}): {better:.1f} % better" if math.isfinite(better) else "objective"
            if math.isfinite(better) and better < 0:
                note = f"objective ({sense}): {-better:.1f} % worse"
        elif name in limits:
            note = "limit " + ", ".join(limits[name])
        else:
            note = ""
        lines.append(f"  {name:<16}{_num(before):>12}{_num(after):>14}{shown:>10}   {note}".rstrip())
    for judged in best.get("constraints") or []:
        spread = judged.get("uncertainty")
        value = _num(judged.get("value")) + (f" ± {spread:.2g}" if spread is not None else "")
        lines.append(
            f"  {judged['constraint']}: {value} ({judged.get('readings')} readings) {_verdict(judged, confirmed)}"
        )
    return lines


def _verdict(judged: dict[str, Any], confirmed: bool) -> str:
    """One constraint's line, in the words of the recommendation's verdict."""
    if not judged.get("met"):
        return "does NOT hold"
    if not judged.get("met_with_margin"):
        return "holds, but NOT with margin"
    return "holds with margin" if confirmed else "holds with margin so far: not confirmed"


def _flat(settings: dict[str, Any]) -> dict[str, Any]:
    return {
        f"{component}.{name}": value
        for component, values in settings.items()
        if isinstance(values, dict)
        for name, value in values.items()
    }


def _described(detail: dict[str, Any]) -> dict[str, Any]:
    components = detail.get("data", {}).get("components", {})
    return {
        f"{name}.{key}": setting.get("value")
        for name, body in components.items()
        for key, setting in body.get("settings", {}).items()
    }


def _step_line(step: dict[str, Any]) -> str:
    metrics = step.get("metrics") or {}
    shown = " ".join(f"{k}={_num(metrics[k])}" for k in ("cost", "p99_latency", "error_rate") if k in metrics)
    if step.get("confirms") is not None:
        shown += f"  [confirming step {step['confirms']}]"
    mark = (
        "feasible"
        if step.get("feasible")
        else (step.get("status") if step.get("status") != "ok" else "violates")
    )
    return f"step {step['n']:>2}: {_settings_text(step.get('settings') or {})}  {shown}  [{mark}]"


def _settings_text(settings: dict[str, Any]) -> str:
    """``cpu=1 memory=2`` from flat ``{"web.cpu": 1}`` or nested ``{"web": {"cpu": 1}}`` settings."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update({name: inner for name, inner in value.items()})
        else:
            flat[key.split(".")[-1]] = value
    return " ".join(f"{k}={_num(v)}" for k, v in sorted(flat.items())) or "-"


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


@contextlib.contextmanager
def _optimizer_process(plan: Path, state_file: Path, watcher: signals.SignalWatcher) -> Iterator[str | None]:
    """Start ``optimizer serve`` on a free loopback port; yield its URL (None if a stop signal came
    first); stop it by PID. Its stderr (its log) goes on to ours, line by line."""
    command = [
        sys.executable,
        "-m",
        "servo_actors",
        "optimizer",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--plan",
        str(plan),
        "--state",
        str(state_file),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    relay = threading.Thread(target=_relay_stderr, args=(process, tail), name="optimizer-stderr", daemon=True)
    relay.start()
    try:
        yield _read_url(process, watcher, relay, tail)
    finally:
        processes.stop_child(process, OPTIMIZER_STOP_TIMEOUT)
        relay.join(OPTIMIZER_STOP_TIMEOUT)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _relay_stderr(process: subprocess.Popen[str], tail: deque[str]) -> None:
    """Copy the optimizer's stderr to this process's (the terminal, or the demo's log file), keeping
    its last lines; a pipe nobody read would stall the optimizer once full."""
    assert process.stderr is not None
    for line in process.stderr:
        tail.append(line.rstrip("\n"))
        with contextlib.suppress(OSError):
            os.write(2, line.encode(errors="replace"))


def _read_url(
    process: subprocess.Popen[str], watcher: signals.SignalWatcher, relay: threading.Thread, tail: deque[str]
) -> str | None:
    assert process.stdout is not None
    deadline = time.monotonic() + OPTIMIZER_START_TIMEOUT
    fd = process.stdout.fileno()
    os.set_blocking(fd, True)
    wake = watcher.wake_fd
    while (remaining := deadline - time.monotonic()) > 0 and not watcher.stop.is_set():
        ready, _, _ = select.select([fd] if wake is None else [fd, wake], [], [], remaining)
        if fd not in ready:
            if wake in ready and not watcher.stop.is_set():
                watcher.drain_wake()  # woken for something else than a stop: never spin on it
            continue
        line = process.stdout.readline()
        if not line:
            break
        if ": http://" in line:
            return line.rsplit(": ", 1)[1].strip()
    if watcher.stop.is_set():
        return None
    if process.poll() is not None:
        relay.join(OPTIMIZER_STOP_TIMEOUT)
        err = " | ".join(tail)
        raise DemoError(f"the embedded optimizer exited with code {process.returncode}: {err}")
    raise DemoError(
        f"the embedded optimizer did not print its address within {OPTIMIZER_START_TIMEOUT:.0f} s"
    )
