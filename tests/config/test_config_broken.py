"""Broken configurations through the real CLI: each exits 2 with a line naming the key at fault.

The table is the specification of what users see. A case gives the file (None: no file at all),
the environment, other files to create next to it, and the text the message must contain (the
source and the key path, so a message that names the wrong key fails).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parent / "plugins"
SUBPROCESS_TIMEOUT = 30  # seconds; a CLI start takes well under one


@dataclass
class Case:
    id: str
    yaml: str | None
    expected: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


BASE_OPTIMIZER = "optimizer: {id: example.com/web}\n"

CASES = [
    Case(
        "optimizer-without-id",
        "optimizer: {base_url: 'http://127.0.0.1:8085'}",
        ["servo.yaml: optimizer.id: is required"],
    ),
    Case(
        "bad-org", "optimizer: {id: ab/web}", ["servo.yaml: optimizer.id: ORG 'ab' must be 5-50 characters"]
    ),
    Case("org-starts-with-dash", "optimizer: {id: -example.com/web}", ["optimizer.id: ORG '-example.com'"]),
    Case(
        "bad-app",
        "optimizer: {id: 'example.com/we b'}",
        ["servo.yaml: optimizer.id: APP 'we b' must be 1-64"],
    ),
    Case("id-not-org-app", "optimizer: {id: example.com}", ["optimizer.id: 'example.com' is not ORG/APP"]),
    Case(
        "bad-base-url",
        "optimizer: {id: example.com/web, base_url: 'ftp://127.0.0.1'}",
        ["optimizer.base_url: 'ftp://127.0.0.1' is not an http(s) URL"],
    ),
    Case(
        "bad-url",
        "optimizer: {id: example.com/web, url: 127.0.0.1/x}",
        ["optimizer.url: '127.0.0.1/x' is not an http(s) URL"],
    ),
    Case(
        "token-and-token-file",
        "optimizer: {id: example.com/web, token: abcdefgh, token_file: tok}",
        ["servo.yaml: optimizer: set token or token_file, not both"],
    ),
    Case(
        "optimizer-not-a-mapping",
        "optimizer: example.com/web",
        ["servo.yaml: optimizer: must be a mapping, not 'example.com/web'"],
    ),
    Case(
        "unknown-top-level-key",
        "optimiser: {id: example.com/web}",
        ["servo.yaml: optimiser: unknown key (expected one of: optimizer, servo_uid"],
    ),
    Case(
        "unknown-nested-key",
        "settings: {timeouts: {conect: 5s}}",
        ["servo.yaml: settings.timeouts.conect: unknown key (expected one of: connect, read)"],
    ),
    Case(
        "bad-duration",
        "settings: {backoff: {min: fast}}",
        ["servo.yaml: settings.backoff.min: not a duration: 'fast'"],
    ),
    Case(
        "negative-duration",
        "supervisor: {period: -5}",
        ["servo.yaml: supervisor.period: a duration cannot be negative"],
    ),
    Case(
        "zero-progress-interval",
        "settings: {progress_interval: 0}",
        ["settings.progress_interval: must be more than 0"],
    ),
    Case(
        "backoff-min-above-max",
        "settings: {backoff: {min: 2m, max: 1m}}",
        ["servo.yaml: settings.backoff: min must not exceed max"],
    ),
    Case(
        "bad-strategy",
        "supervisor: {strategy: one_for_some}",
        [
            "servo.yaml: supervisor.strategy: must be 'one_for_one', 'one_for_all' or 'rest_for_one', not 'one_for_some'"
        ],
    ),
    Case(
        "negative-max-restarts",
        "supervisor: {max_restarts: -1}",
        ["servo.yaml: supervisor.max_restarts: must be greater than or equal to 0, not -1"],
    ),
    Case(
        "max-restarts-not-int",
        "supervisor: {max_restarts: many}",
        ["supervisor.max_restarts: must be an integer, not 'many'"],
    ),
    Case(
        "jitter-above-one",
        "supervisor: {restart_backoff: {jitter: 2}}",
        ["supervisor.restart_backoff.jitter: must be less than or equal to 1"],
    ),
    Case(
        "connectors-not-a-list",
        "connectors: {prom: {type: prometheus}}",
        ["servo.yaml: connectors: must be a list, not a mapping"],
    ),
    Case(
        "connector-without-type",
        "connectors: [{name: a}]",
        ["servo.yaml: connectors[0].type: is required but missing"],
    ),
    Case(
        "connector-bad-name",
        "connectors: [{name: 'has space', type: 'servo_actors.connectors.base:Connector'}]",
        ["connectors[0].name: must match the pattern"],
    ),
    Case(
        "unknown-connector-type",
        "connectors:\n  - {name: a, type: 'servo_actors.connectors.base:Connector'}\n  - {name: b, type: foo}",
        ["servo.yaml: connectors[1].type: unknown connector type 'foo'"],
    ),
    Case(
        "connector-module-missing",
        "connectors: [{name: a, type: 'nope.nothing:Connector'}]",
        [
            "servo.yaml: connectors[0].type: connector type 'nope.nothing:Connector': cannot import nope.nothing"
        ],
    ),
    Case(
        "connector-module-raises",
        "connectors: [{name: a, type: 'sa_test_connectors.broken_import:X'}]",
        ["connectors[0].type:", "this plugin is broken on purpose"],
    ),
    Case(
        "connector-not-a-connector",
        "connectors: [{name: a, type: 'sa_test_connectors:NotAConnector'}]",
        ["connectors[0].type:", "is not a Connector subclass"],
    ),
    Case(
        "bad-restart-type",
        "connectors: [{name: a, type: 'servo_actors.connectors.base:Connector', restart: never}]",
        ["servo.yaml: connectors[0].restart: must be 'permanent', 'transient' or 'temporary', not 'never'"],
    ),
    Case(
        "bad-connector-shutdown-timeout",
        "connectors: [{name: a, type: 'servo_actors.connectors.base:Connector', shutdown_timeout: soon}]",
        ["connectors[0].shutdown_timeout: not a duration: 'soon'"],
    ),
    Case(
        "duplicate-connector-names",
        "connectors:\n  - {name: a, type: 'servo_actors.connectors.base:Connector'}\n  - {name: a, type: 'servo_actors.connectors.base:Connector'}",
        ["servo.yaml: connectors: connector name 'a' is used twice"],
    ),
    Case(
        "connector-config-missing-field",
        "connectors: [{name: s, type: 'sa_test_connectors:StrictConnector', config: {}}]",
        ["servo.yaml: connectors[0].config.url: is required but missing"],
    ),
    Case(
        "connector-config-nested-bad",
        "connectors: [{name: s, type: sa-strict, config: {url: x, limits: {count: 0, period: later}}}]",
        [
            "servo.yaml: connectors[0].config.limits.count: must be greater than or equal to 1, not 0",
            "servo.yaml: connectors[0].config.limits.period: not a duration: 'later'",
        ],
    ),
    Case(
        "connector-config-unknown-key",
        "connectors: [{name: s, type: sa-strict, config: {url: x, urls: y}}]",
        ["connectors[0].config.urls: unknown key (expected one of: url, api_token, limits)"],
    ),
    Case(
        "connector-config-not-a-mapping",
        "connectors: [{name: s, type: sa-strict, config: [url]}]",
        ["servo.yaml: connectors[0].config: must be a mapping, not a list"],
    ),
    Case(
        "connector-config-model-crashes",
        "connectors: [{name: s, type: 'sa_test_connectors:CrashingModelConnector'}]",
        [
            "connectors[0].config: CrashingModelConnector.config_model failed: TypeError: a bug in this config model"
        ],
    ),
    Case(
        "top-level-not-a-mapping",
        "- optimizer\n- connectors\n",
        ["servo.yaml: the top level must be a mapping", "not a list"],
    ),
    Case(
        "yaml-syntax-error",
        "optimizer:\n  id: example.com/web\n   base_url: x\n",
        ["servo.yaml: line 3, column"],
    ),
    Case(
        "yaml-duplicate-key",
        "optimizer: {id: example.com/web}\nsettings: {}\noptimizer: {id: example.com/api}\n",
        ["servo.yaml: line 3, column 1: duplicate key 'optimizer' (first written at line 1)"],
    ),
    Case("missing-file", None, ["servo.yaml: no such file"]),
    Case(
        "token-file-unreadable",
        BASE_OPTIMIZER.replace("}", ", token_file: no-such-token}"),
        ["optimizer.token_file: cannot read", "no-such-token", "No such file"],
    ),
    Case(
        "token-file-empty",
        BASE_OPTIMIZER.replace("}", ", token_file: token}"),
        ["optimizer.token_file: ", "is empty"],
        files={"token": "  \n"},
    ),
    Case(
        "empty-token",
        "optimizer: {id: example.com/web, token: ''}",
        ["servo.yaml: optimizer.token: is empty"],
    ),
    Case(
        "env-bad-optimizer",
        "",
        ["env OPSANI_OPTIMIZER: optimizer.id: ORG 'ab'"],
        env={"OPSANI_OPTIMIZER": "ab/web"},
    ),
    Case(
        "env-bad-base-url",
        BASE_OPTIMIZER,
        ["env OPSANI_BASE_URL: optimizer.base_url: 'api.example.com' is not an http(s) URL"],
        env={"OPSANI_BASE_URL": "api.example.com"},
    ),
    Case(
        "env-both-tokens",
        BASE_OPTIMIZER,
        ["environment: set OPSANI_TOKEN or OPSANI_TOKEN_FILE, not both"],
        env={"OPSANI_TOKEN": "abcdefgh", "OPSANI_TOKEN_FILE": "tok"},
    ),
    Case(
        "env-token-file-unreadable",
        BASE_OPTIMIZER,
        ["env OPSANI_TOKEN_FILE: optimizer.token_file: cannot read"],
        env={"OPSANI_TOKEN_FILE": "/nonexistent/token"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_broken_config_exits_2_naming_the_key(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli, test_plugins
) -> None:
    path = tmp_path / "servo.yaml"
    if case.yaml is not None:
        path.write_text(textwrap.dedent(case.yaml), encoding="utf-8")
    for name, text in case.files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    # Run from tmp_path with the default file name, as a user would: messages say "servo.yaml".
    monkeypatch.chdir(tmp_path)
    result = run_cli(["validate"], env=case.env)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stdout == ""
    for text in case.expected:
        assert text in result.stderr
    assert "Traceback" not in result.stderr
    assert all(line.startswith("error: ") for line in result.stderr.splitlines()), result.stderr


def test_every_problem_is_listed_one_per_line(write_config, run_cli) -> None:
    path = write_config(
        """\
        optimizer: {id: ab/web}
        bogus: 1
        settings: {backoff: {min: fast}}
        supervisor: {strategy: nope}
        connectors: [{name: a, type: foo}]
        """.replace("        ", "")
    )
    result = run_cli(["-c", str(path), "validate"])
    assert result.exit_code == 2
    keys = ["optimizer.id", "bogus", "settings.backoff.min", "supervisor.strategy", "connectors[0].type"]
    lines = result.stderr.splitlines()
    assert len(lines) == len(keys)
    for key in keys:
        assert sum(f"{path}: {key}: " in line for line in lines) == 1, (key, lines)


def test_secret_values_are_never_echoed_in_errors(write_config, run_cli, test_plugins) -> None:
    path = write_config(
        """\
