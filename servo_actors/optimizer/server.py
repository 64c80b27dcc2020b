"""OptimizerServer: the optimizer's side of the wire, embedded (demo, tests, local use).

::

    with OptimizerServer(ScriptedDriver.from_plan(plan), app="example.com/web") as server:
        print(server.servo_url)      # http://127.0.0.1:PORT/accounts/example.com/applications/web/servo
        ...                          # a servo talks to it; GET server.url + "/admin/state" shows it all

Several applications can be served at once (``OptimizerServer(applications=[...])``): each
``Application`` owns its envelope checks, token, cmd_uids, command in flight, cancel and request
history, with a lock of its own; the server owns HTTP (``web.py``), the listening socket and the
admin token. A ``Driver`` (driver.py) chooses each application's commands and judges their results.

Routes:

- ``POST {prefix}/accounts/{ORG}/applications/{APP}/servo``: the protocol (docs/protocol.md) for that
  application (404 naming the served ones for another). Any other path ending in ``/servo`` (a
  servo configured with an explicit ``url``) reaches the application when only one is served.
- ``GET /admin/apps``: the applications served (app, servo path, phase, command in flight) and
  whether ``POST /admin/*`` needs the admin token.
- ``GET /admin/state[?app=ORG/APP]``: one application's command in flight, its requests and
  replies with timestamps (bounded: large bodies only as a summary, the oldest entries dropped;
  see ``history.py``), and its driver's ``state()``. ``app`` may be left out when only one is served.
- ``POST /admin/cancel[?app=ORG/APP]`` (optional JSON body ``{"app", "reason", "message",
  "cmd_uid"}``): the next progress post of that application's command in flight is answered
  ``cancel``; if no progress post comes, its result post is. With ``cmd_uid``, only while that
  command is the one in flight (a press that comes too late never lands on the next command).
  Each cancel answered is recorded: ``/admin/state``'s ``cancels`` (which command, answered to
  its progress or its result, at what progress). With an admin token (``--admin-token-file``) every
  ``POST /admin/*`` must carry it (401 otherwise); ``GET`` routes stay open and read-only, so keep
  the server on loopback.
- ``GET /``: ``static/index.html`` when it exists (the console), else a short text page; files in
  ``static/`` are served under ``/static/``.

How an application answers the servo (its protocol state machine): see ``application.py``.

Malformed requests (not JSON, not the 3-key envelope, an unknown event) get 400 JSON, a body over
``web.MAX_BODY_BYTES`` 413, a missing or wrong token 401; a failing driver 500. The server thread
survives all of it.
"""

from __future__ import annotations

import hmac
import ssl
import threading
from collections.abc import Sequence
from typing import Any

from servo_actors.config.fields import split_optimizer_id
from servo_actors.errors import ConfigError
from servo_actors.optimizer.application import Application
from servo_actors.optimizer.driver import Driver
from servo_actors.optimizer.history import HISTORY_LIMIT
from servo_actors.optimizer.web import (
    DEFAULT_CANCEL_MESSAGE,
    DEFAULT_CANCEL_REASON,
    HttpServer,
)

__all__ = ["OptimizerServer", "SHUTDOWN_POLL_INTERVAL", "STOP_TIMEOUT"]


STOP_TIMEOUT = 5.0
"""Seconds ``stop()`` waits for the serving thread."""
SHUTDOWN_POLL_INTERVAL = 0.1
"""How often the accept loop checks for ``stop()``."""


