"""OptimizerAdminClient: the embedded optimizer's admin API (``/admin/state``, ``/admin/cancel``).

::

    with OptimizerAdminClient("http://127.0.0.1:8085", admin_token=token, timeout=5.0) as admin:
        state = admin.state()                            # GET /admin/state: the command in flight...
        answer = admin.cancel(reason="demo-abort", cmd_uid=state["current"]["cmd_uid"])
        answer["armed"], answer["message"]               # whether the cancel will be answered

This is not the servo's side of the wire (``client.OptimizerClient``, with its retries): it is a
person's or a demo's Abort button and look at the optimizer, one attempt per call. It is apart so
``requests`` stays in the protocol layer, and every admin caller (``optimizer cancel``, the demo)
sends the token, bounds its wait and reports a failure the same way.

Each call waits at most ``timeout`` seconds to connect and as long again to read. The admin token,
when given, goes in ``Authorization: Bearer ...`` (what optimizer/server.py checks on ``POST
/admin/*``); it never appears in an exception or a repr. Every failure is one
``OptimizerAdminError``, naming the URL and what went wrong.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any
from urllib.parse import urlencode

import requests

from servo_actors.errors import OptimizerError

__all__ = ["ADMIN_TIMEOUT", "OptimizerAdminClient", "OptimizerAdminError"]

ADMIN_TIMEOUT = 5.0
"""Seconds one admin call waits to connect, and again to read, unless told otherwise."""
DETAIL_CHARS = 200
"""Characters of an answer that is not JSON shown in an error (an HTML error page can be long)."""


class OptimizerAdminError(OptimizerError):
    """An admin call failed: ``url`` (the endpoint), ``status`` (None when nothing answered) and
    ``cause``, the kind of failure as requests names it: ``ConnectionError``, ``ReadTimeout``...,
    ``HTTPError`` (an answer other than 200) or ``JSONDecodeError`` (an answer that is not a JSON
    object)."""

    def __init__(self, message: str, *, url: str, cause: str, status: int | None = None) -> None:
        self.cause = cause
        super().__init__(message, url=url, status=status)


class OptimizerAdminClient:
    """One optimizer's admin API at ``base_url`` (``http://HOST:PORT``, a trailing ``/`` ignored).

    It keeps its connections open between calls; ``close()`` (or ``with``) ends them. Use one
    client per thread (a requests session is not meant to be shared between threads).
    """

    def __init__(
        self, base_url: str, *, admin_token: str | None = None, timeout: float = ADMIN_TIMEOUT
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._admin_token = admin_token
        self._timeout = timeout
        self._session = requests.Session()

    @property
    def base_url(self) -> str:
        return self._base_url

    def __repr__(self) -> str:
        # Never the token: whether there is one.
        token = "set" if self._admin_token is not None else "none"
        return f"OptimizerAdminClient({self._base_url!r}, admin_token={token}, timeout={self._timeout})"

    def __enter__(self) -> OptimizerAdminClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._session.close()

    def state(self, app: str | None = None) -> dict[str, Any]:
        """``GET /admin/state``: the application's command in flight, its driver's record (steps,
        best), its cancels. ``app`` (ORG/APP) is needed when the optimizer serves several."""
        target = self.url_of("/admin/state", app)
        return self._call("GET", target, None)

    def cancel(
        self, *, app: str | None = None, reason: str | None = None, cmd_uid: str | None = None
    ) -> dict[str, Any]:
        """``POST /admin/cancel``: answer the command in flight ``cancel`` (only the one with
        ``cmd_uid``, when given). The answer says whether it was armed, and a ``message``."""
        body: dict[str, Any] = {"reason": reason} if reason else {}
        if app:
            body["app"] = app
        if cmd_uid is not None:
            body["cmd_uid"] = cmd_uid
        return self._call("POST", self.url_of("/admin/cancel"), body)

    def url_of(self, path: str, app: str | None = None) -> str:
        """The URL of an admin endpoint, with ``?app=`` when given."""
        query = f"?{urlencode({'app': app})}" if app else ""
        return f"{self._base_url}{path}{query}"

    def _call(self, method: str, target: str, body: dict[str, Any] | None) -> dict[str, Any]:
        headers = {}
        if self._admin_token is not None:
            headers["Authorization"] = f"Bearer {self._admin_token}"
        try:
            response = self._session.request(
                method, target, json=body, headers=headers, timeout=(self._timeout, self._timeout)
            )
        except requests.RequestException as exc:
            name = type(exc).__name__
            raise OptimizerAdminError(
                f"cannot reach the optimizer at {target}: {name}", url=target, cause=name
            ) from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.status_code != 200 or not isinstance(answer, dict):
            detail = answer.get("detail") if isinstance(answer, dict) else response.text[:DETAIL_CHARS]
            cause = "HTTPError" if response.status_code != 200 else "JSONDecodeError"
            raise OptimizerAdminError(
                f"{target} answered HTTP {response.status_code}: {detail}",
                url=target,
                cause=cause,
                status=response.status_code,
            )
        return answer
