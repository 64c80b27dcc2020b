"""The connector's HTTP side, the only place that uses ``requests``, ``urllib3`` and
``prometheus_api_client``: sessions with bounded retries, the client, and every HTTP, PromQL
or connection error turned into one ``ConnectorFailure`` naming what was asked."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from servo_actors.connectors.base import ConnectorFailure
from servo_actors.connectors.prometheus.config import PrometheusConfig
from servo_actors.durations import format_duration

__all__ = ["PrometheusHttp", "RETRY_BACKOFF_FACTOR"]

RETRY_BACKOFF_FACTOR = 0.2
"""urllib3 backoff factor between retries of a failed connection (0 s, 0.4 s, 0.8 s, ...)."""


class PrometheusHttp:
    """The HTTP side of a ``PrometheusConnector``: sessions, the client and errors for ``config``."""

    def __init__(self, config: PrometheusConfig) -> None:
        self.config = config

    @contextmanager
    def session(self) -> Iterator[requests.Session]:
        """A fresh session with bounded retries, closed after use (sessions are not shared
        between threads, and none is left holding a socket)."""
        session = requests.Session()
        session.mount(self.config.base_url, HTTPAdapter(max_retries=self.retry()))
        try:
            yield session
        finally:
            session.close()

    @contextmanager
    def client(self) -> Iterator[PrometheusConnect]:
        with self.session() as session:
            yield PrometheusConnect(
                url=self.config.base_url, retry=self.retry(), session=session, timeout=self.config.timeout
            )

    def retry(self) -> Retry:
        return Retry(
            total=self.config.retries,
            read=0,  # a query that timed out reading is not repeated: the timeout is the bound
            status=0,
            backoff_factor=RETRY_BACKOFF_FACTOR,
            raise_on_status=False,
        )

    def failure(self, exc: Exception, what: str) -> ConnectorFailure:
        base_url = self.config.base_url
        if isinstance(exc, ConnectorFailure):
            return exc
        if isinstance(exc, PrometheusApiClientException):
            status, detail = _api_error(str(exc))
            return ConnectorFailure(
                f"Prometheus at {base_url} refused {what} (HTTP {status}): {detail}",
                reason="prometheus-error",
            )
        if isinstance(exc, requests.ConnectionError) and not isinstance(exc, requests.ReadTimeout):
            return ConnectorFailure(
                f"cannot reach Prometheus at {base_url} for {what}: {_root_cause(exc)}",
                reason="prometheus-unreachable",
            )
        if isinstance(exc, requests.Timeout):
            return ConnectorFailure(
                f"Prometheus at {base_url} did not answer {what} within {format_duration(self.config.timeout)}",
                reason="prometheus-timeout",
            )
        return ConnectorFailure(
            f"unexpected answer from Prometheus at {base_url} to {what}: {type(exc).__name__}: {exc}",
            reason="prometheus-error",
        )


_API_ERROR = re.compile(r"^HTTP Status Code (\d+) \((.*)\)$", re.DOTALL)


def _api_error(text: str) -> tuple[str, str]:
    """HTTP status and Prometheus's own ``error`` from the client library's exception text.

    The library formats the response body as a bytes literal; it is read back with
    ``ast.literal_eval`` (a literal parser, not eval) and then as Prometheus's JSON error.
    """
    match = _API_ERROR.match(text)
    if not match:
        return "?", text
    status, body = match.groups()
    try:
        raw = ast.literal_eval(body)
        payload = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        return status, f"{payload['error']} ({payload.get('errorType', 'error')})"
    except (ValueError, SyntaxError, KeyError, TypeError, UnicodeDecodeError):
        return status, body


def _root_cause(exc: BaseException) -> str:
    """The innermost reason of a connection error, e.g. ``[Errno 111] Connection refused``."""
    found = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
    return found.group(0) if found else type(exc).__name__
