"""Several applications in one servo.yaml: one YAML document each (issue 36).

One document works exactly as before; several each need an optimizer (ORG/APP unique), may set
their own settings, supervisor and connectors (names unique within one application), and every
mistake names the document (its index and application) and the key.
"""

from __future__ import annotations

import json

import pytest

from servo_actors.config import load_apps, load_config
from servo_actors.connectors.registry import connector_settings_problems
from servo_actors.errors import ConfigError

TWO = """\
optimizer: {id: acme.com/web, token: web-secret-token}
connectors:
  - {name: app, type: synthetic}
---
optimizer: {id: acme.com/db, token: db-secret-token}
settings: {progress_interval: 2s}
supervisor: {max_restarts: 2}
connectors:
  - {name: app, type: synthetic}
  - {name: pause, type: wait}
"""


def _problems(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return [str(problem) for problem in exc.value.problems]  # type: ignore[attr-defined]


def test_one_document_is_one_application_as_before(write_config) -> None:
    path = write_config("optimizer: {id: example.com/web}\nconnectors: [{name: a, type: wait}]\n")
    apps = load_apps(path, connector_check=connector_settings_problems)
    assert not apps.several and len(apps) == 1
    assert apps.first.document is None and apps.first.app == "example.com/web"
    assert load_config(path, connector_check=connector_settings_problems) == apps.first


def test_a_file_without_optimizer_is_still_one_application(write_config) -> None:
    apps = load_apps(
        write_config("connectors: [{name: a, type: wait}]\n"), connector_check=connector_settings_problems
    )
    assert apps.names == [] and apps.first.app is None


def test_several_documents_each_with_their_own_sections(write_config) -> None:
    apps = load_apps(write_config(TWO), connector_check=connector_settings_problems)
    assert apps.several and apps.names == ["acme.com/web", "acme.com/db"]
    web, db = apps
    assert (web.document, db.document) == (1, 2)
    assert web.settings.progress_interval == 5.0 and db.settings.progress_interval == 2.0
    assert web.supervisor.max_restarts == 5 and db.supervisor.max_restarts == 2
    assert [spec.name for spec in db.connectors] == ["app", "pause"]  # "app" in both: fine


def test_a_trailing_empty_document_is_ignored(write_config) -> None:
    assert len(load_apps(write_config(TWO + "---\n"), connector_check=connector_settings_problems)) == 2


def test_load_config_refuses_several_naming_them(write_config) -> None:
    with pytest.raises(ConfigError, match=r"holds 2 applications \(acme.com/web, acme.com/db\)"):
        load_config(write_config(TWO), connector_check=connector_settings_problems)


def test_selection_by_app_and_unknown_app_names_the_known_ones(write_config) -> None:
    apps = load_apps(write_config(TWO), connector_check=connector_settings_problems)
    assert [c.app for c in apps.select(["acme.com/db"])] == ["acme.com/db"]
    assert [c.app for c in apps.select([])] == ["acme.com/web", "acme.com/db"]
    with pytest.raises(
        ConfigError, match=r"no application 'x.com/y'.*known: acme.com/web, acme.com/db"
    ) as exc:
        apps.select(["acme.com/db", "x.com/y"])
    assert exc.value.exit_code == 2


def test_every_mistake_names_its_document_and_key(write_config) -> None:
    path = write_config(
        "optimizer: {id: acme.com/web}\n"
        "---\n"
        "optimizer: {id: acme.com/web}\n"
        "settings: {progress_interval: fast}\n"
        "connectors: [{name: a, type: wait}, {name: a, type: nosuch}]\n"
        "---\n"
        "connectors: []\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_apps(path, connector_check=connector_settings_problems)
    problems = _problems(exc)
    doc2 = f"{path} document 2 (acme.com/web)"
    assert f"{doc2}: optimizer.id: 'acme.com/web' is already the application of document 1" in problems
    assert any(p.startswith(f"{doc2}: settings.progress_interval: not a duration") for p in problems)
    assert f"{doc2}: connectors: connector name 'a' is used twice" in problems
    assert any(p.startswith(f"{doc2}: connectors[1].type: unknown connector type 'nosuch'") for p in problems)
    assert any(p.startswith(f"{path} document 3 (no optimizer.id): optimizer: is required") for p in problems)


def test_a_document_that_is_not_a_mapping_is_named(write_config) -> None:
    with pytest.raises(ConfigError, match=r"document 2: the top level must be a mapping"):
        load_apps(
            write_config("optimizer: {id: acme.com/web}\n---\n- a list\n"),
            connector_check=connector_settings_problems,
        )


def test_servo_wide_keys_are_the_first_documents(write_config) -> None:
    same = "settings: {metrics: {listen: '127.0.0.1:9911'}}\n"
    ok = write_config("optimizer: {id: acme.com/a}\n" + same + "---\noptimizer: {id: acme.com/b}\n" + same)
    assert len(load_apps(ok, connector_check=connector_settings_problems)) == 2
    other = write_config(
        "optimizer: {id: acme.com/a}\n---\noptimizer: {id: acme.com/b}\nsupervisor: {run_dir: /tmp/x}\n",
        name="other.yaml",
    )
    with pytest.raises(
        ConfigError, match=r"document 2 \(acme.com/b\): supervisor.run_dir: belongs to the whole servo"
    ):
        load_apps(other, connector_check=connector_settings_problems)


def test_environment_naming_one_app_is_refused_with_several(write_config) -> None:
    path = write_config(TWO)
    with pytest.raises(ConfigError, match="OPSANI_OPTIMIZER name one application"):
        load_apps(
            path, env={"OPSANI_OPTIMIZER": "acme.com/other"}, connector_check=connector_settings_problems
        )
    apps = load_apps(
        path,
        env={"OPSANI_TOKEN": "shared-token", "SERVO_UID": "u1"},
        connector_check=connector_settings_problems,
    )
    assert all(c.optimizer is not None and c.optimizer.token is not None for c in apps)
    assert {c.optimizer.token.get_secret_value() for c in apps if c.optimizer and c.optimizer.token} == {
        "shared-token"
    }
    assert {c.servo_uid for c in apps} == {"u1"}


def test_validate_config_and_schema_cover_several(write_config, run_cli) -> None:
    path = str(write_config(TWO))
    result = run_cli(["-c", path, "validate"])
    assert result.exit_code == 0
    assert (
        "2 applications" in result.output
        and "document 2: 2 connector(s): app, pause; optimizer acme.com/db" in result.output
    )

    shown = run_cli(["-c", path, "config"])
    assert shown.exit_code == 0
    assert "web-secret-token" not in shown.output and "db-secret-token" not in shown.output
    assert shown.output.count("**********") == 2 and "\n---\n" in shown.output

    as_json = run_cli(["-c", path, "config", "--format", "json"])
    documents = json.loads(as_json.output)
    assert [d["optimizer"]["id"] for d in documents] == ["acme.com/web", "acme.com/db"]
    assert "secret-token" not in as_json.output

    picked = run_cli(["-c", path, "config", "--app", "acme.com/db"])
    assert "acme.com/db" in picked.output and "acme.com/web" not in picked.output

    schema = json.loads(run_cli(["schema"]).output)
    assert "several documents" in schema["$comment"]


def test_validate_names_the_document_and_exits_2(write_config, run_cli) -> None:
    path = str(write_config("optimizer: {id: acme.com/a}\n---\noptimizer: {id: acme.com/a}\n"))
    result = run_cli(["-c", path, "validate"])
    assert result.exit_code == 2
    assert "document 2 (acme.com/a): optimizer.id:" in result.output


def test_unknown_app_exits_2_naming_the_known_ones(write_config, run_cli) -> None:
    result = run_cli(["-c", str(write_config(TWO)), "describe", "--app", "nope.com/x"])
    assert result.exit_code == 2
    assert "no application 'nope.com/x'" in result.output and "acme.com/web, acme.com/db" in result.output