optimizer: {id: example.com/web, token: [s3cr3t-in-a-list]}
connectors: [{name: s, type: sa-strict, config: {url: x, api_token: {nested: hunter2-secret}}}]
"""
    )
    result = run_cli(["-c", str(path), "validate"])
    assert result.exit_code == 2
    assert "optimizer.token: must be a string, not a list (value hidden)" in result.stderr
    assert "connectors[0].config.api_token:" in result.stderr
    assert "s3cr3t" not in result.stderr and "hunter2" not in result.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("optimizer:\n  id: example.com/web\n   base_url: x\n", "servo.yaml: line 3, column"),
        (
            "connectors: [{name: s, type: sa-strict, config: {}}]",
            "servo.yaml: connectors[0].config.url: is required",
        ),
    ],
    ids=["yaml-syntax", "plugin-config-model"],
)
def test_broken_config_in_a_real_process(tmp_path: Path, yaml_text: str, expected: str) -> None:
    (tmp_path / "servo.yaml").write_text(yaml_text, encoding="utf-8")
    env = {**_clean_env(), "PYTHONPATH": str(PLUGINS)}
    result = subprocess.run(
        [sys.executable, "-m", "servo_actors", "validate"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.timeout(60)
def test_missing_file_in_a_real_process(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "servo_actors", "config"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: servo.yaml: no such file (give the path with -c/--config or SERVO_CONFIG)"
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPSANI_", "SERVO_"))}
