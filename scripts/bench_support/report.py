"""The machine, the statistics, the side-by-side table and the BENCHMARKS.md section of bench_loop.py."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_support.agents import ROOT, SERVO_ACTORS, SERVOX

START_MARK = "<!-- bench_loop:start -->"
END_MARK = "<!-- bench_loop:end -->"
TARGETS = {
    "per_command_p50_ms": 5.0,
    "cancel_to_cancelled_p99_ms": 100.0,
    "idle_cpu_percent": 0.5,
}
IDLE_TARGET_ISSUE_24 = 0.2
"""Issue 24's idle CPU target, % of one core (the others are servox's own figures in the same run)."""
HEADER = "# Benchmarks\n\nMeasured numbers, written by the scripts under scripts/ (re-run them to update).\n"


def machine() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "load_at_start": load_average(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "thespian": importlib.metadata.version("thespian"),
        "servo_actors": importlib.metadata.version("servo-actors"),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "tree": _tree(),
    }


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _tree() -> str:
    """The commit measured, and whether the work tree differed from it (read-only git calls)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not commit:
        return "unknown"
    return f"{commit} with uncommitted changes" if dirty else commit


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank on the sorted values (with 20 samples, p99 is the largest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "n": len(values),
        "p50": statistics.median(values),
        "p99": percentile(values, 0.99),
        "max": max(values),
    }


def summarize(agent: dict[str, Any]) -> dict[str, Any]:
    """The figures of one agent's raw results (samples stay in the JSON, summaries go in the table)."""
    out: dict[str, Any] = {}
    if "cold_start" in agent:
        out["hello"] = summary(agent["cold_start"]["hello_ms"])
        out["first_poll"] = summary(agent["cold_start"]["first_poll_ms"])
    if "describe" in agent:
        out["per_command"] = summary(agent["describe"]["per_command_ms"])
        out["result_to_next_poll"] = summary(agent["describe"]["result_to_next_poll_ms"])
        out["loop_per_command_ms"] = agent["describe"]["loop_per_command_ms"]
    if "cancel" in agent:
        samples = agent["cancel"]["samples"]
        out["to_cancelled"] = summary(
            [s["to_cancelled_ms"] for s in samples if s["to_cancelled_ms"] is not None]
        )
        out["to_next_poll"] = summary(
            [s["to_next_poll_ms"] for s in samples if s["to_next_poll_ms"] is not None]
        )
        out["cancels"] = len(samples)
        out["came_back"] = agent["cancel"]["came_back"]
    if "idle" in agent:
        out["idle_cpu_percent"] = agent["idle"]["cpu_percent"]
        out["idle_scheduler_percent"] = agent["idle"]["scheduler_percent"]
        out["pss_mib"] = agent["idle"].get("pss_mib")
        out["rss_mib"] = agent["idle"].get("rss_mib")
        out["processes"] = len(agent["idle"]["processes"])
    return out


# --- the table ----------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value >= 100 else f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} %"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} MiB"


def _pick(figures: dict[str, Any], key: str, stat: str | None) -> float | None:
    value = figures.get(key)
    if stat is None or value is None:
        return value
    return value[stat]


Row = tuple[str, str, str | None, Callable[[float | None], str]]
"""(label, figure key, statistic or None, formatter)."""

ROWS: tuple[Row, ...] = (
    ("cold start: exec -> HELLO, p50", "hello", "p50", _ms),
    ("cold start: exec -> HELLO, max", "hello", "max", _ms),
    ("per command: DESCRIBE sent -> DESCRIPTION received, p50", "per_command", "p50", _ms),
    ("per command: DESCRIBE sent -> DESCRIPTION received, p99", "per_command", "p99", _ms),
    ("between commands: result answered -> next WHATS_NEXT, p50", "result_to_next_poll", "p50", _ms),
    ("loop time per DESCRIBE (poll to poll, optimizer included)", "loop_per_command_ms", None, _ms),
    ("cancel reply -> `cancelled` received, p50", "to_cancelled", "p50", _ms),
    ("cancel reply -> `cancelled` received, p99", "to_cancelled", "p99", _ms),
    ("cancel reply -> next WHATS_NEXT, p50", "to_next_poll", "p50", _ms),
    ("cancel reply -> next WHATS_NEXT, p99", "to_next_poll", "p99", _ms),
    ("idle CPU during SLEEP, % of one core (utime+stime, 10 ms ticks)", "idle_cpu_percent", None, _percent),
    ("idle CPU during SLEEP, % of one core (scheduler, ns)", "idle_scheduler_percent", None, _percent),
    ("memory: PSS of all its processes, MiB (end of the idle window)", "pss_mib", None, _mib),
    ("memory: RSS of all its processes, MiB (shared pages once per process)", "rss_mib", None, _mib),
)


