"""Talk to a running embedded optimizer's admin routes, and judge the trace a servox run left there.

Used by ``scripts/interop_servox.sh``; stdlib only, so it runs with any Python 3.11. Subcommands::

    servox_trace.py state URL OUT                      # GET URL/admin/state into the file OUT
    servox_trace.py cancel URL                         # POST URL/admin/cancel; exit 0 if a cancel was armed
    servox_trace.py wait URL CONDITION [--pid PID] [--timeout S] [--interval S]
    servox_trace.py check PHASE STATE_JSON --servox-log FILE --servox-rc RC [--sigterm-at EPOCH]

``wait`` polls ``/admin/state`` until CONDITION holds (exit 0), the process ``--pid`` is gone
(exit 3: servox died first), or ``--timeout`` passes (exit 2). Conditions:

- ``results=N``: the driver has received N results;
- ``inflight=CMD``: CMD is the command in flight (servox is working on it);
- ``cancel-settled``: a post was answered ``cancel`` and servox has posted again since
  (its cancelled result and its next poll);
- ``events-after-cancel=N``: N requests arrived after the one answered ``cancel``;
- ``polls=N``: N WHATS_NEXT have arrived.

``check`` prints one line per rule of docs/protocol.md that the trace can show, each ``PASS``,
``FAIL`` (counted: the exit status is their number), or ``XFAIL`` / ``XPASS`` for a defect known in
servox 25.3.0 that was (or, surprisingly, was not) seen; those are not ours to fix and not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

HTTP_TIMEOUT = 5.0
"""Seconds any one admin request may take (connect and read)."""
DEFAULT_WAIT_TIMEOUT = 60.0
DEFAULT_POLL_INTERVAL = 0.2
SLEEP_TOLERANCE = 0.25
"""How much earlier than a SLEEP's duration the next poll may come (timer and clock jitter)."""
SERVO_STATUSES = {"ok", "failed", "rejected", "aborted", "cancelled"}
RESULT_EVENTS = {"DESCRIBE": "DESCRIPTION", "MEASURE": "MEASUREMENT", "ADJUST": "ADJUSTMENT"}
WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
FRAME = re.compile(r'File "(?:.*/site-packages/)?(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
TRACEBACK_LOOKBACK = 12
"""Lines above an error message searched for the frame that raised it (loguru adds variable lines)."""
SERVOX_CANCEL_CRASH = "AttributeError: 'AssemblyRunner' object has no attribute 'servo'"

MAX_EXIT_FAILS = 100
"""``check`` exits with its number of FAIL lines, capped here (an exit status is one byte)."""
EXIT_TIMEOUT = 2
EXIT_PROCESS_GONE = 3


# --- admin HTTP ---------------------------------------------------------------------------------


def fetch_state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.rstrip("/") + "/admin/state", timeout=HTTP_TIMEOUT) as response:
        return json.load(response)


