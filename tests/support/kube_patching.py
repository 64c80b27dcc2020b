"""The three PATCH flavours of the Kubernetes API, as pure functions over JSON-like dicts.

kmock merges dicts and replaces every list; the real API server merges some lists by a key
(``patchMergeKey`` in the API types) under a strategic merge patch. The table below covers the
lists of the objects the emulator serves (Deployment, ReplicaSet, Pod, HPA); every other list is
replaced, as the real server does for lists without a patch strategy.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
ACCEPTED_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH, STRATEGIC_MERGE)
"""What the real server lists in its 415 answer (apply is listed but the emulator refuses it)."""

_POD_SPEC_LISTS_BY_NAME = (
    "containers",
    "initContainers",
    "ephemeralContainers",
    "volumes",
    "imagePullSecrets",
)
_CONTAINER_LIST_KEYS = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
}


class PatchError(ValueError):
    """A patch the server cannot apply (answered 422 by the emulator)."""


def merge_key(path: tuple[str, ...]) -> str | None:
    """The ``patchMergeKey`` of the list at ``path`` (list items are ``"*"``), or None to replace it."""
    if not path:
        return None
    field, parent = path[-1], path[:-1]
    in_pod_spec = parent == ("spec",) or parent[-2:] == ("template", "spec")
    if field in _POD_SPEC_LISTS_BY_NAME and in_pod_spec:
        return "name"
    if (
        field in _CONTAINER_LIST_KEYS
        and len(parent) >= 2
        and parent[-1] == "*"
        and parent[-2] in ("containers", "initContainers", "ephemeralContainers")
    ):
        return _CONTAINER_LIST_KEYS[field]
    if field == "conditions" and parent == ("status",):
        return "type"
    if path == ("metadata", "ownerReferences"):
        return "uid"
    return None


def strategic_merge(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply a strategic merge patch (``$patch``, ``$setElementOrder``, ``$retainKeys`` honoured)."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    merged = _merge_map(copy.deepcopy(original), patch, ())
    if merged is None:
        raise PatchError("a strategic merge patch cannot delete the whole object")
    return merged


def _merge_map(
    original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]
) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return _without_directives(patch)
    if directive is not None:
        raise PatchError(f"unknown $patch directive {directive!r} at {'.'.join(path) or '<root>'}")
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            orders[key.split("/", 1)[1]] = value
        elif key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            original[field] = [item for item in original.get(field) or [] if item not in value]
        elif key.startswith("$"):
            continue
        elif value is None:
            original.pop(key, None)
        elif isinstance(value, dict) and isinstance(original.get(key), dict):
            merged = _merge_map(original[key], value, path + (key,))
            if merged is None:
                original.pop(key, None)
            else:
                original[key] = merged
        elif isinstance(value, list) and (mkey := merge_key(path + (key,))) is not None:
            original[key] = _merge_list(original.get(key) or [], value, mkey, path + (key,))
        else:
            original[key] = _without_directives(value)
    for field, order in orders.items():
        mkey = merge_key(path + (field,))
        if mkey is not None and isinstance(original.get(field), list):
            original[field] = _reorder(original[field], order, mkey)
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"])
        original = {key: value for key, value in original.items() if key in keep}
    return original


def _merge_list(original: list[Any], patch: list[Any], mkey: str, path: tuple[str, ...]) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_without_directives(item) for item in patch if item.get("$patch") != "replace"]
    merged = list(original)
    for item in patch:
        if not isinstance(item, dict) or mkey not in item:
            raise PatchError(f"{'.'.join(path)}: every item must be an object with {mkey!r}")
        index = next(
            (i for i, old in enumerate(merged) if isinstance(old, dict) and old.get(mkey) == item[mkey]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(_without_directives(item))
        else:
            merged[index] = _merge_map(merged[index], item, path + ("*",)) or {}
    return merged


def _reorder(items: list[Any], order: list[Any], mkey: str) -> list[Any]:
    wanted = [entry.get(mkey) for entry in order if isinstance(entry, dict)]
    ranked = {value: rank for rank, value in enumerate(wanted)}
    listed = sorted((item for item in items if item.get(mkey) in ranked), key=lambda item: ranked[item[mkey]])
    return listed + [item for item in items if item.get(mkey) not in ranked]


def _without_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_directives(item) for key, item in value.items() if not key.startswith("$")}
    if isinstance(value, list):
        return [_without_directives(item) for item in value]
    return value


def merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, ``null`` deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(original: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902 JSON patch (a list of operations)."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(copy.deepcopy(original), operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, TypeError) as exc:
        raise PatchError(f"the JSON patch cannot be applied: {exc}") from exc


def apply_patch(content_type: str, original: dict[str, Any], body: Any) -> dict[str, Any]:
    """Dispatch on the request's Content-Type (parameters such as charset ignored)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == STRATEGIC_MERGE:
        return strategic_merge(original, body)
    if kind == MERGE_PATCH:
        if not isinstance(body, dict):
            raise PatchError("a merge patch must be a JSON object")
        return merge_patch(original, body)
    if kind == JSON_PATCH:
        return json_patch(original, body)
    raise ValueError(kind)
