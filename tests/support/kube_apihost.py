"""Runs an EmulatedApiServer on a loopback port, on its own event-loop thread, and can unplug it.

The listening socket really closes on ``unplug()`` (clients get "connection refused", open watches
end) and reopens on the same port on ``plug()``; the store lives in the handler and survives.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp.test_utils
import kmock
from kube_apiserver import EmulatedApiServer

CALL_TIMEOUT = 10.0
"""Seconds a call into the server's loop (store access, plug/unplug) may take before it is an error."""
THREAD_JOIN_TIMEOUT = 10.0

T = TypeVar("T")


class _TlsServer(aiohttp.test_utils.RawTestServer):
    """kmock's default server class, listening with TLS (kmock.Server has no TLS option of its own)."""

    context: ssl.SSLContext | None = None

    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any) -> None:
        await super().start_server(loop=loop, ssl=self.context, **kwargs)


def _tls_server_class(context: ssl.SSLContext) -> Callable[..., aiohttp.test_utils.RawTestServer]:
    def make(handler: Any, **kwargs: Any) -> aiohttp.test_utils.RawTestServer:
        server = _TlsServer(handler, **kwargs)
        server.context = context
        return server

    return make


class KubeApiHost:
    """The emulated API server's thread: ``call`` runs a function on its loop and returns the result."""

    def __init__(self, handler: EmulatedApiServer, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.port: int | None = None  # chosen by the first listen (port 0), kept for every later one
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kube-apiserver", daemon=True)
        self._listener: kmock.Server | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def start(self) -> None:
        self._thread.start()
        self._run(self._enter())

    def call(self, function: Callable[..., T], *args: Any) -> T:
        async def on_loop() -> T:
            return function(*args)

        return self._run(on_loop())

    def plug(self) -> None:
        self._run(self._listen())

    def unplug(self) -> None:
        self._run(self._stop_listening())

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self._run(self._exit())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(THREAD_JOIN_TIMEOUT)
            if not self._thread.is_alive():
                self._loop.close()

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(CALL_TIMEOUT)

    async def _enter(self) -> None:
        await self.handler.__aenter__()
        await self._listen()

    async def _exit(self) -> None:
        await self._stop_listening()
        await self.handler.__aexit__(None, None, None)

    async def _listen(self) -> None:
        if self._listener is not None:
            return
        self.handler.open_watches()
        options: dict[str, Any] = {} if self.tls is None else {"server_cls": _tls_server_class(self.tls)}
        listener = kmock.Server(self.handler, host="127.0.0.1", port=self.port, user_agent="", **options)
        await listener.__aenter__()
        self.port = listener.port
        self._listener = listener

    async def _stop_listening(self) -> None:
        if self._listener is None:
            return
        listener, self._listener = self._listener, None
        self.handler.close_watches()  # lets the server's shutdown find no handler still streaming
        await listener.__aexit__(None, None, None)
