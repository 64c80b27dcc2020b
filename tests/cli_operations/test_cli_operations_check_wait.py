"""``check`` as servox users know it (issue 37, part 4), through the real CLI and real connectors:
remedies, severities and ``--halt-on``, the ``--check-name/--id/--tag`` filters, ``--wait`` with
a check that fails and then passes, a signal during the wait, and ``run --check``."""

from __future__ import annotations

import signal
import subprocess

import pytest

from servo_actors.cli.check_rounds import CheckPolicy, CheckSelection
from servo_actors.connectors.check_result import check_entry, default_check_id

pytestmark = pytest.mark.timeout(120)

# Passes from its third run on: each run counts itself in a file beside servo.yaml.
THIRD_TIME_LUCKY = 'n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; [ "$n" -ge 3 ]'


def probe(**checks: object) -> dict[str, object]:
    return {"name": "probe", "type": "command", "config": {"check": checks}}


READY = {"run": "test -e flag", "remedy": "touch flag", "severity": "critical", "tags": ["files"]}
ADVISORY = {"run": "false", "severity": "warning", "remedy": "echo tune me", "id": "adv"}


def test_a_failed_check_shows_its_remedy_in_the_table_and_json(servo, kit) -> None:
    servo.write_config(probe(ready=READY, advisory=ADVISORY))
    result = servo.run("check")
    assert result.returncode == 1
    rows = kit.table_rows(result.stdout)
    assert rows[0] == ["CONNECTOR", "CHECK", "RESULT", "MESSAGE", "REMEDY"]
    assert rows[1][:3] == ["probe", "ready", "FAILED"] and rows[1][-1] == "touch flag"
    assert "(remedy: touch flag)" in result.stderr
    assert "Traceback" not in result.stderr

    result, payload = servo.run_json("check")
    ready = next(c for c in payload["data"]["checks"] if c["name"] == "ready")
    assert ready["remedy"] == "touch flag"
    assert (ready["severity"], ready["tags"], ready["outcome"]) == ("critical", ["files"], "failed")
    assert ready["id"] == default_check_id("ready")
    assert (servo.dir / "flag").exists() is False  # shown, never run


def test_a_failed_warning_is_shown_and_fails_nothing(servo, kit) -> None:
    servo.write_config(probe(fine="true", advisory=ADVISORY))
    result = servo.run("check", "--verbose")
    assert result.returncode == 0, result.stderr
    rows = kit.table_rows(result.stdout)
    assert rows[0] == ["CONNECTOR", "CHECK", "ID", "TAGS", "SEVERITY", "RESULT", "MESSAGE", "REMEDY"]
    assert rows[2][:6] == ["probe", "advisory", "adv", "-", "warning", "warning"]
    assert rows[2][-1] == "echo tune me"


def test_halt_on_skips_the_connectors_later_checks_after_a_failure_that_severe(servo) -> None:
    servo.write_config(probe(ready=READY, later="true", advisory=ADVISORY, last="true"))
    result, payload = servo.run_json("check", "--halt-on", "failure")  # failure: common
    assert result.returncode == 1
    # The critical check fails first: it halts the rest at any level.
    assert [c["outcome"] for c in payload["data"]["checks"]] == ["failed", "skipped", "skipped", "skipped"]
    assert payload["data"]["checks"][1]["message"] == "not counted: 'ready' failed (--halt-on failure)"

    (servo.dir / "flag").touch()
    by_level = {}
    for level in ("critical", "warning"):
        result, payload = servo.run_json("check", "--halt-on", level)
        assert result.returncode == 0, result.stderr
        by_level[level] = [c["outcome"] for c in payload["data"]["checks"]]
    assert by_level["critical"] == ["passed", "passed", "warning", "passed"]
    # Only --halt-on warning halts on a failed warning (servox's could not).
    assert by_level["warning"] == ["passed", "passed", "warning", "skipped"]


def test_filters_select_checks_and_an_unknown_name_lists_the_known_ones(servo, kit) -> None:
    servo.write_config(probe(ready=READY, later="true", advisory=ADVISORY))
    result = servo.run("check", "--check-name", "later")
    assert result.returncode == 0, result.stderr
    assert [row[1] for row in kit.table_rows(result.stdout)[1:]] == ["later"]

    result, payload = servo.run_json("check", "--check-name", "later,advisory")
    assert result.returncode == 0, result.stderr
    assert [c["name"] for c in payload["data"]["checks"]] == ["later", "advisory"]
    none = servo.run("check", "--check-name", "later,advisory", "--tag", "files")
    assert none.returncode == 2  # each is known, but no check is both
    assert "error: no check matches --check-name later, advisory and --tag files at once" in none.stderr
    result, payload = servo.run_json("check", "--id", "adv", "--check-name", "/adv|lat/")
    assert result.returncode == 0, result.stderr
    assert [c["name"] for c in payload["data"]["checks"]] == ["advisory"]

    unknown = servo.run("check", "--check-name", "nope", "--tag", "files,nope")
    assert unknown.returncode == 2
    assert (
        "error: no check name 'nope' (known: 'ready', 'later', 'advisory'); no tag 'nope' (known: 'files')"
        in unknown.stderr
    )
    assert "Traceback" not in unknown.stderr