def post_cancel(url: str) -> dict[str, Any]:
    request = urllib.request.Request(
        url.rstrip("/") + "/admin/cancel",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
        return json.load(response)


# --- reading the trace --------------------------------------------------------------------------


def history(state: dict[str, Any]) -> list[dict[str, Any]]:
    return list(state.get("history") or [])


def reply_of(entry: dict[str, Any]) -> Any:
    return entry.get("reply") if "reply" in entry else entry.get("reply_text")


def is_result(entry: dict[str, Any]) -> bool:
    param = entry.get("param")
    return entry.get("event") in RESULT_EVENTS.values() and isinstance(param, dict) and "status" in param


def is_progress(entry: dict[str, Any]) -> bool:
    param = entry.get("param")
    return entry.get("event") in RESULT_EVENTS.values() and isinstance(param, dict) and "status" not in param


def cancel_index(entries: list[dict[str, Any]]) -> int | None:
    for index, entry in enumerate(entries):
        reply = reply_of(entry)
        if isinstance(reply, dict) and reply.get("status") == "cancel":
            return index
    return None


def commands_sent(entries: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(index, command) for every WHATS_NEXT answered with a command."""
    sent = []
    for index, entry in enumerate(entries):
        reply = reply_of(entry)
        if entry.get("event") == "WHATS_NEXT" and isinstance(reply, dict) and "cmd" in reply:
            sent.append((index, reply))
    return sent


# --- wait ---------------------------------------------------------------------------------------


def condition(text: str) -> Callable[[dict[str, Any]], bool]:
    name, _, value = text.partition("=")
    if name == "results":
        wanted = int(value)
        return lambda state: len((state.get("driver") or {}).get("results") or []) >= wanted
    if name == "inflight":
        return lambda state: (state.get("current") or {}).get("cmd") == value
    if name == "cancel-settled":
        return lambda state: _after_cancel(state) >= 2
    if name == "polls":
        wanted = int(value)
        return lambda state: sum(e.get("event") == "WHATS_NEXT" for e in history(state)) >= wanted
    if name == "events-after-cancel":
        wanted = int(value)
        return lambda state: _after_cancel(state) >= wanted
    raise SystemExit(f"servox_trace.py: unknown condition {text!r}")


def _after_cancel(state: dict[str, Any]) -> int:
    entries = history(state)
    index = cancel_index(entries)
    return -1 if index is None else len(entries) - index - 1


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by the shell) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def wait(url: str, text: str, pid: int | None, timeout: float, interval: float) -> int:
    holds = condition(text)
    deadline = time.monotonic() + timeout
    while True:
        try:
            if holds(fetch_state(url)):
                return 0
        except (OSError, ValueError) as exc:
            print(f"servox_trace.py: {url}/admin/state: {exc}", file=sys.stderr)
        if pid is not None and not process_alive(pid):
            return EXIT_PROCESS_GONE
        if time.monotonic() >= deadline:
            return EXIT_TIMEOUT
        time.sleep(interval)


# --- check --------------------------------------------------------------------------------------


class Report:
    """Collects the verdict lines of one phase and prints them as they come."""

    def __init__(self, phase: str) -> None:
        self.phase = phase
        self.failed = 0

    def line(self, verdict: str, text: str, detail: str = "") -> None:
        if verdict == "FAIL":
            self.failed += 1
        print(f"  {verdict:<5} {self.phase}: {text}" + (f"\n          {detail}" if detail else ""))

    def check(self, ok: bool, text: str, detail: str = "") -> bool:
        self.line("PASS" if ok else "FAIL", text, "" if ok else detail)
        return ok

    def known_servox_defect(self, seen: bool, text: str, detail: str = "") -> None:
        self.line("XFAIL" if seen else "XPASS", text, detail)

    def info(self, text: str) -> None:
        self.line("INFO", text)


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def result_shape_problem(event: str, param: dict[str, Any]) -> str | None:
    """What is wrong with a result param (docs/protocol.md), or None."""
    if param.get("status") not in SERVO_STATUSES:
        return f"status {param.get('status')!r} is not one of {sorted(SERVO_STATUSES)}"
    reason = param.get("reason")
    if not isinstance(reason, str) or not WORD.match(reason):
        return f"reason must be a word, got {reason!r}"
    if param.get("status") != "ok":
        return None
    if event == "DESCRIPTION":
        components = ((param.get("descriptor") or {}).get("application") or {}).get("components")
        if not isinstance(components, dict):
            return "an ok DESCRIPTION needs descriptor.application.components (a mapping)"
    if event == "MEASUREMENT":
        metrics = param.get("metrics")
        if not isinstance(metrics, dict) or not isinstance(param.get("annotations", {}), dict):
            return "an ok MEASUREMENT needs metrics (a mapping) and annotations (a mapping)"
        for name, metric in metrics.items():
            if not isinstance(metric, dict) or ("values" not in metric and "value" not in metric):
                return f"metric {name!r} has neither values (time series) nor value"
            for series in metric.get("values") or []:
                data = series.get("data") if isinstance(series, dict) else None
                if not isinstance(data, list) or any(not isinstance(p, list) or len(p) != 2 for p in data):
                    return f"metric {name!r}: a series is {{id, data: [[t, v], ...]}}"
    if event == "ADJUSTMENT":
        components = ((param.get("state") or {}).get("application") or {}).get("components")
        if not isinstance(components, dict):
            return "an ok ADJUSTMENT needs state.application.components (a mapping)"
    return None


def progress_shape_problem(param: dict[str, Any], cmd_uid: str | None) -> str | None:
    progress, runtime = param.get("progress"), param.get("runtime", 0)
    if isinstance(progress, bool) or not isinstance(progress, int | float) or not 0 <= progress <= 100:
        return f"progress must be a number 0-100, got {progress!r}"
    if isinstance(runtime, bool) or not isinstance(runtime, int | float) or runtime < 0:
        return f"runtime must be a number of seconds >= 0, got {runtime!r}"
    if param.get("cmd_uid") != cmd_uid:
        return f"cmd_uid {param.get('cmd_uid')!r} is not the command's {cmd_uid!r}"
    return None


def check_common(report: Report, entries: list[dict[str, Any]]) -> None:
    """Rules every phase's trace must follow, on both sides of the wire."""
    if not report.check(bool(entries), "servox reached the optimizer", "no request was recorded"):
        return
    first = entries[0]
    hello = first.get("param") or {}
    report.check(
        first.get("event") == "HELLO"
        and isinstance(hello.get("agent"), str)
        and isinstance(hello.get("telemetry", {}), dict),
        "HELLO first, with agent and telemetry",
        f"first request: {first.get('event')} {_short(hello)}",
    )
    report.info(f"servox says agent={hello.get('agent')!r}, User-Agent={first.get('user_agent')!r}")
    rehello = [
        i
        for i, e in enumerate(entries)
        if e.get("event") == "HELLO" and i > 0 and entries[i - 1].get("event") != "GOODBYE"
    ]
    report.check(not rehello, "HELLO only at start-up (or after a GOODBYE)", f"extra HELLO at {rehello}")
    bad_http = [(e.get("event"), e.get("http_status")) for e in entries if e.get("http_status") != 200]
    report.check(
        not bad_http,
        "every request accepted (envelope and token as the protocol says)",
        f"non-200 answers: {bad_http}",
    )
    auth = sorted({str(e.get("auth")) for e in entries})
    report.check(auth == ["Bearer"], "token sent as Authorization: Bearer", f"auth forms seen: {auth}")

    sent = commands_sent(entries)
    bare = [c for _, c in sent if not isinstance(c.get("param"), dict)]
    report.check(not bare, "[ours] every command sent carries a param object", f"sent: {_short(bare)}")
    sleeps = [c for _, c in sent if c.get("cmd") == "SLEEP"]
    no_data = [c for c in sleeps if not isinstance((c.get("param") or {}).get("data"), dict)]
    report.check(not no_data, "[ours] every SLEEP sent carries param.data", f"sent: {_short(no_data)}")

    # SLEEP is honoured: the next poll comes no earlier than its duration.
    early, checked = [], 0
    for index, command in sent:
        if command.get("cmd") != "SLEEP":
            continue
        later = [e for e in entries[index + 1 :] if e.get("event") == "WHATS_NEXT"]
        if later:
            checked += 1
            waited = later[0]["at"] - entries[index]["replied_at"]
            duration = float((command.get("param") or {}).get("duration", 120))
            if waited < duration - SLEEP_TOLERANCE:
                early.append(f"slept {waited:.2f}s of {duration}s")
    if checked:
        report.check(not early, "SLEEP honoured before the next poll", "; ".join(early))

    goodbyes = [i for i, e in enumerate(entries) if e.get("event") == "GOODBYE"]
    after = [e.get("event") for e in entries[goodbyes[0] + 1 :]] if goodbyes else []
    if goodbyes:
        report.check(not after, "nothing posted after GOODBYE", f"then: {after}")


def check_results(
    report: Report, entries: list[dict[str, Any]], *, cancelled_uid: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Each command answered once, with its cmd_uid, under its event, in the protocol's shape."""
    results: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if is_result(entry):
            results.setdefault(str(entry["param"].get("cmd_uid")), []).append(entry)
    sent = commands_sent(entries)
    last_command_index = sent[-1][0] if sent else -1
    for index, command in sent:
        if command.get("cmd") == "SLEEP":
            continue
        uid, name = command.get("cmd_uid"), command["cmd"]
        answers = results.get(str(uid), [])
        if not answers and index == last_command_index:
            report.info(f"{name} {uid} was still in flight when the run ended (no result owed)")
            continue
        label = f"{name} {uid} answered once, as {RESULT_EVENTS[name]}, with its cmd_uid"
        right = [a for a in answers if a.get("event") == RESULT_EVENTS[name]]
        if not report.check(len(answers) == 1 and len(right) == 1, label, f"results: {_short(answers)}"):
            continue
        param = right[0]["param"]
        problem = result_shape_problem(right[0]["event"], param)
        if uid == cancelled_uid and problem and param.get("reason") is None:
            report.known_servox_defect(
                True,
                f"{name} {uid}: the cancelled result's reason is a word",
                f"servox posted {_short(param)}",
            )
        else:
            report.check(problem is None, f"{name} {uid}: result has the protocol's shape", str(problem))
        reply = reply_of(right[0])
        if uid != cancelled_uid:
            report.check(
                reply == {"status": "ok"},
                f"[ours] {name} {uid}: result answered {{'status': 'ok'}}",
                f"we answered {_short(reply)}",
            )
    unknown = [uid for uid in results if uid not in {str(c.get("cmd_uid")) for _, c in sent}]
    report.check(not unknown, "no result for a command never sent", f"cmd_uids: {unknown}")
    for entry in entries:
        if is_progress(entry):
            uid = entry["param"].get("cmd_uid")
            problem = progress_shape_problem(entry["param"], uid if uid in results else None)
            report.check(problem is None, f"progress for {uid} has the protocol's shape", str(problem))
    return results


def servox_traceback_line(log: str, marker: str) -> str | None:
    """``servo/runner.py:776 in f -> marker``: where in servox the error ``marker`` was raised."""
    lines = log.splitlines()
    for index, text in enumerate(lines):
        if marker not in text:
            continue
        for back in range(index - 1, max(index - TRACEBACK_LOOKBACK, -1), -1):
            frame = FRAME.search(lines[back])
            if frame:
                return f"{frame['path']}:{frame['line']} in {frame['func']} -> {marker}"
        return marker
    return None


def check_phase(phase: str, state: dict[str, Any], log: str, rc: int | None, sigterm_at: float | None) -> int:
    report = Report(phase)
    entries = history(state)
    print(f"phase {phase}: {len(entries)} requests recorded; servox exit code {rc}")
    check_common(report, entries)
    events = [e.get("event") for e in entries]

    if phase == "handshake":
        results = check_results(report, entries)
        kinds = {e.get("event") for r in results.values() for e in r if e["param"].get("status") == "ok"}
        report.check(
            {"DESCRIPTION", "MEASUREMENT", "ADJUSTMENT"} <= kinds,
            "DESCRIBE, MEASURE and ADJUST all answered ok",
            f"ok results: {sorted(kinds)}",
        )
        if sigterm_at is not None:
            last = entries[-1] if entries else {}
            report.check(
                last.get("event") == "GOODBYE" and (last.get("param") or {}).get("reason") == "SIGTERM",
                "SIGTERM: GOODBYE with reason SIGTERM is the last post",
                f"last request: {last.get('event')} {_short(last.get('param'))}",
            )
            if last.get("event") == "GOODBYE":
                report.info(f"SIGTERM -> GOODBYE: {(last['at'] - sigterm_at) * 1000:.0f} ms")
            report.info(f"servox exit code after SIGTERM: {rc} (0 would be a clean exit)")

    elif phase in ("probe-describe-param", "probe-sleep-data"):
        check_results(report, entries)
        what = "a DESCRIBE without param" if phase == "probe-describe-param" else "a SLEEP without data"
        described = [e for e in entries if is_result(e) and e.get("event") == "DESCRIPTION"]
        report.check(
            bool(described),
            f"[ours] servox still works after we sent {what}",
            "servox crashed: "
            + (
                servox_traceback_line(log, "AttributeError: 'NoneType' object has no attribute 'get'")
                or servox_traceback_line(log, "TypeError: argument of type 'NoneType' is not iterable")
                or f"see its log (exit code {rc})"
            ),
        )

    elif phase == "cancel":
        index = cancel_index(entries)
        cancelled = entries[index] if index is not None else None
        if not report.check(
            cancelled is not None and is_progress(cancelled),
            "[ours] the first progress post after /admin/cancel answered cancel",
            "no post was answered cancel: " + _short(events),
        ):
            return report.failed
        assert cancelled is not None and index is not None
        uid = cancelled["param"].get("cmd_uid")
        report.info(f"we answered {_short(reply_of(cancelled))} to {_short(cancelled['param'], 160)}")
        check_results(report, entries, cancelled_uid=uid)
        result = next((e for e in entries[index + 1 :] if is_result(e)), None)
        report.check(
            result is not None
            and result["param"].get("status") == "cancelled"
            and result["param"].get("cmd_uid") == uid,
            f"servox posted a cancelled result for {uid}",
            f"next requests: {_short([e.get('event') for e in entries[index + 1 :]])}",
        )
        if result is not None:
            gap_ms = (result["at"] - cancelled["replied_at"]) * 1000
            report.info(f"cancel reply -> cancelled result: {gap_ms:.1f} ms")
            reply = reply_of(result)
            report.check(
                isinstance(reply, dict) and reply.get("status") == "ok",
                "[ours] servox's cancelled result accepted",
                f"servox sent {_short(result['param'])}; we answered {_short(reply)}",
            )
        polled = "WHATS_NEXT" in events[index + 1 :]
        report.known_servox_defect(
            not polled,
            "servox polls WHATS_NEXT again after a cancel",
            f"after the cancel: {events[index + 1 :]}",
        )
        crash = servox_traceback_line(log, SERVOX_CANCEL_CRASH)
        report.known_servox_defect(
            crash is not None and rc not in (None, 0),
            "servox keeps running after a cancel",
            f"exit code {rc}: {crash}" if crash else f"exit code {rc}",
        )
        goodbye_after = "GOODBYE" in events[index + 1 :]
        report.known_servox_defect(
            not goodbye_after and not polled,
            "servox posts GOODBYE before it exits",
            "no GOODBYE was posted" if not goodbye_after else "",
        )
    else:
        raise SystemExit(f"servox_trace.py: unknown phase {phase!r}")
    return report.failed


# --- command line -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_state = sub.add_parser("state")
    p_state.add_argument("url")
    p_state.add_argument("out")
    p_cancel = sub.add_parser("cancel")
    p_cancel.add_argument("url")
    p_wait = sub.add_parser("wait")
    p_wait.add_argument("url")
    p_wait.add_argument("condition")
    p_wait.add_argument("--pid", type=int, default=None)
    p_wait.add_argument("--timeout", type=float, default=DEFAULT_WAIT_TIMEOUT)
    p_wait.add_argument("--interval", type=float, default=DEFAULT_POLL_INTERVAL)
    p_check = sub.add_parser("check")
    p_check.add_argument("phase")
    p_check.add_argument("state_json")
    p_check.add_argument("--servox-log", required=True)
    p_check.add_argument("--servox-rc", default="")
    p_check.add_argument("--sigterm-at", type=float, default=None, help="epoch seconds we sent SIGTERM")
    args = parser.parse_args(argv)

    try:
        if args.command == "state":
            state = fetch_state(args.url)
            with open(args.out, "w", encoding="utf-8") as out:
                json.dump(state, out, indent=1)
            return 0
        if args.command == "cancel":
            answer = post_cancel(args.url)
            print(f"  /admin/cancel: {answer.get('message')}")
            return 0 if answer.get("armed") else 1
    except (OSError, ValueError) as exc:
        print(f"servox_trace.py: {args.url}: {exc}", file=sys.stderr)
        return 1
    if args.command == "wait":
        return wait(args.url, args.condition, args.pid, args.timeout, args.interval)
    with open(args.state_json, encoding="utf-8") as file:
        state = json.load(file)
    try:
        with open(args.servox_log, encoding="utf-8", errors="replace") as file:
            log = file.read()
    except OSError:
        log = ""
    rc = int(args.servox_rc) if args.servox_rc.lstrip("-").isdigit() else None
    return min(check_phase(args.phase, state, log, rc, args.sigterm_at), MAX_EXIT_FAILS)


if __name__ == "__main__":
    sys.exit(main())
