"""Which checks ``check`` runs, as servox users know it (issue 37), through the real CLI and real
connectors: ``-n/--name`` (an application of the file, else a check; both: exit 2), ``--app`` and
``--check-name`` each one thing only, the main group's ``--app/-n/--name``, ``check CONNECTOR...``,
and servo.yaml's ``checks`` section as the defaults of ``check`` and ``run --check``."""

from __future__ import annotations

import json

import pytest
import yaml

pytestmark = pytest.mark.timeout(120)

# Passes from its third run on: each run counts itself in a file beside servo.yaml.
THIRD_TIME_LUCKY = 'n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; [ "$n" -ge 3 ]'
OPTIMIZER = {"id": "acme.com/web", "url": "http://127.0.0.1:9/accounts/acme.com/applications/web/"}


def command(name: str, **checks: object) -> dict[str, object]:
    return {"name": name, "type": "command", "config": {"check": checks}}


def write_apps(servo, *documents: tuple[str, list[dict[str, object]]]) -> None:
    servo.config_path.write_text(
        yaml.safe_dump_all(
            [{"optimizer": {"id": app}, "connectors": connectors} for app, connectors in documents],
            sort_keys=False,
        )
    )


def names(payload: dict[str, object]) -> list[str]:
    return [c["name"] for c in payload["data"]["checks"]]  # type: ignore[index]


def test_name_filters_checks_when_no_application_has_it_and_app_only_selects(servo, kit) -> None:
    servo.write_config(command("probe", ready="true", later="false"))
    result = servo.run("check", "-n", "ready")
    assert result.returncode == 0, result.stderr
    assert [row[1] for row in kit.table_rows(result.stdout)[1:]] == ["ready"]
    unknown = servo.run("check", "--app", "ready")  # --app is never a check
    assert unknown.returncode == 2
    assert "no application 'ready' in the file (known: none" in unknown.stderr


def test_name_selects_an_application_and_one_that_is_also_a_check_exits_2(servo) -> None:
    write_apps(
        servo,
        ("acme.com/web", [command("probe", ready="true", **{"acme.com/db": "true"})]),
        ("acme.com/db", [command("probe", ready="true", down="false")]),
    )
    web, payload = servo.run_json("check", "--name", "acme.com/web")
    assert web.returncode == 0, web.stderr
    assert names(payload) == ["ready", "acme.com/db", "identity"]  # one application: not a line each

    both = servo.run("check", "--app", "acme.com/web", "-n", "acme.com/db")
    assert both.returncode == 2
    assert (
        "error: acme.com/web: --name 'acme.com/db' is both an application and a check: say --app "
        "acme.com/db for the application or --check-name acme.com/db for the check"
    ) in both.stderr
    assert "Traceback" not in both.stderr

    check, payload = servo.run_json("check", "--app", "acme.com/web", "--check-name", "acme.com/db")
    assert check.returncode == 0, check.stderr
    assert names(payload) == ["acme.com/db"]


def test_the_main_groups_name_selects_for_any_command_and_a_commands_own_replaces_it(servo) -> None:
    write_apps(
        servo,
        ("acme.com/web", [command("probe", ready="true")]),
        ("acme.com/db", [command("probe", ready="true", down="false")]),
    )
    db = servo.run("-n", "acme.com/db", "check", "-n", "down", "--json")
    assert db.returncode == 1
    assert names(json.loads(db.stdout)) == ["down"]
    web = servo.run("--app", "acme.com/db", "check", "--app", "acme.com/web", "--json")
    assert web.returncode == 0, web.stderr
    assert json.loads(web.stdout)["data"]["checks"][0]["name"] == "ready"
    # The command line wins over SERVO_NAME; and the main group's choice reaches any command.
    described = servo.run("--app", "acme.com/web", "config", "--format", "json", SERVO_NAME="acme.com/db")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout)[0]["optimizer"]["id"] == "acme.com/web"


def test_connector_arguments_check_only_those_and_an_unknown_one_exits_2(servo) -> None:
    servo.write_config(command("probe", later="false"), command("other", fine="true"), optimizer=OPTIMIZER)
    result, payload = servo.run_json("check", "other")
    assert result.returncode == 0, result.stderr
    assert list(payload["connectors"]) == ["other"]
    assert names(payload) == ["fine"]  # no identity row either: only the connectors named
    unknown = servo.run("check", "nope", "other")
    assert unknown.returncode == 2
    assert "error: unknown connector(s) nope (configured: probe, other)" in unknown.stderr


def test_the_checks_section_is_the_default_and_an_option_wins(servo, kit) -> None:
    servo.write_config(
        command("probe", ready="false", later="true"),
        command("other", fine="true"),
        checks={"connectors": ["probe"], "halt_on": "common", "verbose": True},
    )
    result, payload = servo.run_json("check")
    assert result.returncode == 1
    assert list(payload["connectors"]) == ["probe"]
    assert [c["outcome"] for c in payload["data"]["checks"]] == ["failed", "skipped"]  # halt_on: common
    table = servo.run("check")
    assert kit.table_rows(table.stdout)[0][:4] == ["CONNECTOR", "CHECK", "ID", "TAGS"]  # verbose: true

    result, payload = servo.run_json("check", "--halt-on", "critical", "probe", "other")
    assert [(c["name"], c["outcome"]) for c in payload["data"]["checks"]] == [
        ("ready", "failed"),
        ("later", "passed"),
        ("fine", "passed"),
    ]
    plain = servo.run("check", "--no-verbose", "other")
    assert plain.returncode == 0, plain.stderr
    assert kit.table_rows(plain.stdout)[0] == ["CONNECTOR", "CHECK", "RESULT", "MESSAGE"]


def test_run_check_takes_the_sections_wait_and_filters_but_runs_every_connector(servo, kit) -> None:
    servo.write_config(
        command("probe", flaky=THIRD_TIME_LUCKY, broken="false"),
        command("other", fine="true"),
        optimizer=OPTIMIZER,
        checks={"wait": "1m", "delay": "100ms", "name": ["flaky", "fine"], "connectors": ["other"]},
    )
    result = servo.run("run", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert [row[:3] for row in kit.table_rows(result.stdout)[1:]] == [
        ["probe", "flaky", "ok"],
        ["other", "fine", "ok"],
    ]
    assert result.stderr.count("checks: round") == 2
    # Options win: with a delay longer than the wait, the second run starts at the deadline and no
    # third one can follow it, however fast the runs are.
    (servo.dir / "count").unlink()
    short = servo.run("run", "--dry-run", "--wait", "150ms", "--delay", "1s")
    assert short.returncode == 1
    assert "connector 'probe': flaky:" in short.stderr
