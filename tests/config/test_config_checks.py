"""servo.yaml's ``checks`` section (issue 37): its values, servox's keys it refuses with a reason,
the connectors it names, and ``config --sources`` naming where each value came from."""

from __future__ import annotations

import json

import pytest

from servo_actors.config import load_config
from servo_actors.config.checks_section import ChecksConfig
from servo_actors.connectors.registry import connector_settings_problems
from servo_actors.errors import ConfigError

CONNECTORS = """\
connectors:
  - {name: probe, type: command, config: {check: {ready: 'true'}}}
  - {name: other, type: command, config: {check: {fine: 'true'}}}
"""


def test_a_checks_section_is_read_with_servox_spellings(write_config) -> None:
    text = (
        CONNECTORS
        + "checks: {name: 'ready,/fi/', tag: net, wait: 5m, delay: expo, halt_on: common, connectors: [other]}\n"
    )
    config = load_config(write_config(text), env={}, connector_check=connector_settings_problems)
    checks = config.checks
    assert (checks.name, checks.tag, checks.connectors) == (["ready", "/fi/"], ["net"], ["other"])
    assert (checks.wait, checks.delay, checks.halt_on) == (300.0, "expo", "common")
    assert load_config(write_config(CONNECTORS), env={}).checks == ChecksConfig()


def test_servox_keys_with_no_meaning_here_and_bad_values_are_refused_naming_each(write_config) -> None:
    text = CONNECTORS + "checks: {remedy: true, check_halting: false, delay: 1ms, wait: 0, typo: 1}\n"
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(text), env={})
    message = str(caught.value)
    assert "checks.remedy: servox's key, not a setting here: servox ran a failed check's remedy" in message
    assert "checks.check_halting: servox's key, not a setting here" in message
    assert "checks.delay: must be at least 100ms (or 'expo')" in message
    assert "checks.wait: must be more than 0" in message
    assert (
        "checks.typo: unknown key (expected one of: connectors, name, id, tag, quiet, verbose, wait"
        in message
    )
    assert "remedy, " not in message.split("expected one of:")[1]  # refused keys are not offered


def test_checks_connectors_must_be_connectors_of_the_document(write_config) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(CONNECTORS + "checks: {connectors: [other, nope]}\n"), env={})
    assert "checks: connectors: no connector 'nope' in this configuration (known: probe, other)" in str(
        caught.value
    )


def test_config_sources_names_the_file_or_default_for_each_checks_value(run_cli, write_config) -> None:
    path = write_config(CONNECTORS + "checks: {name: 'ready,fine', wait: 2m}\n")
    result = run_cli(["-c", str(path), "config", "--sources", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    rows = {row["key"]: (row["value"], row["source"]) for row in json.loads(result.output)}
    assert rows["checks.wait"] == ("2m", str(path))
    assert rows["checks.name[1]"] == ("fine", str(path))  # one string in the file, split
    assert rows["checks.delay"] == ("expo", "default")
    assert rows["checks.halt_on"] == ("critical", "default")
    assert not any(key.startswith(("checks.remedy", "checks.progressive")) for key in rows)
