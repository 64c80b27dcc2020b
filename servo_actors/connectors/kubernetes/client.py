"""A small Kubernetes API client over ``requests``: objects as dicts, every call bounded in time.

The connector needs a handful of calls (get, list, strategic-merge patch, watch, one create, the
version), so this is a thin layer rather than a generated client: see docs/connectors/kubernetes.md,
"Why a client of its own".

    client = KubeClient(resolve_access(None, None), request_timeout=10)
    deployment = client.get(deployment_path("default", "web"))
    for kind, obj in client.watch(deployments_path("default"), {"fieldSelector": "metadata.name=web"}, 5):
        ...
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import requests
import urllib3
from requests.adapters import HTTPAdapter

from servo_actors.connectors.kubernetes.credentials import KubeAuth, ssl_context
from servo_actors.connectors.kubernetes.kubeconfig import ClusterAccess
from servo_actors.errors import ConnectorError

__all__ = [
    "ACCESS_REVIEW_PATH",
    "KubeApiError",
    "KubeClient",
    "KubeError",
    "KubeTimeout",
    "KubeUnreachable",
    "PATCH_TYPES",
    "USER_AGENT",
    "VERSION_PATH",
    "WATCH_READ_GRACE",
    "deployment_path",
    "deployments_path",
    "events_path",
    "hpa_path",
    "hpas_path",
    "label_selector",
    "pod_metrics_path",
    "pod_path",
    "pods_path",
    "replicasets_path",
    "statefulset_path",
    "statefulsets_path",
    "workload_path",
    "workloads_path",
]

WATCH_READ_GRACE = 5.0
"""Seconds a watch may stay silent past its server-side ``timeoutSeconds`` before we hang up."""
PATCH_TYPES = {
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
}
USER_AGENT = "servo-actors-kubernetes"


class KubeError(ConnectorError):
    """A call to the API server failed; the message says which call and why."""


class KubeUnreachable(KubeError):
    """No connection to the API server (refused, unresolvable, TLS)."""


class KubeTimeout(KubeError):
    """The API server did not answer within the request timeout."""


class KubeApiError(KubeError):
    """The API server answered with an error status."""

    def __init__(self, message: str, status: int, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class _TlsAdapter(HTTPAdapter):
    """TLS from the kubeconfig's context alone: requests would otherwise add its own CA bundle to
    the trusted CAs (kubectl trusts only the configured one) and override a skipped verification."""

    def __init__(self, context: Any, insecure: bool, server_name: str | None) -> None:
        self._context = context
        self._insecure = insecure
        self._server_name = server_name
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        if self._server_name:
            kwargs["server_hostname"] = self._server_name  # the kubeconfig's tls-server-name
        super().init_poolmanager(*args, **kwargs)

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        conn.cert_reqs = "CERT_NONE" if self._insecure else "CERT_REQUIRED"
        conn.ca_certs = None
        conn.ca_cert_dir = None


class KubeClient:
    """Talks to one API server. Not shared between threads."""

    def __init__(self, access: ClusterAccess, request_timeout: float) -> None:
        self.access = access
        self.server = access.server
        self.request_timeout = request_timeout
        self.session = requests.Session()
        self.session.trust_env = False  # proxies from the environment are not for the API server
        self.session.headers["User-Agent"] = USER_AGENT
        self.session.headers["Accept"] = "application/json"
        self.auth = KubeAuth(access)
        self.session.auth = self.auth
        if self.server.startswith("https://"):
            self.session.mount(
                "https://", _TlsAdapter(ssl_context(access), access.insecure, access.tls_server_name)
            )
            if access.insecure:
                self.session.verify = False  # asked for in the kubeconfig (insecure-skip-tls-verify)
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    def close(self) -> None:
        self.session.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call("GET", path, params=params)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", path, body=body)

    def delete(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """DELETE (``body``: DeleteOptions, e.g. preconditions); the answer (a Status or the object)."""
        return self._call("DELETE", path, body=body)

    def patch(self, path: str, body: dict[str, Any], patch_type: str = "strategic") -> dict[str, Any]:
        return self._call("PATCH", path, body=body, content_type=PATCH_TYPES[patch_type])

    def watch(
        self, path: str, params: dict[str, Any] | None, seconds: int
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(type, object)`` events for up to ``seconds`` (the server closes the watch then).

        A watch that stays silent past that (plus WATCH_READ_GRACE) ends quietly: callers re-read
        and watch again. An ERROR event (e.g. 410 Gone: the resourceVersion is too old) raises.
        """
        query = {**(params or {}), "watch": "true", "timeoutSeconds": str(max(1, int(seconds)))}
        timeout = (self.request_timeout, max(1, int(seconds)) + WATCH_READ_GRACE)
        response = self._send("GET", path, params=query, stream=True, timeout=timeout)
        try:
            for line in response.iter_lines():
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type", ""), event.get("object") or {}
                if kind == "ERROR":
                    raise _status_error(obj, int(obj.get("code") or 500), f"watch {path}")
                yield kind, obj
        except (requests.ReadTimeout, requests.exceptions.ChunkedEncodingError, requests.ConnectionError):
            return  # the stream broke or fell silent: the caller re-reads and watches again
        except ValueError as exc:
            raise KubeError(f"watch {path} on {self.server}: an event that is not JSON ({exc})") from None
        finally:
            response.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else None
        response = self._send(method, path, params=params, data=data, headers=headers)
        try:
            return response.json()
        except ValueError:
            raise KubeError(f"{method} {path} on {self.server}: the answer is not JSON") from None

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", (self.request_timeout, self.request_timeout))
        what = f"{method} {path}"
        for attempt in range(2):
            try:
                response = self.session.request(method, self.server + path, **kwargs)
            except requests.Timeout:
                raise KubeTimeout(
                    f"the Kubernetes API at {self.server} did not answer {what} within {self.request_timeout:g} s"
                ) from None
            except requests.ConnectionError as exc:
                raise KubeUnreachable(
                    f"cannot reach the Kubernetes API at {self.server} ({self.access.source}): {_root_cause(exc)}"
                ) from None
            if (
                response.status_code == 401
                and attempt == 0
                and (self.access.exec_plugin or self.access.token_file)
            ):
                response.close()
                self.auth.renew()  # the token may have expired or rotated: one fresh try
                continue
            if response.status_code >= 400:
                try:
                    status = response.json()
                except ValueError:
                    status = {"message": response.text[:200]}
                response.close()
                raise _status_error(status, response.status_code, what)
            return response
        raise AssertionError("unreachable")  # the loop returns or raises


