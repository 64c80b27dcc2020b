"""The operation commands over several applications of one servo.yaml (issue 36): ``--app`` (also
``-n/--name`` and ``SERVO_NAME``) selects, one table per application, one JSON object per
application per line with an ``app`` key, ``--limit`` bounds how many run at once, and one
application's failure leaves the others' output whole."""

from __future__ import annotations

import json

import pytest
import yaml

pytestmark = pytest.mark.timeout(120)

SYNTHETIC = {"name": "app", "type": "synthetic", "config": {"time_scale": 0}}


def chaos(name: str, **config: object) -> dict[str, object]:
    return {"name": name, "type": "chaos", "config": config}


def write_apps(servo, *documents: tuple[str, list[dict[str, object]]]) -> None:
    servo.config_path.write_text(
        yaml.safe_dump_all(
            [{"optimizer": {"id": app}, "connectors": connectors} for app, connectors in documents],
            sort_keys=False,
        )
    )


def test_describe_json_is_one_line_per_application(servo) -> None:
    write_apps(
        servo,
        ("acme.com/web", [SYNTHETIC]),
        ("acme.com/db", [chaos("drill", metrics={"q": {"unit": "jobs"}})]),
    )
    result = servo.run("describe", "--json", "--limit", "1")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["app"] for line in lines] == ["acme.com/web", "acme.com/db"]
    assert list(lines[0]["connectors"]) == ["app"] and list(lines[1]["connectors"]) == ["drill"]
    assert lines[1]["data"]["metrics"] == {"q": {"unit": "jobs"}}


def test_describe_table_per_application_and_selection(servo, kit) -> None:
    write_apps(
        servo, ("acme.com/web", [SYNTHETIC]), ("acme.com/db", [chaos("drill")]), ("acme.com/ci", [chaos("x")])
    )
    result = servo.run("check", "--app", "acme.com/db", "-n", "acme.com/ci")
    assert result.returncode == 0, result.stderr
    assert "== acme.com/db ==" in result.stdout and "== acme.com/ci ==" in result.stdout
    assert "acme.com/web" not in result.stdout
    assert result.stdout.index("== acme.com/db ==") < result.stdout.index("== acme.com/ci ==")

    one = servo.run("describe", SERVO_NAME="acme.com/web")
    assert one.returncode == 0, one.stderr
    assert "==" not in one.stdout  # one application: the table exactly as with one document
    assert kit.table_rows(one.stdout)[0] == ["COMPONENT", "SETTING", "TYPE", "VALUE", "RANGE/VALUES", "UNIT"]


def test_one_failing_application_names_itself_and_the_others_are_shown(servo) -> None:
    write_apps(
        servo,
        ("acme.com/web", [SYNTHETIC]),
        ("acme.com/db", [chaos("drill", faults={"describe": {"action": "exit", "exit_code": 3}})]),
    )
    result = servo.run("describe", "--json")
    assert result.returncode == 1
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["app"], line["status"]) for line in lines] == [
        ("acme.com/web", "ok"),
        ("acme.com/db", "failed"),
    ]
    assert "error: acme.com/db: describe failed" in result.stderr
    assert "acme.com/web" not in result.stderr


def test_a_single_command_needs_a_selection_only_where_one_config_is_required(servo) -> None:
    write_apps(servo, ("acme.com/web", [SYNTHETIC]), ("acme.com/db", [SYNTHETIC]))
    result = servo.run("describe", "--app", "acme.com/nope")
    assert result.returncode == 2
    assert "no application 'acme.com/nope'" in result.stderr and "acme.com/web, acme.com/db" in result.stderr


def test_run_serves_the_application_app_selects(servo, kit) -> None:
    write_apps(servo, ("acme.com/web", [SYNTHETIC]), ("acme.com/db", [chaos("drill")]))
    several = servo.run("run", "--dry-run")
    assert several.returncode == 2
    assert "--dry-run take one application: choose it with --app ORG/APP" in several.stderr
    one = servo.run("run", "--dry-run", "--app", "acme.com/db")
    assert one.returncode == 0, one.stderr
    assert [row[:3] for row in kit.table_rows(one.stdout)[1:]] == [["drill", "drill is alive", "ok"]]


def test_sigterm_during_a_measure_over_several_applications_stops_all_of_them(servo, tmp_path, kit) -> None:
    import signal
    import subprocess

    markers = {app: tmp_path / f"{app.replace('/', '_')}.pid" for app in ("acme.com/web", "acme.com/db")}
    write_apps(
        servo,
        *(
            (
                app,
                [
                    {
                        "name": "script",
                        "type": "command",
                        "config": {"measure": f"echo $$ > {marker}; exec sleep 300"},
                    }
                ],
            )
            for app, marker in markers.items()
        ),
    )
    cli = servo.start("measure", "-d", "30s", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for marker in markers.values():
            kit.wait_until(
                lambda marker=marker: marker.exists() and marker.read_text().strip(), 60, what="measuring"
            )
        cli.send_signal(signal.SIGTERM)
        stdout, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode == 128 + signal.SIGTERM, stderr
    for app in markers:
        assert f"{app}: interrupted by SIGTERM: measure abandoned" in stderr
    assert "Traceback" not in stderr
