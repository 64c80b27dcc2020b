"""OptimizerAdminClient against a real embedded optimizer over real HTTP: state, cancel, the admin
token, several applications, and an optimizer that is not there or does not answer."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest
import requests

from servo_actors.errors import OptimizerError
from servo_actors.optimizer.application import Application
from servo_actors.optimizer.scripted import ScriptedDriver
from servo_actors.optimizer.server import OptimizerServer
from servo_actors.protocol.admin_client import OptimizerAdminClient, OptimizerAdminError

APP = "example.com/web"
ADMIN_TOKEN = "s3cret-adm1n-t0ken"
HTTP_TIMEOUT = 10.0
MEASURE = [{"cmd": "MEASURE", "param": {"control": {"duration": 1}}}]


def application(app: str = APP) -> Application:
    return Application(ScriptedDriver.from_plan({"app": app, "script": MEASURE, "sleep": "1s"}), app=app)


def servo_poll(server: OptimizerServer, app: str = APP) -> str:
    """The servo's WHATS_NEXT for ``app``: its MEASURE is then in flight; its cmd_uid."""
    org, name = app.split("/")
    endpoint = f"{server.url}/accounts/{org}/applications/{name}/servo"
    body = {"event": "WHATS_NEXT", "param": None, "servo_uid": None}
    return str(requests.post(endpoint, json=body, timeout=HTTP_TIMEOUT).json()["cmd_uid"])


def progress_reply(server: OptimizerServer, cmd_uid: str) -> str:
    body = {"event": "MEASUREMENT", "param": {"progress": 5, "cmd_uid": cmd_uid}, "servo_uid": None}
    return str(requests.post(server.servo_url, json=body, timeout=HTTP_TIMEOUT).json()["status"])


@pytest.fixture
def serve() -> Iterator[Callable[..., OptimizerServer]]:
    servers: list[OptimizerServer] = []

    def start(*apps: str, admin_token: str | None = None) -> OptimizerServer:
        applications = [application(app) for app in apps or (APP,)]
        server = OptimizerServer(applications=applications, admin_token=admin_token).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(30)
def test_state_shows_the_command_in_flight_and_cancel_arms_its_cancel(serve) -> None:
    server = serve()
    with OptimizerAdminClient(server.url + "/") as admin:  # a trailing / is ignored
        assert admin.base_url == server.url
        assert admin.state()["current"] is None
        uid = servo_poll(server)
        state = admin.state()
        assert state["current"]["cmd_uid"] == uid and state["current"]["cmd"] == "MEASURE"
        answer = admin.cancel(reason="test-abort", cmd_uid=uid)
        assert answer["armed"] is True and f"MEASURE {uid}" in answer["message"]
    assert progress_reply(server, uid) == "cancel"


@pytest.mark.timeout(30)
def test_cancel_of_a_command_no_longer_in_flight_arms_nothing(serve) -> None:
    server = serve()
    uid = servo_poll(server)
    with OptimizerAdminClient(server.url) as admin:
        answer = admin.cancel(cmd_uid="c99")
        assert answer["armed"] is False and "c99 is no longer in flight" in answer["message"]
    assert progress_reply(server, uid) != "cancel"


@pytest.mark.timeout(30)
def test_the_admin_token_is_sent_as_the_server_expects_it(serve) -> None:
    server = serve(admin_token=ADMIN_TOKEN)
    uid = servo_poll(server)
    with OptimizerAdminClient(server.url, admin_token=ADMIN_TOKEN) as admin:
        assert admin.cancel()["armed"] is True
        assert ADMIN_TOKEN not in repr(admin)
    assert progress_reply(server, uid) == "cancel"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("token", ["wrong-t0ken", None])
def test_a_wrong_or_missing_token_is_one_error_naming_the_url_never_the_token(serve, token) -> None:
    server = serve(admin_token=ADMIN_TOKEN)
    uid = servo_poll(server)
    with OptimizerAdminClient(server.url, admin_token=token) as admin:
        with pytest.raises(OptimizerAdminError) as raised:
            admin.cancel(cmd_uid=uid)
        assert admin.state()["current"]["cmd_uid"] == uid  # GET stays open without the token
    error = raised.value
    assert isinstance(error, OptimizerError)  # the CLI's error policy: "error: ...", exit 1
    assert error.status == 401 and error.cause == "HTTPError"
    assert error.url == f"{server.url}/admin/cancel"
    assert str(error).startswith(f"{server.url}/admin/cancel answered HTTP 401: ")
    assert "admin token" in str(error)
    assert ADMIN_TOKEN not in str(error) and (token is None or token not in str(error))
    assert progress_reply(server, uid) != "cancel"


@pytest.mark.timeout(30)
def test_several_applications_are_named_by_app(serve) -> None:
    server = serve("example.com/a", "example.com/b")
    uid_b = servo_poll(server, "example.com/b")
    with OptimizerAdminClient(server.url) as admin:
        assert admin.state("example.com/a")["current"] is None
        assert admin.state("example.com/b")["current"]["cmd_uid"] == uid_b
        with pytest.raises(OptimizerAdminError) as unnamed:
            admin.cancel()
        assert unnamed.value.status == 400 and "example.com/a" in str(unnamed.value)
        with pytest.raises(OptimizerAdminError) as unknown:
            admin.state("example.com/nope")
        assert unknown.value.status == 404
        assert unknown.value.url == f"{server.url}/admin/state?app=example.com%2Fnope"
        assert admin.cancel(app="example.com/b")["armed"] is True


@pytest.mark.timeout(30)
def test_an_unreachable_optimizer_is_one_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with OptimizerAdminClient(url, admin_token=ADMIN_TOKEN, timeout=2.0) as admin:
        for call, path in ((admin.state, "/admin/state"), (admin.cancel, "/admin/cancel")):
            with pytest.raises(OptimizerAdminError) as raised:
                call()
            error = raised.value
            assert str(error) == f"cannot reach the optimizer at {url}{path}: ConnectionError"
            assert error.url == url + path and error.status is None and error.cause == "ConnectionError"
            assert ADMIN_TOKEN not in str(error)


@pytest.mark.timeout(30)
def test_an_optimizer_that_never_answers_is_given_up_after_the_timeout() -> None:
    # A real listening socket that accepts the connection (the backlog) but never answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with OptimizerAdminClient(url, timeout=0.5) as admin:
            began = time.monotonic()
            with pytest.raises(OptimizerAdminError) as raised:
                admin.state()
            took = time.monotonic() - began
    assert raised.value.cause == "ReadTimeout" and raised.value.url == f"{url}/admin/state"
    assert str(raised.value) == f"cannot reach the optimizer at {url}/admin/state: ReadTimeout"
    assert 0.4 < took < 5.0