def _status_error(status: dict[str, Any], code: int, what: str) -> KubeApiError:
    reason = str(status.get("reason") or _REASONS.get(code, "Error"))
    message = str(status.get("message") or reason)
    return KubeApiError(f"{what}: {code} {reason}: {message}", code, reason)


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
            410: "Gone", 415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests"}  # fmt: skip


def _root_cause(exc: BaseException) -> str:
    """The innermost reason of a connection error, e.g. ``[Errno 111] Connection refused``."""
    found = re.search(r"\[Errno -?\d+\] [^'\")]+", str(exc))
    if found:
        return found.group(0)
    if "SSL" in str(exc) or "certificate" in str(exc):
        return "TLS failed: " + str(exc).split("(", 1)[-1].rstrip(")")[:200]
    return type(exc).__name__


def _q(value: str) -> str:
    return quote(value, safe="")


def deployments_path(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{_q(namespace)}/deployments"


def deployment_path(namespace: str, name: str) -> str:
    return f"{deployments_path(namespace)}/{_q(name)}"


def statefulsets_path(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{_q(namespace)}/statefulsets"


def statefulset_path(namespace: str, name: str) -> str:
    return f"{statefulsets_path(namespace)}/{_q(name)}"


def workloads_path(namespace: str, kind: str) -> str:
    """The collection of ``kind`` (``Deployment`` or ``StatefulSet``)."""
    return statefulsets_path(namespace) if kind == "StatefulSet" else deployments_path(namespace)


def workload_path(namespace: str, kind: str, name: str) -> str:
    return f"{workloads_path(namespace, kind)}/{_q(name)}"


def replicasets_path(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{_q(namespace)}/replicasets"


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{_q(namespace)}/pods"


def pod_path(namespace: str, name: str) -> str:
    return f"{pods_path(namespace)}/{_q(name)}"


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{_q(namespace)}/events"


def hpas_path(namespace: str) -> str:
    return f"/apis/autoscaling/v2/namespaces/{_q(namespace)}/horizontalpodautoscalers"


def hpa_path(namespace: str, name: str) -> str:
    return f"{hpas_path(namespace)}/{_q(name)}"


def pod_metrics_path(namespace: str) -> str:
    return f"/apis/metrics.k8s.io/v1beta1/namespaces/{_q(namespace)}/pods"


ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
VERSION_PATH = "/version"


def label_selector(selector: dict[str, Any]) -> str:
    """A Deployment's ``spec.selector`` as a ``labelSelector`` query value."""
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)
