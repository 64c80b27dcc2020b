"""Application: one application's side of the protocol, as the embedded optimizer serves it.

Holds ``Application`` (its envelope checks, token, cmd_uids, command in flight, armed cancel,
answered cancels and request history, under a lock of its own) and ``Fault`` (how a driver's
``fault_for`` misanswers a request). ``server.py`` holds the HTTP side (``OptimizerServer``: the
socket, the routes to the applications, the admin token and its lifecycle).

How an application answers the servo:

- HELLO and GOODBYE: ``ok`` (the command in flight, if any, is dropped: no result is coming).
- WHATS_NEXT: ``driver.next_command()`` with a fresh ``cmd_uid`` (none for SLEEP). A command still
  in flight is dropped: the servo moved on (after a cancel, ``unexpected-event``, a restart...).
- Progress (a param without ``status``): ``cancel`` when armed by ``/admin/cancel``, else
  ``driver.progress_reply``. A ``cancel`` answer calls ``driver.on_cancelled``; the servo then posts
  a ``cancelled`` result, which goes to ``driver.on_result`` like any other.
- A result: ``driver.on_result``; or ``cancel`` when armed (then the command counts as cancelled and
  ``on_result`` is not called). A result that does not have the protocol's shape: ``invalid``.
- A cmd_uid other than the one in flight: ``invalid`` with reason ``unexpected cmd_uid``; an event
  that does not fit the command in flight (or none in flight): ``unexpected-event``.
- A driver that also has ``fault_for(event, param) -> Fault | None`` (the scripted driver) may
  stall a request or answer it with any status and body instead.

Malformed requests (not JSON, not the 3-key envelope, an unknown event) get 400 JSON, a body over
``web.MAX_BODY_BYTES`` 413, a missing or wrong token 401; a failing driver 500. The server thread
survives all of it.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from servo_actors.config.fields import split_optimizer_id
from servo_actors.errors import ConfigError, ProtocolError
from servo_actors.optimizer.driver import Driver
from servo_actors.optimizer.history import HISTORY_LIMIT, RequestHistory
from servo_actors.optimizer.web import (
    DEFAULT_CANCEL_MESSAGE,
    DEFAULT_CANCEL_REASON,
    Reply,
    error_reply,
)
from servo_actors.protocol.commands import Command, OptimizerStatus
from servo_actors.protocol.json_bounds import first_non_finite
from servo_actors.protocol.reading import parse_envelope, parse_param, parse_reply, to_wire
from servo_actors.protocol.wire_types import RESULT_EVENT, CommandName, Event

__all__ = [
    "Application",
    "CANCEL_RECORD_LIMIT",
    "Fault",
]

log = logging.getLogger(__name__)

CANCEL_RECORD_LIMIT = 200
"""Cancels answered that ``/admin/state`` keeps (the oldest are dropped)."""


@dataclass(frozen=True)
class Fault:
    """How to misanswer one request: stall first, then answer ``status`` with ``body``.

    With neither ``status`` nor ``body``, the request is answered normally after the stall.
    ``body`` is sent as is (bytes); with a status but no body, a JSON ``{"detail": ...}`` goes out.
    """

    stall: float = 0.0
    status: int | None = None
    body: bytes | None = None
    content_type: str = "application/json"


def _status(name: str, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    reply: dict[str, Any] = {"status": name}
    if reason is not None:
        reply["reason"] = reason
    if message is not None:
        reply["message"] = message
    return reply


def _token_value(token: str) -> str:
    # The plan may hold the token in any of the forms a servo config may (docs/protocol.md).
    token = token.strip()
    for prefix in ("X-SF-Token ", "Bearer "):
        if token.startswith(prefix):
            return token.removeprefix(prefix).strip()
    return token


class Application:
    """One application's side of the protocol: its driver, token, command in flight, cancel, history.

    An ``OptimizerServer`` serves one or several; each keeps its own state and its own lock, so an
    Abort or a slow driver of one never touches another.
    """

    def __init__(
        self,
        driver: Driver,
        *,
        app: str,
        token: str | None = None,
        history_limit: int = HISTORY_LIMIT,
    ) -> None:
        try:
            self.org, self.app_name = split_optimizer_id(app)
        except ValueError as exc:
            raise ConfigError(str(exc), key="app") from None
        self.app = app
        self.driver = driver
        self._token = _token_value(token) if token else None
        self._lock = threading.Lock()  # guards the protocol state and every driver call
        self._current: dict[str, Any] | None = None
        self._cancel: dict[str, Any] | None = None  # armed: {"cmd_uid", "reason", "message"}
        self._cancels: deque[dict[str, Any]] = deque(maxlen=CANCEL_RECORD_LIMIT)  # answered
        self._history = RequestHistory(limit=history_limit)
        self._uids = 0

    @property
    def servo_path(self) -> str:
        return f"/accounts/{self.org}/applications/{self.app_name}/servo"

    def take_over(self, previous: Application) -> None:
        """Carry on ``previous``'s command in flight, cmd_uids and history (see ``OptimizerServer.take_over``)."""
        with previous._lock, self._lock:
            self._current = previous._current
            self._cancel = previous._cancel
            self._cancels = previous._cancels
            self._uids = previous._uids
        self._history.take_over(previous._history)

    def summary(self) -> dict[str, Any]:
        """A short view for ``GET /admin/apps``: which app, where, what it is doing."""
        with self._lock:
            driver_state = self.driver.state()
            return {
                "app": self.app,
                "servo_path": self.servo_path,
                "phase": driver_state.get("phase"),
                "current": self._current,
            }

    # --- admin -----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What ``GET /admin/state`` answers for this application."""
        with self._lock:
            return {
                "app": self.app,
                "servo_path": self.servo_path,
                "current": self._current,
                "cancel_armed": self._cancel is not None,
                "cancels": list(self._cancels),
                "requests": self._history.seen,
                "history_dropped": self._history.dropped,
                "history": self._history.entries(),
                "driver": self.driver.state(),
            }

    def cancel(
        self,
        reason: str = DEFAULT_CANCEL_REASON,
        message: str = DEFAULT_CANCEL_MESSAGE,
        cmd_uid: str | None = None,
    ) -> dict[str, Any]:
        """Arm a cancel of the command in flight (only if it is ``cmd_uid``, when given); what
        ``POST /admin/cancel`` answers."""
        with self._lock:
            current = self._current
            if current is None:
                return {
                    "app": self.app,
                    "in_flight": False,
                    "armed": False,
                    "message": "no command in flight: nothing to cancel",
                }
            if cmd_uid is not None and cmd_uid != current["cmd_uid"]:
                return {
                    "app": self.app,
                    "in_flight": False,
                    "armed": False,
                    "message": f"{cmd_uid} is no longer in flight ({current['cmd']} {current['cmd_uid']} is): "
                    "nothing cancelled",
                }
            self._cancel = {"cmd_uid": current["cmd_uid"], "reason": reason, "message": message}
            return {
                "app": self.app,
                "in_flight": True,
                "armed": True,
                "cmd": current["cmd"],
                "cmd_uid": current["cmd_uid"],
                "message": f"{current['cmd']} {current['cmd_uid']} will be answered cancel at its next post",
            }

    # --- the protocol ----------------------------------------------------------------------------

    def authorized(self, headers: Any) -> bool:
        if self._token is None:
            return True
        offered = []
        if headers.get("X-SF-Token"):
            offered.append(headers["X-SF-Token"].strip())
        auth = (headers.get("Authorization") or "").strip()
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer":
            offered.append(value.strip())
        return any(hmac.compare_digest(v.encode(), self._token.encode()) for v in offered)

    def fault_for(self, event: str, param: Any) -> Fault | None:
        hook = getattr(self.driver, "fault_for", None)
        if hook is None:
            return None
        with self._lock:
            fault: Fault | None = hook(event, param)  # the driver's hook, read by name: typed Any
            return fault

    def answer(self, body: dict[str, Any]) -> Reply:
        """The reply to one servo request whose JSON body is ``body`` (any JSON object)."""
        try:
            request = parse_envelope(body)
        except ProtocolError as exc:
            return error_reply(400, f"not a protocol envelope: {exc}")
        event, param = request.event, request.param
        with self._lock:
            if event in (Event.HELLO, Event.GOODBYE):
                return self._hello_goodbye(event, param)
            if event == Event.WHATS_NEXT:
                return self._whats_next()
            return self._result_or_progress(event, param or {})

    def record(self, entry: dict[str, Any]) -> None:
        # Not under self._lock: summarizing a large body takes a while, and the history has its own.
        self._history.append(entry)

    def _hello_goodbye(self, event: str, param: Any) -> Reply:
        try:
            parse_param(event, param)
        except ProtocolError as exc:
            return error_reply(400, str(exc))
        self._drop_current()
        return Reply(200, _status("ok"))

    def _whats_next(self) -> Reply:
        self._drop_current()
        command = dict(self.driver.next_command())
        try:
            if not isinstance(parse_reply(command), Command):
                raise ProtocolError("the driver answered a status, not a command")
            where = first_non_finite(command)
            if where is not None:  # NaN is not JSON: a servo would rightly refuse the reply
                raise ProtocolError("is not a finite number (NaN or infinity)", field=where)
        except ProtocolError as exc:
            log.error("driver %s gave a bad command: %s", type(self.driver).__name__, exc)
            return error_reply(500, f"the optimizer's driver gave a bad command: {exc}")
        # servox reads param (and SLEEP's param.data) without checking for null: always send them.
        if not isinstance(command.get("param"), dict):
            command["param"] = {}
        if command["cmd"] == CommandName.SLEEP and not isinstance(command["param"].get("data"), dict):
            command["param"] = {**command["param"], "data": {}}
        if command["cmd"] != CommandName.SLEEP:
            self._uids += 1
            command["cmd_uid"] = f"c{self._uids}"
            self._current = command
        return Reply(200, command)

    def _result_or_progress(self, event: str, param: dict[str, Any]) -> Reply:
        current, uid = self._current, param.get("cmd_uid")
        if current is None or (uid is not None and uid != current["cmd_uid"]):
            if uid is not None:
                return Reply(200, _status("invalid", "unexpected cmd_uid", f"{uid!r} is not in flight"))
            return Reply(200, _status("unexpected-event", message=f"{event} but no command is in flight"))
        expected = RESULT_EVENT[current["cmd"]]
        if event != expected:
            message = f"{current['cmd']} {current['cmd_uid']} is in flight: expected {expected}, not {event}"
            return Reply(200, _status("unexpected-event", message=message))
        cancel = self._cancel if self._cancel and self._cancel["cmd_uid"] == current["cmd_uid"] else None
        if "status" not in param:
            return self._progress(current, param, cancel)
        return self._result(current, event, param, cancel)

    def _progress(
        self, current: dict[str, Any], param: dict[str, Any], cancel: dict[str, Any] | None
    ) -> Reply:
        # Progress is read leniently: servox adds fields of its own (runtime as text, connector...).
        if cancel is not None:
            self._cancel = None
            self.driver.on_cancelled(current, cancel["reason"])
            self._record_cancel(current, "progress", param.get("progress"))
            return Reply(200, _status("cancel", cancel["reason"], cancel["message"]))
        reply = self._checked(self.driver.progress_reply(current, param))
        if reply["status"] == "cancel":
            self.driver.on_cancelled(current, reply.get("reason") or DEFAULT_CANCEL_REASON)
            self._record_cancel(current, "progress", param.get("progress"))
        elif reply["status"] in ("invalid", "unexpected-event"):
            self._current = None  # no result is owed after these (docs/protocol.md)
        return Reply(200, reply)

    def _result(
        self, current: dict[str, Any], event: str, param: dict[str, Any], cancel: dict[str, Any] | None
    ) -> Reply:
        if param.get("reason") is None:
            # servox posts a cancelled result with reason null: take the status as the reason word.
            param = {**param, "reason": "success" if param.get("status") == "ok" else param.get("status")}
        try:
            parse_param(event, param)
        except ProtocolError as exc:
            return Reply(
                200, _status("invalid", "malformed", f"{event} does not have the protocol's shape: {exc}")
            )
        self._current = None
        if cancel is not None:
            self._cancel = None
            self.driver.on_cancelled(current, cancel["reason"])
            self._record_cancel(current, "result", None)
            return Reply(200, _status("cancel", cancel["reason"], cancel["message"]))
        return Reply(200, self._checked(self.driver.on_result(current, event, param)))

    def _record_cancel(self, current: dict[str, Any], answered_to: str, progress: Any) -> None:
        self._cancels.append(
            {
                "cmd": current["cmd"],
                "cmd_uid": current["cmd_uid"],
                "answered_to": answered_to,  # its progress post, or its result (it had finished)
                "progress": progress if isinstance(progress, int | float) else None,
                "at": time.time(),
            }
        )

    def _checked(self, reply: dict[str, Any] | None) -> dict[str, Any]:
        if reply is None:
            return _status("ok")
        try:
            return to_wire(OptimizerStatus.model_validate(reply))
        except Exception as exc:
            raise RuntimeError(f"the driver answered {reply!r}, not an optimizer status") from exc

    def _drop_current(self) -> None:
        self._current = None
        self._cancel = None
