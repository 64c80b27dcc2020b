"""Several applications from one server, and the admin token, over real HTTP and as real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from servo_actors.errors import ConfigError
from servo_actors.optimizer.application import Application
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.optimizer.server import OptimizerServer

HTTP_TIMEOUT = 10.0
EXIT_TIMEOUT = 20.0
STARTUP_TIMEOUT = 20.0
ADMIN_TOKEN = "adm1n-t0ken"
MEASURE = [{"cmd": "MEASURE", "param": {"control": {"duration": 1}}}]


def script(app: str) -> Application:
    driver = ScriptedDriver.from_plan({"app": app, "script": MEASURE, "sleep": "1s"})
    return Application(driver, app=app)


def envelope(event: str, param: object = None) -> dict:
    return {"event": event, "param": param, "servo_uid": None}


@pytest.fixture
def two_apps():
    server = OptimizerServer(
        applications=[script("example.com/a"), script("example.com/b")], admin_token=ADMIN_TOKEN
    ).start()
    yield server
    server.stop()


def post(url: str, body: object, token: str | None = None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.post(url, json=body, headers=headers, timeout=HTTP_TIMEOUT)


@pytest.mark.timeout(30)
def test_each_application_has_its_own_endpoint_state_and_abort(two_apps):
    server = two_apps
    a = server.url + "/accounts/example.com/applications/a/servo"
    b = server.url + "/accounts/example.com/applications/b/servo"
    uid_a = post(a, envelope("WHATS_NEXT")).json()["cmd_uid"]
    uid_b = post(b, envelope("WHATS_NEXT")).json()["cmd_uid"]
    assert uid_a == uid_b == "c1"  # each application counts its own commands

    apps = requests.get(server.url + "/admin/apps", timeout=HTTP_TIMEOUT).json()
    assert [x["app"] for x in apps["apps"]] == ["example.com/a", "example.com/b"]
    assert apps["admin_token_required"] is True
    assert all(x["current"]["cmd"] == "MEASURE" for x in apps["apps"])

    # Abort on a: only a's command is answered cancel; b's progress goes on.
    armed = post(server.url + "/admin/cancel?app=example.com/a", {}, ADMIN_TOKEN).json()
    assert armed["armed"] is True and armed["app"] == "example.com/a"
    assert post(b, envelope("MEASUREMENT", {"progress": 5, "cmd_uid": uid_b})).json()["status"] == "ok"
    assert post(a, envelope("MEASUREMENT", {"progress": 5, "cmd_uid": uid_a})).json()["status"] == "cancel"
    state_a = requests.get(server.url + "/admin/state?app=example.com/a", timeout=HTTP_TIMEOUT).json()
    state_b = requests.get(server.url + "/admin/state?app=example.com/b", timeout=HTTP_TIMEOUT).json()
    assert state_a["app"] == "example.com/a" and state_b["app"] == "example.com/b"
    assert [e["event"] for e in state_a["history"]] == ["WHATS_NEXT", "MEASUREMENT"]
    assert [e["reply"]["status"] for e in state_b["history"][1:]] == ["ok"]
    # The body's "app" names the application too.
    named = post(server.url + "/admin/cancel", {"app": "example.com/b"}, ADMIN_TOKEN).json()
    assert named["app"] == "example.com/b" and named["armed"] is True


@pytest.mark.timeout(30)
def test_which_application_is_meant_must_be_clear(two_apps):
    server = two_apps
    unknown = post(server.url + "/accounts/example.com/applications/c/servo", envelope("WHATS_NEXT"))
    assert unknown.status_code == 404
    assert (
        "no application example.com/c here (served: example.com/a, example.com/b)" in unknown.json()["detail"]
    )
    bare = post(server.url + "/servo", envelope("WHATS_NEXT"))
    assert bare.status_code == 404 and "several applications" in bare.json()["detail"]
    state = requests.get(server.url + "/admin/state", timeout=HTTP_TIMEOUT)
    assert state.status_code == 400 and "example.com/a, example.com/b" in state.json()["detail"]
    assert requests.get(server.url + "/admin/state?app=x.y/z", timeout=HTTP_TIMEOUT).status_code == 404
    assert post(server.url + "/admin/cancel", {}, ADMIN_TOKEN).status_code == 400
    with pytest.raises(ConfigError, match="given twice"):
        OptimizerServer(applications=[script("example.com/a"), script("example.com/a")])


@pytest.mark.timeout(30)
def test_the_admin_token_guards_every_post_and_never_shows(two_apps):
    server = two_apps
    for token in (None, "wrong"):
        refused = post(server.url + "/admin/cancel?app=example.com/a", {}, token)
        assert refused.status_code == 401 and "admin token" in refused.json()["detail"]
    assert post(server.url + "/admin/nothing", {}, None).status_code == 401
    assert post(server.url + "/admin/nothing", {}, ADMIN_TOKEN).status_code == 404
    spelled = requests.post(
        server.url + "/admin/cancel?app=example.com/a",
        json={},
        headers={"X-Admin-Token": ADMIN_TOKEN},
        timeout=HTTP_TIMEOUT,
    )
    assert spelled.status_code == 200
    # GET is open and read-only; the token appears nowhere.
    for path in ("/admin/apps", "/admin/state?app=example.com/a", "/"):
        answer = requests.get(server.url + path, timeout=HTTP_TIMEOUT)
        assert answer.status_code == 200 and ADMIN_TOKEN not in answer.text


@pytest.mark.timeout(30)
def test_one_application_keeps_the_old_routes():
    server = OptimizerServer(script("example.com/web").driver, app="example.com/web").start()
    try:
        assert post(server.url + "/servo", envelope("WHATS_NEXT")).json()["cmd"] == "MEASURE"
        assert (
            requests.get(server.url + "/admin/state", timeout=HTTP_TIMEOUT).json()["app"] == "example.com/web"
        )
        assert post(server.url + "/admin/cancel", {}).json()["armed"] is True  # no admin token: open
    finally:
        server.stop()


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "servo_actors", *args]


def start_serve(*args: str) -> tuple[subprocess.Popen, list[str]]:
    process = subprocess.Popen(
        cli("optimizer", "serve", "--port", "0", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.startswith("console:"):
            return process, lines
    process.kill()
    out, err = process.communicate(timeout=EXIT_TIMEOUT)
    raise AssertionError(f"serve did not start: {lines} {out} {err}")


@pytest.mark.timeout(90)
def test_serve_takes_a_folder_of_plans_a_state_folder_and_an_admin_token_file(tmp_path: Path):
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "a.yaml").write_text("app: example.com/a\nsteps: 2\nobjective: {minimize: cost}\n")
    (plans / "b.yml").write_text("app: example.com/b\nscript: []\n")
    (plans / "notes.txt").write_text("not a plan")
    states = tmp_path / "states"
    states.mkdir()
    token_file = tmp_path / "admin.token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    process, lines = start_serve(
        "--plan", str(plans), "--state", str(states), "--admin-token-file", str(token_file)
    )
    try:
        url = lines[0].rsplit(" ", 1)[-1]
        assert lines[0] == f"embedded optimizer for example.com/a, example.com/b: {url}"
        assert f"servo endpoint for example.com/b: {url}/accounts/example.com/applications/b/servo" in lines
        assert "read-only" in lines[-1] and ADMIN_TOKEN not in "\n".join(lines)
        # The search plan's state goes to its own file in the folder.
        post(f"{url}/accounts/example.com/applications/a/servo", envelope("WHATS_NEXT"))
        describe = {
            "status": "ok",
            "reason": "success",
            "cmd_uid": "c1",
            "descriptor": {"application": {"components": {}}},
        }
        post(f"{url}/accounts/example.com/applications/a/servo", envelope("DESCRIPTION", describe))
        post(f"{url}/accounts/example.com/applications/a/servo", envelope("WHATS_NEXT"))
        # optimizer cancel: the admin token from its file, the app by name.
        refused = subprocess.run(
            cli("optimizer", "cancel", "--url", url, "--app", "example.com/a"),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert refused.returncode == 1 and "401" in refused.stderr and ADMIN_TOKEN not in refused.stderr
        accepted = subprocess.run(
            cli(
                "optimizer",
                "cancel",
                "--url",
                url,
                "--app",
                "example.com/a",
                "--admin-token-file",
                str(token_file),
            ),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert accepted.returncode == 0, accepted.stderr
        assert "MEASURE c2 will be answered cancel" in accepted.stdout
        result = {"status": "ok", "reason": "success", "cmd_uid": "c2", "metrics": {}, "annotations": {}}
        answer = post(f"{url}/accounts/example.com/applications/a/servo", envelope("MEASUREMENT", result))
        assert answer.json()["status"] == "cancel"
        post(f"{url}/accounts/example.com/applications/a/servo", envelope("WHATS_NEXT"))  # step 0 recorded
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=EXIT_TIMEOUT)
    assert process.returncode == 0, err
    assert (states / "example.com_a.json").is_file() and not (states / "example.com_b.json").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("files", "extra", "says"),
    [
        (
            {"a.yaml": "app: example.com/a\nscript: []\n", "b.yaml": "app: example.com/a\nscript: []\n"},
            (),
            "application example.com/a is also in",
        ),
        (
            {"a.yaml": "app: example.com/a\nscript: []\n"},
            ("--admin-token-file", "{dir}/empty.token"),
            "the admin token file is empty",
        ),
        (
            {
                "a.yaml": "app: example.com/a\nsteps: 1\nobjective: {minimize: cost}\n",
                "b.yaml": "app: example.com/b\nscript: []\n",
            },
            ("--state", "{dir}/state.json"),
            "--state must be an existing folder",
        ),
        ({}, (), "no plan files"),
    ],
)
def test_bad_applications_exit_2_naming_what_is_wrong(tmp_path: Path, files, extra, says):
    plans = tmp_path / "plans"
    plans.mkdir()
    for name, text in files.items():
        (plans / name).write_text(text)
    (tmp_path / "empty.token").write_text("\n")
    args = [arg.format(dir=tmp_path) for arg in extra]
    result = subprocess.run(
        cli("optimizer", "serve", "--port", "0", "--plan", str(plans), *args),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