def test_wait_reruns_a_failing_check_until_it_passes(servo) -> None:
    servo.write_config(probe(flaky={"run": THIRD_TIME_LUCKY, "remedy": "wait for it"}))
    result, payload = servo.run_json("check", "--wait", "1m", "--delay", "100ms")
    assert result.returncode == 0, result.stderr
    assert payload["status"] == "ok"
    assert payload["data"]["rounds"] == 3
    assert [c["outcome"] for c in payload["data"]["checks"]] == ["passed"]
    progress = [line for line in result.stderr.splitlines() if line.startswith("checks: round")]
    assert len(progress) == 2 and "1 failing (probe/flaky)" in progress[0], result.stderr


def test_wait_gives_up_when_its_time_is_up_naming_the_failed_checks(servo) -> None:
    servo.write_config(probe(never={"run": "exit 3", "remedy": "fix it"}))
    result = servo.run("check", "--wait", "1s", "--delay", "200ms")
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: after "), result.stderr
    assert "rounds in 1s: 1 of 1 checks failed: connector 'probe': never:" in last
    assert "(remedy: fix it)" in last


def test_sigint_during_the_wait_stops_the_connectors_without_a_traceback(servo) -> None:
    servo.write_config(probe(never="false"))
    process = servo.start("check", "--wait", "10m", "--delay", "5m", stderr=subprocess.PIPE)
    assert process.stderr is not None
    try:
        line = process.stderr.readline()  # the first round's line: now in its pause
        assert line.startswith("checks: round 1: 1 failing"), line
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert "interrupted by SIGINT: check abandoned, its connectors were stopped" in rest
    assert "Traceback" not in rest


def test_bad_wait_options_exit_2(servo) -> None:
    servo.write_config(probe(fine="true"))
    for args, says in (
        (["--delay", "0"], "must be at least 100ms"),
        (["--delay", "soon"], "'expo'"),
        (["--wait", "0s"], "must be more than 0"),
        (["--halt-on", "panic"], "'panic' is not one of"),
    ):
        result = servo.run("check", *args)
        assert result.returncode == 2, args
        assert says in result.stderr, result.stderr


OPTIMIZER = {"id": "acme.com/web", "url": "http://127.0.0.1:9/accounts/acme.com/applications/web/"}


def test_run_check_exits_1_naming_the_failed_check_before_the_loop_starts(servo, kit) -> None:
    # The optimizer's port answers nothing: had the loop started, the run would not end by itself.
    servo.write_config(probe(ready=READY, later="true"), optimizer=OPTIMIZER)
    result = servo.run("run", "--check")
    assert result.returncode == 1
    assert ["probe", "later", "skipped"] == kit.table_rows(result.stdout)[2][:3]
    assert "connector 'probe': ready: check command exited with status 1" in result.stderr
    assert "Traceback" not in result.stderr
    by_env = servo.run("run", SERVO_RUN_CHECK="true")
    assert by_env.returncode == 1
    assert "connector 'probe': ready:" in by_env.stderr
    alone = servo.run("run", "--wait", "1m", "--halt-on", "common")
    assert alone.returncode == 2
    assert "error: --wait, --halt-on only go with --check or --dry-run" in alone.stderr


def test_run_dry_run_waits_as_check_does(servo, kit) -> None:
    servo.write_config(probe(flaky=THIRD_TIME_LUCKY, advisory=ADVISORY), optimizer=OPTIMIZER)
    result = servo.run("run", "--dry-run", "--wait", "1m", "--delay", "100ms")
    assert result.returncode == 0, result.stderr
    assert [row[:3] for row in kit.table_rows(result.stdout)[1:]] == [
        ["probe", "flaky", "ok"],
        ["probe", "advisory", "warning"],
    ]
    assert result.stderr.count("checks: round") == 2


# ----- the parts, without processes -----------------------------------------------------------


def test_check_entry_fills_the_optional_fields() -> None:
    entry = check_entry({"name": "up", "success": 1, "severity": "LOUD", "tags": "Net", "remedy": "  "})
    assert entry == {
        "name": "up",
        "success": True,
        "message": "",
        "id": default_check_id("up"),
        "severity": "common",
        "tags": ["net"],
        "remedy": None,
    }


def test_selection_ands_kinds_and_ors_values() -> None:
    checks = [
        {"connector": "a", "name": "x", "id": "1", "tags": ["t"], "success": True},
        {"connector": "a", "name": "y", "id": "2", "tags": [], "success": True},
    ]
    policy = CheckPolicy(CheckSelection(names=("x", "y"), tags=("t",)))
    assert [c["name"] for c in policy.judge(checks)] == ["x"]
    assert CheckSelection(ids=("3",)).unknown(checks) == "no check id '3' (known: '1', '2')"
    fixed = CheckPolicy(delay=2.5).delays()
    assert [next(fixed) for _ in range(3)] == [2.5, 2.5, 2.5]
    expo = CheckPolicy().delays()
    assert [next(expo) for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
