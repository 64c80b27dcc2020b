"""Watch streams (``?watch=true``) as the API server serves them.

- Without resourceVersion (or "0"): the current objects as synthetic ADDED events, then changes.
- From a resourceVersion: the changes after it; one older than the kept log answers an ERROR event
  with a 410 Expired Status and ends, as the real server does.
- With a label or field selector, an object that starts matching arrives as ADDED and one that stops
  matching as DELETED (the watch cache's filtering).
- ``timeoutSeconds`` ends the stream; the server going down ends every stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp.web
from kube_objects import Kind
from kube_store import Change, KubeStore

DEFAULT_TIMEOUT = 1800.0
"""Seconds a watch without timeoutSeconds stays open (the real server's --min-request-timeout)."""


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A metav1.Status failure as the API server answers it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"


def _as_seen(change: Change, selected: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The event this watch sends for ``change``, if any."""
    now_in = change.type != "DELETED" and selected(change.obj)
    before_in = change.previous is not None and selected(change.previous)
    if change.type == "DELETED":
        return {"type": "DELETED", "object": change.obj} if selected(change.obj) else None
    if now_in and (change.type == "ADDED" or before_in):
        return {"type": change.type, "object": change.obj}
    if now_in:
        return {"type": "ADDED", "object": change.obj}
    if before_in:
        return {"type": "DELETED", "object": change.obj}
    return None


async def serve_watch(
    store: KubeStore,
    raw_request: Any,
    kind: Kind,
    namespace: str | None,
    params: dict[str, str],
    selected: Callable[[dict[str, Any]], bool],
    closing: asyncio.Event,
) -> aiohttp.web.StreamResponse:
    response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(raw_request)
    try:
        await _stream(store, response, kind, namespace, params, selected, closing)
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away: nothing more to send
    return response


async def _stream(
    store: KubeStore,
    response: aiohttp.web.StreamResponse,
    kind: Kind,
    namespace: str | None,
    params: dict[str, str],
    selected: Callable[[dict[str, Any]], bool],
    closing: asyncio.Event,
) -> None:
    timeout = float(params.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    deadline = time.monotonic() + timeout
    since = params.get("resourceVersion") or ""
    if since in ("", "0"):
        cursor = store.revision
        for obj in store.list(kind, namespace):
            if selected(obj):
                await response.write(_line({"type": "ADDED", "object": obj}))
    elif not since.isdigit():
        await response.write(
            _line(
                {
                    "type": "ERROR",
                    "object": status_body(400, "BadRequest", f'invalid resource version "{since}"'),
                }
            )
        )
        return
    else:
        cursor = int(since)
        if cursor < store.oldest_revision:
            await response.write(
                _line(
                    {
                        "type": "ERROR",
                        "object": status_body(
                            410, "Expired", f"too old resource version: {cursor} ({store.oldest_revision})"
                        ),
                    }
                )
            )
            return
    while not closing.is_set():
        changed = store.changed
        for change in list(store.changes):
            if change.revision <= cursor:
                continue
            cursor = change.revision
            if change.kind != kind:
                continue
            obj_namespace = change.obj["metadata"].get("namespace")
            event = _as_seen(change, selected) if namespace in (None, obj_namespace) else None
            if event is not None:
                await response.write(_line(event))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        waiters = {asyncio.ensure_future(changed.wait()), asyncio.ensure_future(closing.wait())}
        try:
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the handler is cancelled (the client hung up): no task outlives it
            for waiter in waiters:
                waiter.cancel()
