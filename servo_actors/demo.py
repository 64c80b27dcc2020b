"""A complete local optimization: the embedded optimizer plus a servo with a synthetic application.

The optimizer runs as its own process (``servo-actors optimizer serve``) on a free loopback port,
so the servo talks to it over real HTTP exactly as it would to a remote one; the servo runs here,
its synthetic connector in a supervised actor process. Each step is printed as the optimizer
records it; at the end, the best settings found. ``abort_every=N`` presses Abort on every Nth
MEASURE or ADJUST, to show crash-only recovery live.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from servo_actors.actors import processes
from servo_actors.config import ServoConfig
from servo_actors.errors import ServoError
from servo_actors.runner import Runner

DEMO_APP = "demo.local/web"
OPTIMIZER_START_TIMEOUT = 15.0
"""Seconds the optimizer process may take to print its address."""
OPTIMIZER_STOP_TIMEOUT = 5.0
"""Seconds the optimizer process gets to exit after SIGTERM before SIGKILL."""
STATE_TIMEOUT = 5.0
"""Connect/read timeout of the demo's own GET /admin/state and POST /admin/cancel."""
ABORT_DELAY = 0.3
"""Seconds after a command arrives before the demo presses Abort on it."""
TIME_SCALE = 0.05
"""The synthetic application runs this much faster than real time (a 30 s measure takes 1.5 s)."""


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
                "progress_interval": "250ms",
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


def run_demo(options: DemoOptions, echo: Callable[[str], None] = print) -> int:
    """Run the demo; the exit code (0 when the plan finished and found feasible settings)."""
    with tempfile.TemporaryDirectory(prefix="servo-actors-demo-") as tmp:
        plan_path = Path(tmp, "plan.yaml")
        plan_path.write_text(yaml.safe_dump(demo_plan(options)))
        with _optimizer_process(plan_path, Path(tmp, "state.json")) as url:
            echo(
                f"embedded optimizer: {url}  (console: {url}/  abort: servo-actors optimizer cancel --url {url})"
            )
            return _run_servo(url, options, echo)


def _run_servo(url: str, options: DemoOptions, echo: Callable[[str], None]) -> int:
    session = requests.Session()
    runner: Runner
    counter = {"ops": 0, "printed": 0}

    def state() -> dict[str, Any]:
        response = session.get(f"{url}/admin/state", timeout=STATE_TIMEOUT)
        response.raise_for_status()
        return response.json()

    def press_abort(cmd: str, cmd_uid: str) -> None:
        # The command may have finished before the press: the optimizer says what it armed, if anything.
        try:
            answer = session.post(f"{url}/admin/cancel", json={"reason": "demo-abort"}, timeout=STATE_TIMEOUT)
            said = answer.json().get("message", "")
        except (requests.RequestException, ValueError) as exc:
            said = f"the optimizer did not answer ({type(exc).__name__})"
        echo(f"  ! pressed Abort during {cmd} {cmd_uid}: {said}")

    def print_new_steps() -> None:
        steps = state()["driver"]["steps"]
        for step in steps[counter["printed"] :]:
            echo(_step_line(step))
        counter["printed"] = len(steps)

    def observe(what: str, detail: dict[str, Any]) -> None:
        if what == "command":
            cmd = detail["cmd"]
            if cmd == "SLEEP":
                runner.request_stop("shutdown")
            elif cmd in ("MEASURE", "ADJUST"):
                counter["ops"] += 1
                if options.abort_every and counter["ops"] % options.abort_every == 0:
                    timer = threading.Timer(ABORT_DELAY, press_abort, (cmd, detail["cmd_uid"]))
                    timer.daemon = True
                    timer.start()
        elif what == "cancelled":
            echo(f"  ~ {detail['cmd']} {detail['cmd_uid']} cancelled: connectors killed and restarted fresh")
        elif what == "result" and detail["cmd"] in ("MEASURE", "ADJUST"):
            print_new_steps()
        elif what == "result" and detail["cmd"] == "DESCRIBE":
            echo(f"described: {_settings_text(_described(detail))}")

    runner = Runner(demo_config(url, options), observer=observe)
    started = time.monotonic()
    code = runner.run()
    if code:
        return code
    final = state()["driver"]
    print_new_steps()
    best = final.get("best")
    echo(
        f"finished in {time.monotonic() - started:.1f} s: {len(final['steps'])} steps, phase {final['phase']}"
    )
    if not best:
        echo("no step met every constraint")
        return 1
    metrics = ", ".join(f"{k}={_num(v)}" for k, v in sorted(best["metrics"].items()))
    echo(f"best: step {best['step']}: {_settings_text(best['settings'])}  ({metrics})")
    for line in summary_lines(final):
        echo(line)
    return 0 if final["phase"] == "done" else 1


def summary_lines(driver_state: dict[str, Any]) -> list[str]:
    """The demo's closing summary: baseline against recommendation, per setting and per metric.

    ``driver_state`` is ``/admin/state``'s ``driver`` part. The recommendation's metrics are the
    means of its readings; each constraint is shown with its standard error and reading count.
    Improvement is in percent of the baseline, positive when the recommendation is better: lower
    for a minimized objective, higher for a maximized one. Metrics that are neither the objective
    nor constrained show their change only.
    """
    best = driver_state.get("best")
    baseline = next((s for s in driver_state.get("steps", []) if s.get("n") == 0), None)
    if not best or not baseline or baseline.get("status") != "ok":
        return ["summary: no baseline reading and recommendation to compare"]
    plan = driver_state.get("plan", {})
    objective = plan.get("objective", {})
    sense = "minimize" if "minimize" in objective else "maximize"
    target = objective.get(sense)
    label = "" if best.get("confirmed") else "NOT CONFIRMED, "
    lines = [
        f"summary: baseline (step 0) -> recommendation (step {best['step']}: {label}{best.get('note', '')})"
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
            better = -change if sense == "minimize" else change
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
        verdict = "holds with margin" if judged.get("met_with_margin") else "does NOT hold with margin"
        lines.append(f"  {judged['constraint']}: {value} ({judged.get('readings')} readings) {verdict}")
    return lines


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
def _optimizer_process(plan: Path, state_file: Path) -> Iterator[str]:
    """Start ``optimizer serve`` on a free loopback port; yield its URL; stop it by PID."""
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
    try:
        yield _read_url(process)
    finally:
        processes.stop_child(process, OPTIMIZER_STOP_TIMEOUT)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _read_url(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + OPTIMIZER_START_TIMEOUT
    fd = process.stdout.fileno()
    os.set_blocking(fd, True)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = process.stdout.readline()
        if not line:
            break
        if ": http://" in line:
            return line.rsplit(": ", 1)[1].strip()
    if process.poll() is not None:
        err = process.stderr.read().strip() if process.stderr else ""
        raise DemoError(f"the embedded optimizer exited with code {process.returncode}: {err}")
    raise DemoError(
        f"the embedded optimizer did not print its address within {OPTIMIZER_START_TIMEOUT:.0f} s"
    )
