"""kmock's Kubernetes emulator with the API-server semantics a connector relies on.

kmock (nolar/kmock) keeps objects, parses Kubernetes URLs, serves discovery and ``/version`` and
renders errors as ``Status``. Its built-in create/patch handling runs in
``KubernetesEmulator._handle`` *before* any user reaction, merges every list by replacement and
keeps no resourceVersion, so a reaction can neither refuse a write (409, 415, 403) nor merge
containers by name. This subclass therefore answers the requests for the kinds in
``kube_objects.KINDS`` itself (still storing every version in ``kmock.objects``) and leaves every
other URL to kmock. Everything here runs on the server's event loop thread; the controllers and
the test reach it through ``KubeApiHost.call``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import attrs
import kmock
import kube_objects
import kube_patching
import kube_selectors
from kube_objects import Kind

WATCH_HISTORY = 5000
"""Events kept for watches resuming from a resourceVersion; older ones answer 410 Gone."""
WATCH_DEFAULT_TIMEOUT = 1800.0
"""Seconds a watch without timeoutSeconds stays open (the real server's --min-request-timeout)."""
SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
METRICS_GROUP = "metrics.k8s.io"
FAKE_USER = "system:serviceaccount:default:servo"


@dataclass(frozen=True)
class WriteRecord:
    """One write received over HTTP (the test's ``patch_log`` entries are these as tuples)."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A metav1.Status failure as the API server answers it."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


def failure(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> aiohttp.web.Response:
    return aiohttp.web.json_response(status_body(code, reason, message, details), status=code)


def header(request: kmock.Request, name: str) -> str:
    """A request header by its case-insensitive name (kmock keeps them in a plain dict as sent)."""
    wanted = name.lower()
    return next((value for key, value in request.headers.items() if key.lower() == wanted), "")


def _spec_of(obj: dict[str, Any]) -> Any:
    return obj.get("spec")


@attrs.define(kw_only=True)
class EmulatedApiServer(kmock.KubernetesEmulator):
    """The request handler: object store with resourceVersions, patches, watches, RBAC answers, metrics."""

    token: str | None = None
    revision: int = attrs.field(default=0, init=False)
    history: deque[tuple[int, Kind, dict[str, Any]]] = attrs.field(
        factory=lambda: deque(maxlen=WATCH_HISTORY), init=False)
    writes: list[WriteRecord] = attrs.field(factory=list, init=False)
    conflicts: dict[tuple[str, str, str], int] = attrs.field(factory=dict, init=False)
    denied: set[tuple[str, str, str]] = attrs.field(factory=set, init=False)
    usage: dict[tuple[str, str], dict[str, str]] | None = attrs.field(default=None, init=False)
    on_change: Callable[[], None] | None = attrs.field(default=None, init=False)
    _changed: asyncio.Event | None = attrs.field(default=None, init=False)
    _closing: asyncio.Event | None = attrs.field(default=None, init=False)
    _event_serial: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        with warnings.catch_warnings():  # kmock 0.8 reads its bundled file with a deprecated importlib call
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resources.load_bundled()  # discovery answers as a k3s cluster's do (kinds, verbs, namespaced)

    # ---- the store (loop thread only) -------------------------------------------------------------

    def get_object(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        key = (kmock.resource(kind.group, kind.version, kind.plural), namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def list_objects(self, kind: Kind, namespace: str | None = None) -> list[dict[str, Any]]:
        resource = kmock.resource(kind.group, kind.version, kind.plural)
        return [copy.deepcopy(obj.raw) for (res, ns, _), obj in self.objects.items()
                if res == resource and not obj.deleted and (namespace is None or ns == namespace)]

    def commit(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new version: fills identity on create, bumps resourceVersion and, on spec change, generation."""
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        namespace, name = meta["namespace"], meta["name"]
        old = self.get_object(kind, namespace, name)
        self.revision += 1
        if old is None:
            meta.setdefault("uid", kube_objects.new_uid())
            meta.setdefault("creationTimestamp", kube_objects.now())
            if "spec" in obj:
                meta["generation"] = 1
        else:
            meta["uid"], meta["creationTimestamp"] = old["metadata"]["uid"], old["metadata"]["creationTimestamp"]
            if "generation" in old["metadata"]:
                changed = _spec_of(old) != _spec_of(obj)
                meta["generation"] = old["metadata"]["generation"] + (1 if changed else 0)
        meta["resourceVersion"] = str(self.revision)
        key = (kmock.resource(kind.group, kind.version, kind.plural), namespace, name)
        if key in self.objects:
            self.objects[key].history.append(copy.deepcopy(obj))
        else:
            self.objects[key] = copy.deepcopy(obj)
        self._publish(kind, {"type": "ADDED" if old is None else "MODIFIED", "object": copy.deepcopy(obj)})
        return obj

    def remove(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.get_object(kind, namespace, name)
        if obj is None:
            return None
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        self.objects[kmock.resource(kind.group, kind.version, kind.plural), namespace, name].delete()
        self._publish(kind, {"type": "DELETED", "object": copy.deepcopy(obj)})
        return obj

    def record_event(self, involved: dict[str, Any], reason: str, message: str, warning: bool,
                     component: str) -> None:
        self._event_serial += 1
        self.commit(kube_objects.KINDS["event"],
                    kube_objects.event(involved, reason, message, warning, component, self._event_serial))

    def _publish(self, kind: Kind, event: dict[str, Any]) -> None:
        self.history.append((self.revision, kind, event))
        if self._changed is not None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()
        if self.on_change is not None:
            self.on_change()

    def open_watches(self) -> None:
        self._changed, self._closing = asyncio.Event(), asyncio.Event()

    def close_watches(self) -> None:
        """End every open watch stream (the server going away ends them for the clients too)."""
        if self._closing is not None:
            self._closing.set()

    # ---- HTTP -------------------------------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if self.token is not None and header(request, "Authorization") != f"Bearer {self.token}":
            return failure(401, "Unauthorized", "Unauthorized")
        path = request.url.path
        resource = request.resource
        kind = None if resource is None else kube_objects.KINDS_BY_URL.get(
            (resource.group, resource.version, resource.plural))
        if request.method == "POST" and path == SSAR_PATH:
            return self._review_access(request)
        if resource is not None and resource.group == METRICS_GROUP:
            return self._serve_metrics(request)
        if kind is None:
            return await super()._handle(request)
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            self.writes.append(WriteRecord(request.method, path, request.data, dict(request.headers)))
        verb = self._verb(request)
        if (verb, kind.plural, kind.group) in self.denied:
            where = f' in the namespace "{request.namespace}"' if request.namespace else " at the cluster scope"
            named = f' "{request.name}"' if request.name else ""
            return failure(403, "Forbidden",
                           f'{kind.qualified}{named} is forbidden: User "{FAKE_USER}" cannot {verb} resource '
                           f'"{kind.plural}" in API group "{kind.group}"{where}',
                           {"name": request.name or "", "group": kind.group, "kind": kind.plural})
        if request.subresource not in (None, "status") or (request.subresource and not kind.has_status):
            return failure(404, "NotFound", "the server could not find the requested resource")
        try:
            if verb == "watch":
                return await self._serve_watch_stream(request, kind)
            if verb == "list":
                return self._serve_list_filtered(request, kind)
            if verb == "get":
                return self._serve_get(request, kind)
            if verb in ("patch", "update"):
                return self._serve_write(request, kind)
            if verb == "create":
                return self._serve_create_object(request, kind)
            if verb == "delete":
                return self._serve_delete_object(request, kind)
        except kube_selectors.SelectorError as exc:
            return failure(400, "BadRequest", f"unable to parse requirement: {exc}")
        return failure(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    @staticmethod
    def _verb(request: kmock.Request) -> str:
        if request.method == "GET":
            if request.params.get("watch") in ("true", "1"):
                return "watch"
            return "get" if request.name else "list"
        return {"PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete"}.get(
            request.method, request.method.lower())

    def _not_found(self, kind: Kind, name: str) -> aiohttp.web.Response:
        return failure(404, "NotFound", f'{kind.qualified} "{name}" not found',
                       {"name": name, "group": kind.group, "kind": kind.plural})

    def _serve_get(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        obj = self.get_object(kind, request.namespace or "", request.name or "")
        if obj is None:
            return self._not_found(kind, request.name or "")
        return aiohttp.web.json_response(obj)

    def _selected(self, request: kmock.Request, kind: Kind) -> Callable[[dict[str, Any]], bool]:
        by_label = kube_selectors.label_matcher(request.params.get("labelSelector"))
        by_field = kube_selectors.field_matcher(request.params.get("fieldSelector"))
        namespace, name = request.namespace, request.name

        def selected(obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata", {})
            return ((namespace is None or meta.get("namespace") == namespace)
                    and (name is None or meta.get("name") == name) and by_label(obj) and by_field(obj))

        return selected

    def _serve_list_filtered(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        selected = self._selected(request, kind)
        items = [obj for obj in self.list_objects(kind, request.namespace) if selected(obj)]
        return aiohttp.web.json_response({
            "apiVersion": kind.api_version,
            "kind": f"{kind.kind}List",
            "metadata": {"resourceVersion": str(self.revision)},
            "items": items,
        })

    async def _serve_watch_stream(self, request: kmock.Request, kind: Kind) -> aiohttp.web.StreamResponse:
        selected = self._selected(request, kind)
        timeout = float(request.params.get("timeoutSeconds") or WATCH_DEFAULT_TIMEOUT)
        deadline = time.monotonic() + timeout
        since = request.params.get("resourceVersion") or ""
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request._raw_request)  # kmock's own streaming does the same
        if since in ("", "0"):
            # No resourceVersion: the current state as synthetic ADDED events, then the changes.
            cursor = self.revision
            for obj in self.list_objects(kind, request.namespace):
                if selected(obj):
                    await response.write(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
        else:
            if not since.isdigit():
                await response.write(json.dumps({"type": "ERROR", "object": status_body(
                    400, "BadRequest", f'invalid resource version "{since}"')}).encode() + b"\n")
                return response
            cursor = int(since)
            oldest = self.history[0][0] if self.history else self.revision + 1
            if cursor + 1 < oldest and cursor < self.revision:
                await response.write(json.dumps({"type": "ERROR", "object": status_body(
                    410, "Expired", f"too old resource version: {cursor} ({oldest - 1})")}).encode() + b"\n")
                return response
        closing = self._closing
        while closing is not None and not closing.is_set():
            changed = self._changed
            for revision, event_kind, event in list(self.history):
                if revision > cursor and event_kind == kind and selected(event["object"]):
                    await response.write(json.dumps(event).encode() + b"\n")
                cursor = max(cursor, revision) if event_kind == kind else cursor
            cursor = max(cursor, self.revision)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or changed is None:
                break
            waiters = {asyncio.ensure_future(changed.wait()), asyncio.ensure_future(closing.wait())}
            _, pending = await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
        await response.write_eof()
        return response

    def _write_denied(self, kind: Kind, namespace: str, name: str, current: dict[str, Any],
                      body: Any) -> aiohttp.web.Response | None:
        key = (kind.short, namespace, name)
        conflict = failure(409, "Conflict",
                           f'Operation cannot be fulfilled on {kind.qualified} "{name}": the object has been '
                           f"modified; please apply your changes to the latest version and try again",
                           {"name": name, "group": kind.group, "kind": kind.plural})
        if self.conflicts.get(key, 0) > 0:
            self.conflicts[key] -= 1
            return conflict
        wanted = body.get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            return conflict
        return None

    def _serve_write(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        namespace, name = request.namespace or "", request.name or ""
        current = self.get_object(kind, namespace, name)
        if current is None:
            return self._not_found(kind, name)
        try:
            body = json.loads(request.body or b"null")
        except ValueError as exc:
            return failure(400, "BadRequest", f"the body of the request is not valid JSON: {exc}")
        if request.method == "PATCH":
            content_type = header(request, "Content-Type")
            try:
                updated = kube_patching.apply_patch(content_type, current, body)
            except kube_patching.PatchError as exc:
                return failure(422, "Invalid", f'{kind.kind}.{kind.group or "core"} "{name}" is invalid: {exc}')
            except ValueError:
                return failure(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - accepted media types include: "
                               + ", ".join(kube_patching.ACCEPTED_PATCH_TYPES))
        else:
            if not isinstance(body, dict):
                return failure(400, "BadRequest", "the body of an update must be an object")
            updated = copy.deepcopy(body)
            updated.setdefault("metadata", {}).setdefault("resourceVersion", "")
        refusal = self._write_denied(kind, namespace, name, current, body if request.method == "PATCH" else {
            "metadata": {"resourceVersion": updated["metadata"].get("resourceVersion")}})
        if refusal is not None:
            return refusal
        updated = self._confine_to_subresource(kind, request.subresource, current, updated)
        if updated["metadata"].get("name") not in (None, name):
            return failure(400, "BadRequest", f'the name of the object ({updated["metadata"]["name"]}) does not '
                                              f"match the name on the URL ({name})")
        updated["metadata"]["name"], updated["metadata"]["namespace"] = name, namespace
        if request.params.get("dryRun") == "All":
            return aiohttp.web.json_response(updated)
        if _same_but_version(current, updated):
            return aiohttp.web.json_response(current)  # a no-op write keeps the resourceVersion, as the real one
        return aiohttp.web.json_response(self.commit(kind, updated))

    @staticmethod
    def _confine_to_subresource(kind: Kind, subresource: str | None, current: dict[str, Any],
                                updated: dict[str, Any]) -> dict[str, Any]:
        """With a status subresource, the main resource ignores status changes and /status only takes status."""
        if not kind.has_status:
            return updated
        if subresource == "status":
            confined = copy.deepcopy(current)
            confined["status"] = updated.get("status", {})
            return confined
        updated["status"] = copy.deepcopy(current.get("status", {}))
        return updated

    def _serve_create_object(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        body = request.data if isinstance(request.data, dict) else None
        if body is None:
            return failure(400, "BadRequest", "the body of a create must be an object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = request.namespace or meta.get("namespace") or "default"
        if not meta.get("name"):
            return failure(422, "Invalid", f"{kind.kind} is invalid: metadata.name: Required value")
        if self.get_object(kind, meta["namespace"], meta["name"]) is not None:
            return failure(409, "AlreadyExists", f'{kind.qualified} "{meta["name"]}" already exists',
                           {"name": meta["name"], "group": kind.group, "kind": kind.plural})
        if request.params.get("dryRun") == "All":
            return aiohttp.web.json_response(obj, status=201)
        return aiohttp.web.json_response(self.commit(kind, obj), status=201)

    def _serve_delete_object(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        removed = self.remove(kind, request.namespace or "", request.name or "")
        if removed is None:
            return self._not_found(kind, request.name or "")
        return aiohttp.web.json_response(removed)

    def _review_access(self, request: kmock.Request) -> aiohttp.web.Response:
        review = request.data if isinstance(request.data, dict) else {}
        attributes = (review.get("spec") or {}).get("resourceAttributes")
        if not isinstance(attributes, dict):
            return failure(422, "Invalid", "SelfSubjectAccessReview.authorization.k8s.io is invalid: spec: "
                                           "Invalid value: resourceAttributes or nonResourceAttributes is required")
        key = (attributes.get("verb", ""), attributes.get("resource", ""), attributes.get("group", ""))
        allowed = key not in self.denied
        answer = copy.deepcopy(review)
        answer.update({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"})
        answer.setdefault("metadata", {})["creationTimestamp"] = None
        answer["status"] = {"allowed": allowed}
        if allowed:
            answer["status"]["reason"] = 'RBAC: allowed by RoleBinding "servo/default" of Role "servo" to ' \
                                         'ServiceAccount "servo/default"'
        return aiohttp.web.json_response(answer, status=201)

    def _serve_metrics(self, request: kmock.Request) -> aiohttp.web.Response:
        if self.usage is None or request.resource is None or request.resource.version != "v1beta1":
            return failure(404, "NotFound", "the server could not find the requested resource")
        if request.resource.plural != "pods":
            return failure(404, "NotFound", "the server could not find the requested resource")
        if ("get" if request.name else "list", "pods", METRICS_GROUP) in self.denied:
            return failure(403, "Forbidden", f'pods.metrics.k8s.io is forbidden: User "{FAKE_USER}" cannot '
                                             f'list resource "pods" in API group "metrics.k8s.io"')
        selected = self._selected(request, kube_objects.KINDS["pod"])
        items = []
        for pod in self.list_objects(kube_objects.KINDS["pod"], request.namespace):
            usage = self._usage_of(pod)
            if usage is None or not selected(pod) or pod["status"].get("phase") != "Running":
                continue
            containers = [container["name"] for container in pod["spec"].get("containers", [])]
            items.append({
                "kind": "PodMetrics",
                "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
                             "creationTimestamp": kube_objects.now(), "labels": pod["metadata"].get("labels", {})},
                "timestamp": kube_objects.now(),
                "window": "30s",
                "containers": [{"name": name, "usage": usage if index == 0 else {"cpu": "0", "memory": "0"}}
                               for index, name in enumerate(containers)],
            })
        if request.name:
            if not items:
                return failure(404, "NotFound", f'podmetrics.metrics.k8s.io "{request.name}" not found')
            return aiohttp.web.json_response(items[0])
        return aiohttp.web.json_response({"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
                                          "metadata": {}, "items": items})

    def _usage_of(self, pod: dict[str, Any]) -> dict[str, str] | None:
        assert self.usage is not None
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if (namespace, name) in self.usage:
            return self.usage[namespace, name]
        for owner in pod["metadata"].get("ownerReferences", []):
            rs = self.get_object(kube_objects.KINDS["replicaset"], namespace, owner["name"])
            for rs_owner in (rs or {}).get("metadata", {}).get("ownerReferences", []):
                if (namespace, rs_owner["name"]) in self.usage:
                    return self.usage[namespace, rs_owner["name"]]
        return None


def _same_but_version(current: dict[str, Any], updated: dict[str, Any]) -> bool:
    strip = copy.deepcopy(updated)
    strip["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    strip["metadata"]["generation"] = current["metadata"].get("generation")
    if "generation" not in current["metadata"]:
        strip["metadata"].pop("generation")
    for field in ("uid", "creationTimestamp"):
        if field in current["metadata"]:
            strip["metadata"][field] = current["metadata"][field]
    return strip == current