def table(ours: dict[str, Any], servox: dict[str, Any] | None, servox_note: str) -> list[str]:
    lines = [
        f"| | {SERVO_ACTORS} | {SERVOX} 25.3.0 | ratio {SERVO_ACTORS} / {SERVOX} |",
        "|---|---:|---:|---:|",
    ]
    for label, key, stat, fmt in ROWS:
        mine = _pick(ours, key, stat)
        theirs = _pick(servox, key, stat) if servox is not None else None
        if servox is None:
            other, ratio = servox_note, "-"
        elif theirs is None and key == "to_next_poll":
            other, ratio = "never: exits", "-"
        else:
            other = fmt(theirs)
            if mine is not None and theirs:
                ratio = f"{mine / theirs:.2f}"
            else:
                ratio = "- (servox: none)" if theirs == 0 else "-"
        lines.append(f"| {label} | {fmt(mine)} | {other} | {ratio} |")
    return lines


def verdicts(
    ours: dict[str, Any], servox: dict[str, Any] | None = None
) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for the three targets of the first issue, then issue 24's three
    (per-command overhead and memory against servox's in the same run, when servox ran)."""
    per_command = _pick(ours, "per_command", "p50")
    cancelled = _pick(ours, "to_cancelled", "p99")
    idle = ours.get("idle_cpu_percent")

    def met(value: float | None, target: float) -> bool | None:
        return None if value is None else value <= target

    return [
        (
            f"per-command overhead p50 <= {TARGETS['per_command_p50_ms']:g} ms",
            _ms(per_command),
            met(per_command, TARGETS["per_command_p50_ms"]),
        ),
        (
            f"cancel reply -> `cancelled` p99 <= {TARGETS['cancel_to_cancelled_p99_ms']:g} ms, hung connector",
            _ms(cancelled),
            met(cancelled, TARGETS["cancel_to_cancelled_p99_ms"]),
        ),
        (
            f"idle CPU <= {TARGETS['idle_cpu_percent']:g} % of a core",
            "-" if idle is None else f"{idle:.2f} %",
            met(idle, TARGETS["idle_cpu_percent"]),
        ),
        *_issue_24_verdicts(ours, servox),
    ]


def _issue_24_verdicts(
    ours: dict[str, Any], servox: dict[str, Any] | None
) -> list[tuple[str, str, bool | None]]:
    per_command = _pick(ours, "per_command", "p50")
    idle = ours.get("idle_cpu_percent")
    pss = ours.get("pss_mib")
    theirs_per_command = _pick(servox, "per_command", "p50") if servox else None
    theirs_rss = servox.get("rss_mib") if servox else None

    def at_most(value: float | None, bound: float | None) -> bool | None:
        return None if value is None or bound is None else value <= bound

    return [
        (
            "issue 24: per-command overhead p50 <= servox's"
            + (f" ({_ms(theirs_per_command)})" if theirs_per_command is not None else ""),
            _ms(per_command),
            at_most(per_command, theirs_per_command),
        ),
        (
            f"issue 24: idle CPU <= {IDLE_TARGET_ISSUE_24:g} % of a core",
            "-" if idle is None else f"{idle:.2f} %",
            at_most(idle, IDLE_TARGET_ISSUE_24),
        ),
        (
            "issue 24: PSS of all the servo's processes <= servox's RSS"
            + (f" ({_mib(theirs_rss)})" if theirs_rss is not None else ""),
            _mib(pss) + (f" over {ours['processes']} processes" if ours.get("processes") else ""),
            at_most(pss, theirs_rss),
        ),
    ]


def _verdict_word(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "MISSED"


def memory_breakdown(idle: dict[str, Any]) -> str:
    by_role: dict[str, list[tuple[float, float]]] = {}
    for row in idle["processes"]:
        if row.get("pss_kib") is not None:
            by_role.setdefault(row["role"], []).append((row["pss_kib"] / 1024, row["rss_kib"] / 1024))
    parts = []
    for role in ("main", "admin", "logger", "supervisor", "connector", "actor"):
        if role in by_role:
            values = by_role[role]
            count = f"{len(values)} x " if len(values) > 1 else ""
            pss = sum(v[0] for v in values) / len(values)
            rss = sum(v[1] for v in values) / len(values)
            parts.append(f"{role} {count}{pss:.1f} ({rss:.1f}) MiB")
    return ", ".join(parts)


def idle_breakdown(idle: dict[str, Any]) -> str:
    by_role: dict[str, list[float]] = {}
    for row in idle["processes"]:
        by_role.setdefault(row["role"], []).append(row["scheduler_percent"])
    parts = []
    for role in ("main", "admin", "logger", "supervisor", "connector", "actor"):
        if role in by_role:
            values = by_role[role]
            count = f"{len(values)} x " if len(values) > 1 else ""
            parts.append(f"{role} {count}{sum(values) / len(values):.3f} %")
    return ", ".join(parts)


def render(results: dict[str, Any], findings: dict[str, str]) -> str:
    """The BENCHMARKS.md section (without its markers)."""
    info, settings = results["machine"], results["settings"]
    agents = results["agents"]
    ours = summarize(agents[SERVO_ACTORS])
    servox_raw = agents.get(SERVOX)
    skipped = servox_raw.get("skipped") if servox_raw else "not run"
    servox = summarize(servox_raw) if servox_raw and not skipped else None
    lines = [
        f"### Control loop, {'side by side with servox' if servox else 'servo-actors only'} "
        f"({'quick' if results['quick'] else 'full'} run, {info['date']})",
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores, Linux {info['kernel']}, Python {info['python']}, "
        f"Thespian {info['thespian']}, servo-actors {info['servo_actors']}; load average at start "
        f"{info['load_at_start']}, at the end {results.get('load_at_end', '?')} (a shared machine: "
        f"other jobs ran); tree {info['tree']}.",
    ]
    if servox is not None:
        versions = results.get("servox_versions", {})
        lines.append(
            "servox side: " + ", ".join(f"{name} {version}" for name, version in versions.items()) + "."
        )
    lines += [
        "",
        f"`python scripts/bench_loop.py{' --quick' if results['quick'] else ''}`: both agents as real "
        "subprocesses against one embedded optimizer (in the script's process, loopback, with a token), "
        "in one run; every time comes from the optimizer's request log (`at`: a request arrived, "
        "`replied_at`: its answer left). Connectors: 4 no-op (servo-actors: the base `Connector`, each "
        "in its own actor process; servox: 4 `wait`); for cancels, 3 no-op and one that never finishes "
        "its measurement (servo-actors: `chaos` hung in a blocking socket read; servox: "
        "`servox_bench_connector.BenchConnector` awaiting, since a blocking hang would stop servox's "
        f"whole event loop). Progress every {settings['progress_interval'] * 1000:.0f} ms, log level "
        f"{settings['log_level']}, for both.",
        "",
        *table(ours, servox, skipped or "-"),
        "",
        f"Samples: cold starts {settings['cold_starts']} per agent; DESCRIBEs {settings['describes']} per "
        f"agent after {settings['warmup']} not counted; cancels {ours.get('cancels', 0)} for servo-actors"
        + (f", {servox.get('cancels', 0)} for servox" if servox else "")
        + f"; idle window {settings['idle_window']:.0f} s per agent, "
        f"{agents[SERVO_ACTORS].get('idle', {}).get('polls_in_window', '?')} polls in it. "
        "Ratios below 1: servo-actors is faster or uses less.",
        "",
        "| target | measured | |",
        "|---|---:|---|",
    ]
    checks = verdicts(ours, servox)
    for target, measured, met in checks:
        lines.append(f"| {target} | {measured} | {_verdict_word(met)} |")
    lines.append("")
    lines += _facts(agents, ours, servox_raw if servox is not None else None, servox)
    notes = [findings[key] for key in TARGETS if key in findings]
    if notes:
        lines += [
            "",
            "What bounds these figures (investigated by hand; how: scripts/bench_support/findings.py):",
        ]
        for note in notes:
            lines += ["", note]
    return "\n".join(lines) + "\n"


def _facts(
    agents: dict[str, Any],
    ours: dict[str, Any],
    servox_raw: dict[str, Any] | None,
    servox: dict[str, Any] | None,
) -> list[str]:
    mine = agents[SERVO_ACTORS]
    facts = []
    if "idle" in mine:
        facts.append(f"- servo-actors idle CPU by process: {idle_breakdown(mine['idle'])}.")
        facts.append(f"- servo-actors memory by process, PSS (RSS): {memory_breakdown(mine['idle'])}.")
    if "cancel" in mine:
        cancel = mine["cancel"]
        facts.append(
            f"- servo-actors polled again after {ours['came_back']} of {ours['cancels']} cancels; "
            f"processes before / after the cancels: {cancel['process_count_before']} / "
            f"{cancel['process_count_after']} (every killed connector replaced, none left over)."
        )
    if servox is not None and servox_raw is not None and "cancel" in servox_raw:
        codes = ", ".join(str(code) for code in servox_raw["cancel"]["exit_codes"])
        facts.append(
            f"- servox polled again after {servox['came_back']} of {servox['cancels']} cancels; it exited "
            f"(status {codes}) after posting `cancelled` (docs/interop.md: AttributeError), so each of its "
            "cancel samples is a fresh process and it has no 'ready again' figure."
        )
    for name, agent in agents.items():
        statuses = agent.get("describe", {}).get("statuses", ["ok"])
        if statuses != ["ok"]:
            facts.append(
                f"- {name}'s DESCRIPTIONs had statuses {statuses}, not only ok: its figures are suspect."
            )
    leaks = {name: agent.get("leaked", []) for name, agent in agents.items() if isinstance(agent, dict)}
    if any(leaks.values()):
        facts.append(f"- PROCESSES LEFT BEHIND (killed by the script): {leaks}.")
    else:
        facts.append("- Every process started was gone at the end (checked by marker in /proc).")
    return facts


def write_section(path: Path, text: str, marks: tuple[str, str] = (START_MARK, END_MARK)) -> None:
    """Replace the section between ``marks`` (bench_loop's by default) of ``path`` (created if
    missing), leaving the rest as it is."""
    start, end = marks
    section = f"{start}\n{text}{end}\n"
    current = path.read_text() if path.exists() else HEADER
    if start in current and end in current:
        head, rest = current.split(start, 1)
        new = head + section + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = current.rstrip("\n") + "\n\n" + section
    # Another script writes its own section of the same file: replace it in one step.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(new)
    os.replace(temporary, path)