class OptimizerServer:
    """The embedded optimizer on a ThreadingHTTPServer. Bound at construction; ``start()`` serves.

    ``OptimizerServer(driver, app=..., token=...)`` serves one application;
    ``OptimizerServer(applications=[Application(...), ...])`` several, each on its own servo path
    (``/accounts/ORG/applications/APP/servo``). With ``tls`` (a server-side ``ssl.SSLContext``
    holding its certificate) it serves HTTPS. With ``admin_token``, every ``POST /admin/*``
    must carry it (``Authorization: Bearer ...`` or ``X-Admin-Token``); ``GET`` stays read-only
    and open. The single-application attributes (``app``, ``driver``, ``servo_path``, ``state()``,
    ``cancel()``) are the first application's.
    """

    def __init__(
        self,
        driver: Driver | None = None,
        *,
        app: str | None = None,
        token: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        history_limit: int = HISTORY_LIMIT,
        applications: Sequence[Application] = (),
        admin_token: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        apps = list(applications)
        if driver is not None:
            if app is None:
                raise ConfigError("an application needs its ORG/APP", key="app")
            apps.insert(0, Application(driver, app=app, token=token, history_limit=history_limit))
        if not apps:
            raise ConfigError("the optimizer needs at least one application to serve")
        self._apps: dict[tuple[str, str], Application] = {}
        for application in apps:
            key = (application.org, application.app_name)
            if key in self._apps:
                raise ConfigError(f"application {application.app} is given twice", key="app")
            self._apps[key] = application
        self._admin_token = admin_token.strip() if admin_token else None
        if admin_token is not None and not self._admin_token:
            raise ConfigError("the admin token is empty")
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._httpd = HttpServer((host, port), self)
        if tls is not None:
            # The handshake happens on the connection's first read, in its own handler thread, so
            # a client that never finishes one does not hold up the accepting loop.
            self._httpd.socket = tls.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        # Read once, while the socket is open: the URL stays known after stop() (a test restarts
        # an optimizer on the same port); what server_address holds, typed for TCP.
        bound_host, bound_port = self._httpd.socket.getsockname()[:2]
        self._url = f"{'https' if tls is not None else 'http'}://{bound_host}:{bound_port}"

    # --- applications ----------------------------------------------------------------------------

    @property
    def applications(self) -> list[Application]:
        return list(self._apps.values())

    @property
    def first(self) -> Application:
        return next(iter(self._apps.values()))

    def application(self, name: str | None = None) -> Application:
        """The application ``ORG/APP``; without a name, the only one. LookupError saying which exist."""
        if name is None:
            if len(self._apps) == 1:
                return self.first
            raise LookupError(f"several applications are served here: name one of {self.names()}")
        try:
            key = split_optimizer_id(name)
        except ValueError as exc:
            raise LookupError(f"{name!r} is not ORG/APP: {exc}") from None
        found = self._apps.get(key)
        if found is None:
            raise LookupError(f"no application {name} here (served: {self.names()})")
        return found

    def for_path(self, org: str, app: str) -> Application | None:
        return self._apps.get((org, app))

    def names(self) -> str:
        return ", ".join(a.app for a in self._apps.values())

    @property
    def app(self) -> str:
        return self.first.app

    @property
    def org(self) -> str:
        return self.first.org

    @property
    def app_name(self) -> str:
        return self.first.app_name

    @property
    def driver(self) -> Driver:
        return self.first.driver

    @property
    def admin_token_required(self) -> bool:
        return self._admin_token is not None

    def admin_authorized(self, headers: Any) -> bool:
        """Whether a ``POST /admin/*`` may act: no admin token set, or the request carries it."""
        if self._admin_token is None:
            return True
        offered = []
        if headers.get("X-Admin-Token"):
            offered.append(headers["X-Admin-Token"].strip())
        scheme, _, value = (headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() == "bearer":
            offered.append(value.strip())
        return any(hmac.compare_digest(v.encode(), self._admin_token.encode()) for v in offered)

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (``https://`` with ``tls``): use it as a servo's ``base_url``."""
        return self._url

    @property
    def servo_path(self) -> str:
        return self.first.servo_path

    @property
    def servo_url(self) -> str:
        return self.url + self.servo_path

    def start(self) -> OptimizerServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": SHUTDOWN_POLL_INTERVAL},
                name="optimizer-server",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end stalled requests, close every connection. Bounded by ``STOP_TIMEOUT``."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()  # returns once serve_forever has seen the request
            self._thread.join(STOP_TIMEOUT)
        self._httpd.close_connections()
        self._httpd.server_close()

    def take_over(self, previous: OptimizerServer) -> OptimizerServer:
        """Carry on where a stopped server left off: its commands in flight, cmd_uids and histories.

        An optimizer that keeps its state across a restart (or a network outage) looks like this to
        the servo; without ``take_over`` a new server knows no command, and answers a late result
        ``invalid`` (``unexpected cmd_uid``), as a restarted optimizer that lost its state would.
        Applications are matched by ORG/APP.
        """
        for key, application in self._apps.items():
            old = previous._apps.get(key)
            if old is not None:
                application.take_over(old)
        return self

    def __enter__(self) -> OptimizerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def hold(self, seconds: float) -> bool:
        """Wait ``seconds`` (a stalled reply); True if the server is stopping meanwhile."""
        return self._stopping.wait(seconds)

    # --- the first application's admin, for callers of a one-application server -------------------

    def state(self) -> dict[str, Any]:
        """What ``GET /admin/state`` answers (the first application's state)."""
        return self.first.state()

    def cancel(
        self,
        reason: str = DEFAULT_CANCEL_REASON,
        message: str = DEFAULT_CANCEL_MESSAGE,
        cmd_uid: str | None = None,
    ) -> dict[str, Any]:
        """Arm a cancel of the first application's command in flight (only ``cmd_uid``, if given)."""
        return self.first.cancel(reason, message, cmd_uid)

    def overview(self) -> dict[str, Any]:
        """What ``GET /admin/apps`` answers."""
        return {
            "apps": [application.summary() for application in self._apps.values()],
            "admin_token_required": self.admin_token_required,
        }
