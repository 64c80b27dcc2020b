"""kmock's Kubernetes emulator with the API-server semantics a connector relies on.

kmock (nolar/kmock) parses Kubernetes URLs, keeps every version of every object, serves discovery
and ``/version`` and renders errors as ``Status``. Its built-in create/patch handling, though, runs
in ``KubernetesEmulator._handle`` *before* any user reaction, merges dicts and replaces every
list, and keeps no resourceVersion: a reaction can neither refuse a write (409, 415, 403, 422) nor
merge containers by name. So this subclass answers the requests for the kinds of
``kube_objects.KINDS`` itself (storing the versions in ``kmock.objects`` through KubeStore) and
leaves every other URL (discovery, /version, unknown paths) to kmock. Everything here runs on the
server's event-loop thread; the test and the controllers reach it through ``KubeApiHost.call``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp.web
import attrs
import kmock
import kube_objects
import kube_patching
import kube_selectors
import kube_validation
import kube_watch
from kube_access import AccessPolicy
from kube_metrics import PodUsage
from kube_objects import Kind
from kube_store import WATCH_HISTORY, KubeStore
from kube_watch import status_body

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
METRICS_GROUP = "metrics.k8s.io"
SCALABLE = ("deployment", "replicaset")
NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(?:/([^/]+))?/?$")
BUILTIN_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")


@dataclass(frozen=True)
class WriteRecord:
    """One write received over HTTP (the test's ``patch_log`` entries are these as tuples)."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]


def failure(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> aiohttp.web.Response:
    return aiohttp.web.json_response(status_body(code, reason, message, details), status=code)


def header(request: kmock.Request, name: str) -> str:
    """A request header by its case-insensitive name (kmock keeps them in a plain dict as sent)."""
    wanted = name.lower()
    return next((value for key, value in request.headers.items() if key.lower() == wanted), "")


def _details(kind: Kind, name: str) -> dict[str, Any]:
    return {"name": name, "group": kind.group, "kind": kind.plural}


def _same_but_version(current: dict[str, Any], updated: dict[str, Any]) -> bool:
    """Whether a write changes nothing but what the server itself stamps (then it is a no-op)."""
    stamped = copy.deepcopy(updated)
    for field in ("resourceVersion", "generation", "uid", "creationTimestamp"):
        if field in current["metadata"]:
            stamped["metadata"][field] = current["metadata"][field]
        else:
            stamped["metadata"].pop(field, None)
    return stamped == current


@attrs.define(kw_only=True)
class EmulatedApiServer(kmock.KubernetesEmulator):
    """The request handler; ``store``, ``access``, ``usage`` and ``conflicts`` are its state."""

    token: str | None = None
    watch_history: int = WATCH_HISTORY
    store: KubeStore = attrs.field(init=False)
    access: AccessPolicy = attrs.field(factory=AccessPolicy, init=False)
    usage: PodUsage = attrs.field(factory=PodUsage, init=False)
    writes: list[WriteRecord] = attrs.field(factory=list, init=False)
    conflicts: dict[tuple[str, str, str], int] = attrs.field(factory=dict, init=False)
    _closing: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _metrics_resources: dict[Any, Any] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.store = KubeStore(self.objects, self.watch_history)
        with warnings.catch_warnings():  # kmock 0.8 reads its bundled file with a deprecated importlib call
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resources.load_bundled()  # discovery answers as a k3s cluster's do (kinds, verbs, namespaced)
        # metrics-server is absent until set_metrics (install_metrics): its group is not discoverable either.
        self._metrics_resources = {
            resource: self.resources[resource]
            for resource in list(self.resources)
            if resource.group == METRICS_GROUP
        }
        for resource in self._metrics_resources:
            del self.resources[resource]

    def install_metrics(self) -> None:
        """metrics-server appears: PodMetrics are served and its API group is discoverable."""
        for resource, info in self._metrics_resources.items():
            self.resources[resource] = info

    def open_watches(self) -> None:
        self._closing = asyncio.Event()

    def close_watches(self) -> None:
        """End every open watch stream (the server going away ends them for the clients too)."""
        self._closing.set()

    # ---- routing ----------------------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock 0.8 cannot parse the cluster-scoped /api/v1/namespaces (parsing.parse_path raises
        # "not enough values to unpack"), so namespaces are answered before kmock parses anything.
        if match := NAMESPACE_PATH.match(raw_request.path):
            if not self._authenticated(raw_request.headers.get("Authorization", ""), raw_request.transport):
                return failure(401, "Unauthorized", "Unauthorized")
            return self._serve_namespace(raw_request.method, match.group(1))
        return await super().__call__(raw_request)

    def _authenticated(self, authorization: str, transport: Any) -> bool:
        """The bearer token of the kubeconfig, or a client certificate the TLS layer verified."""
        if self.token is None or authorization == f"Bearer {self.token}":
            return True
        return bool(transport is not None and transport.get_extra_info("peercert"))

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        raw = request._raw_request
        if not self._authenticated(
            header(request, "Authorization"), raw.transport if raw is not None else None
        ):
            return failure(401, "Unauthorized", "Unauthorized")
        resource = request.resource
        if request.method == "POST" and request.url.path == SSAR_PATH:
            return self._review_access(request)
        if resource is not None and resource.group == METRICS_GROUP and resource.plural:
            return self._serve_metrics(request)
        if resource is not None and resource.group == METRICS_GROUP and not self.usage.installed:
            return failure(404, "NotFound", "the server could not find the requested resource")
        kind = (
            None
            if resource is None
            else kube_objects.KINDS_BY_URL.get((resource.group, resource.version, resource.plural))
        )
        if kind is None:
            return await super()._handle(request)
        if request.method in ("POST", "PUT", "PATCH", "DELETE"):
            self.writes.append(
                WriteRecord(request.method, request.url.path, request.data, dict(request.headers))
            )
        subresource = request.subresource
        if (
            subresource not in (None, "status", "scale")
            or (subresource == "status" and not kind.has_status)
            or (subresource == "scale" and kind.short not in SCALABLE)
        ):
            return failure(404, "NotFound", "the server could not find the requested resource")
        verb = self._verb(request)
        rbac_resource = f"{kind.plural}/{subresource}" if subresource else kind.plural
        if not self.access.allowed(verb, rbac_resource, kind.group):
            message = self.access.forbidden_message(
                verb, rbac_resource, kind.group, request.name, request.namespace
            )
            return failure(403, "Forbidden", message, _details(kind, request.name or ""))
        try:
            return await self._dispatch(request, kind, verb)
        except kube_selectors.SelectorError as exc:
            return failure(400, "BadRequest", str(exc))

    async def _dispatch(self, request: kmock.Request, kind: Kind, verb: str) -> aiohttp.web.StreamResponse:
        if verb == "watch":
            return await kube_watch.serve_watch(
                self.store,
                request._raw_request,  # as kmock's own streaming does
                kind,
                request.namespace,
                request.params,
                self._selected(request, kind),
                self._closing,
            )
        if verb == "list":
            return self._serve_list(request, kind)
        if request.subresource == "scale":
            return self._serve_scale(request, kind, verb)
        if verb == "get":
            obj = self.store.get(kind, request.namespace or "", request.name or "")
            return aiohttp.web.json_response(obj) if obj else self._not_found(kind, request.name or "")
        if verb in ("patch", "update"):
            return self._serve_write(request, kind)
        if verb == "create":
            return self._serve_create(request, kind)
        if verb == "delete":
            removed = self.store.remove(kind, request.namespace or "", request.name or "")
            return (
                aiohttp.web.json_response(removed) if removed else self._not_found(kind, request.name or "")
            )
        return failure(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )

    @staticmethod
    def _verb(request: kmock.Request) -> str:
        if request.method == "GET":
            if request.params.get("watch") in ("true", "1"):
                return "watch"
            return "get" if request.name else "list"
        return {"PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete"}.get(
            request.method, request.method.lower()
        )

    def _not_found(self, kind: Kind, name: str) -> aiohttp.web.Response:
        return failure(404, "NotFound", f'{kind.qualified} "{name}" not found', _details(kind, name))

    def _selected(self, request: kmock.Request, kind: Kind) -> Callable[[dict[str, Any]], bool]:
        by_label = kube_selectors.label_matcher(request.params.get("labelSelector"))
        by_field = kube_selectors.field_matcher(request.params.get("fieldSelector"), kind.field_selectors)
        name = request.name

        def selected(obj: dict[str, Any]) -> bool:
            return (
                (name is None or obj.get("metadata", {}).get("name") == name)
                and by_label(obj)
                and by_field(obj)
            )

        return selected

    # ---- reads ------------------------------------------------------------------------------------

    def _serve_list(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        selected = self._selected(request, kind)
        items = [obj for obj in self.store.list(kind, request.namespace) if selected(obj)]
        items.sort(key=lambda obj: (obj["metadata"]["namespace"], obj["metadata"]["name"]))
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.revision)}
        start = 0
        if request.params.get("continue"):
            try:
                start = int(json.loads(base64.urlsafe_b64decode(request.params["continue"]))["start"])
            except (ValueError, KeyError, TypeError):
                return failure(400, "BadRequest", "continue key is not valid: illegal base64 data")
        limit = int(request.params.get("limit") or 0)
        if limit > 0 and start + limit < len(items):
            token = json.dumps({"start": start + limit, "rv": self.store.revision}).encode()
            metadata["continue"] = base64.urlsafe_b64encode(token).decode()
            metadata["remainingItemCount"] = len(items) - start - limit
            items = items[start : start + limit]
        else:
            items = items[start:]
        return aiohttp.web.json_response(
            {"apiVersion": kind.api_version, "kind": f"{kind.kind}List", "metadata": metadata, "items": items}
        )

    def _serve_metrics(self, request: kmock.Request) -> aiohttp.web.Response:
        resource = request.resource
        absent = failure(404, "NotFound", "the server could not find the requested resource")
        if (
            not self.usage.installed
            or resource is None
            or (resource.version, resource.plural) != ("v1beta1", "pods")
        ):
            return absent
        verb = "get" if request.name else "list"
        if not self.access.allowed(verb, "pods", METRICS_GROUP):
            return failure(
                403,
                "Forbidden",
                self.access.forbidden_message(verb, "pods", METRICS_GROUP, request.name, request.namespace),
            )
        try:
            items = self.usage.pod_metrics(
                self.store, request.namespace, self._selected(request, kube_objects.KINDS["pod"])
            )
        except kube_selectors.SelectorError as exc:
            return failure(400, "BadRequest", str(exc))
        if request.name:
            if not items:
                return failure(404, "NotFound", f'podmetrics.metrics.k8s.io "{request.name}" not found')
            return aiohttp.web.json_response(items[0])
        return aiohttp.web.json_response(
            {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": items}
        )

    def _serve_namespace(self, method: str, name: str | None) -> aiohttp.web.Response:
        """Namespaces (read only): the built-in ones and every one holding an object."""
        verb = "get" if name else "list"
        if method != "GET":
            return failure(405, "MethodNotAllowed", "the emulated cluster's namespaces are read only")
        if not self.access.allowed(verb, "namespaces", ""):
            return failure(
                403, "Forbidden", self.access.forbidden_message(verb, "namespaces", "", name, None)
            )
        names = sorted(
            set(BUILTIN_NAMESPACES)
            | {ns for (_, ns, _), obj in self.objects.items() if ns and not obj.deleted}
        )
        items = [
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            for ns in names
        ]
        if name is None:
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {"resourceVersion": str(self.store.revision)},
                    "items": items,
                }
            )
        found = next((item for item in items if item["metadata"]["name"] == name), None)
        if found is None:
            return failure(
                404, "NotFound", f'namespaces "{name}" not found', {"name": name, "kind": "namespaces"}
            )
        return aiohttp.web.json_response(found)

    def _review_access(self, request: kmock.Request) -> aiohttp.web.Response:
        answer = self.access.review(request.data if isinstance(request.data, dict) else {})
        if answer is None:
            return failure(
                422,
                "Invalid",
                "SelfSubjectAccessReview.authorization.k8s.io is invalid: spec: "
                "Invalid value: resourceAttributes or nonResourceAttributes is required",
            )
        return aiohttp.web.json_response(answer, status=201)

    # ---- writes -----------------------------------------------------------------------------------

    def _body(self, request: kmock.Request) -> tuple[Any, aiohttp.web.Response | None]:
        try:
            return json.loads(request.body or b"null"), None
        except ValueError as exc:
            return None, failure(400, "BadRequest", f"the body of the request is not valid JSON: {exc}")

    def _patched(
        self, request: kmock.Request, kind: Kind, current: dict[str, Any], body: Any
    ) -> tuple[dict[str, Any] | None, aiohttp.web.Response | None]:
        """The object after the request's PATCH or PUT body, or the refusal."""
        name = current["metadata"]["name"]
        if request.method == "PUT":
            if not isinstance(body, dict):
                return None, failure(400, "BadRequest", "the body of an update must be an object")
            return copy.deepcopy(body), None
        content_type = header(request, "Content-Type").split(";", 1)[0].strip().lower()
        if content_type == kube_patching.APPLY_PATCH:
            return None, failure(
                415,
                "UnsupportedMediaType",
                "server-side apply (application/apply-patch+yaml) is not emulated: field ownership "
                "and its conflicts would be silently wrong; use a strategic merge patch",
            )
        try:
            return kube_patching.apply_patch(content_type, current, body), None
        except kube_patching.PatchError as exc:
            return None, failure(
                422, "Invalid", f'{kind.kind} "{name}" is invalid: {exc}', _details(kind, name)
            )
        except ValueError:
            return None, failure(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(kube_patching.ACCEPTED_PATCH_TYPES),
            )

    def _conflict(
        self, kind: Kind, namespace: str, name: str, current: dict[str, Any], wanted_version: str | None
    ) -> aiohttp.web.Response | None:
        refusal = failure(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {kind.qualified} "{name}": the object has been '
            f"modified; please apply your changes to the latest version and try again",
            _details(kind, name),
        )
        key = (kind.short, namespace, name)
        if self.conflicts.get(key, 0) > 0:
            self.conflicts[key] -= 1
            return refusal
        if wanted_version and wanted_version != current["metadata"]["resourceVersion"]:
            return refusal
        return None

    def _invalid(
        self, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> aiohttp.web.Response | None:
        problems = kube_validation.normalize_and_validate(kind, obj, old)
        if not problems:
            return None
        name = obj["metadata"].get("name", "")
        message = kube_validation.message(kind, name, problems)
        if any(problem.bad_request for problem in problems):
            return failure(400, "BadRequest", message)
        details = _details(kind, name) | {
            "kind": kind.kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": problem.message, "field": problem.field}
                for problem in problems
            ],
        }
        return failure(422, "Invalid", message, details)

    def _serve_write(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        namespace, name = request.namespace or "", request.name or ""
        current = self.store.get(kind, namespace, name)
        if current is None:
            return self._not_found(kind, name)
        body, refusal = self._body(request)
        if refusal is not None:
            return refusal
        updated, refusal = self._patched(request, kind, current, body)
        if refusal is not None or updated is None:
            return refusal or failure(500, "InternalError", "no object")
        if not isinstance(updated.get("metadata"), dict):
            updated["metadata"] = {}
        wanted = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        refusal = self._conflict(kind, namespace, name, current, wanted)
        if refusal is not None:
            return refusal
        if updated["metadata"].get("name") not in (None, name):
            return failure(
                400,
                "BadRequest",
                f"the name of the object ({updated['metadata']['name']}) does not "
                f"match the name on the URL ({name})",
            )
        updated["metadata"]["name"], updated["metadata"]["namespace"] = name, namespace
        if kind.has_status:
            # With a status subresource, writes to the object ignore status and /status takes only status.
            if request.subresource == "status":
                updated = dict(current, status=updated.get("status", {}))
            else:
                updated["status"] = copy.deepcopy(current.get("status", {}))
        refusal = self._invalid(kind, updated, current)
        if refusal is not None:
            return refusal
        if request.params.get("dryRun") == "All":
            return aiohttp.web.json_response(updated)
        if _same_but_version(current, updated):
            return aiohttp.web.json_response(current)  # a no-op keeps the resourceVersion, as the real one
        return aiohttp.web.json_response(self.store.commit(kind, updated))

    def _serve_scale(self, request: kmock.Request, kind: Kind, verb: str) -> aiohttp.web.Response:
        """The autoscaling/v1 Scale subresource: spec.replicas of the object, and its selector."""
        namespace, name = request.namespace or "", request.name or ""
        current = self.store.get(kind, namespace, name)
        if current is None:
            return self._not_found(kind, name)
        scale = _scale_of(current)
        if verb == "get":
            return aiohttp.web.json_response(scale)
        if verb not in ("patch", "update"):
            return failure(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        body, refusal = self._body(request)
        if refusal is not None:
            return refusal
        updated_scale, refusal = self._patched(request, kind, scale, body)
        if refusal is not None or updated_scale is None:
            return refusal or failure(500, "InternalError", "no object")
        wanted = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        refusal = self._conflict(kind, namespace, name, current, wanted)
        if refusal is not None:
            return refusal
        updated = copy.deepcopy(current)
        updated["spec"]["replicas"] = (updated_scale.get("spec") or {}).get("replicas", 0)
        refusal = self._invalid(kind, updated, current)
        if refusal is not None:
            return refusal
        if request.params.get("dryRun") != "All" and not _same_but_version(current, updated):
            updated = self.store.commit(kind, updated)
        return aiohttp.web.json_response(_scale_of(updated))

    def _serve_create(self, request: kmock.Request, kind: Kind) -> aiohttp.web.Response:
        body, refusal = self._body(request)
        if refusal is not None:
            return refusal
        if not isinstance(body, dict):
            return failure(400, "BadRequest", "the body of a create must be an object")
        meta = body.setdefault("metadata", {})
        meta["namespace"] = request.namespace or meta.get("namespace") or "default"
        if not meta.get("name"):
            return failure(422, "Invalid", f"{kind.kind} is invalid: metadata.name: Required value")
        if self.store.get(kind, meta["namespace"], meta["name"]) is not None:
            return failure(
                409,
                "AlreadyExists",
                f'{kind.qualified} "{meta["name"]}" already exists',
                _details(kind, meta["name"]),
            )
        refusal = self._invalid(kind, body, None)
        if refusal is not None:
            return refusal
        if request.params.get("dryRun") == "All":
            return aiohttp.web.json_response(body, status=201)
        return aiohttp.web.json_response(self.store.commit(kind, body), status=201)


def _scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    labels = (obj["spec"].get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        },
        "spec": {"replicas": obj["spec"].get("replicas", 1)},
        "status": {
            "replicas": obj.get("status", {}).get("replicas", 0),
            "selector": ",".join(f"{key}={value}" for key, value in sorted(labels.items())),
        },
    }
