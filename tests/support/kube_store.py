"""The emulated cluster's objects: kmock's ObjectsArray plus resourceVersion, generation and a change log.

kmock keeps every version of every object (``kmock.objects[...].history``) but no resourceVersion,
generation, uid or ordering of changes. This store stamps them the way the API server does (one
cluster-wide counter, as etcd's revision; generation only on spec changes) and keeps the change
log that watches resume from. It is used on the server's event-loop thread only.
"""

from __future__ import annotations

import asyncio
import marshal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kmock
import kube_objects
from kube_objects import Kind


def clone(obj: Any) -> Any:
    """A deep copy of a JSON-shaped value (dicts, lists, strings, numbers), several times faster
    than copy.deepcopy, which dominated the controllers' passes."""
    return marshal.loads(marshal.dumps(obj))


WATCH_HISTORY = 5000
"""Changes kept for watches resuming from a resourceVersion; older ones answer 410 Gone."""


@dataclass(frozen=True)
class Change:
    """One stored change, as a watch sends it (``previous`` lets selector watches see objects leave)."""

    revision: int
    kind: Kind
    type: str
    obj: dict[str, Any]
    previous: dict[str, Any] | None


class KubeStore:
    """Versioned objects by (kind, namespace, name); see the module docstring."""

    def __init__(self, objects: kmock.ObjectsArray, history: int = WATCH_HISTORY) -> None:
        self.objects = objects
        self.revision = 0
        self.changes: deque[Change] = deque(maxlen=history)
        self.on_change: Callable[[], None] | None = None
        self.quiet = False  # set while the controllers write: their own writes need not wake them again
        self.changed = asyncio.Event()  # replaced on every change; waiters hold the one they saw
        self._event_serial = 0
        # The live objects by kind, so a list does not walk every version of every kind in kmock's array.
        self._live: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._events_by_key: dict[tuple[str, str, str], tuple[str, str]] = {}

    @staticmethod
    def _key(kind: Kind, namespace: str, name: str) -> tuple[kmock.resource, str, str]:
        return kmock.resource(kind.group, kind.version, kind.plural), namespace, name

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._live.get(kind.short, {}).get((namespace, name))
        return None if obj is None else clone(obj)

    def list(self, kind: Kind, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            clone(obj)
            for (ns, _), obj in self._live.get(kind.short, {}).items()
            if namespace is None or ns == namespace
        ]

    def peek(self, kind: Kind, namespace: str | None = None) -> list[dict[str, Any]]:
        """The stored objects themselves, for read-only scans (a write replaces, never mutates, them)."""
        return [
            obj
            for (ns, _), obj in self._live.get(kind.short, {}).items()
            if namespace is None or ns == namespace
        ]

    @property
    def oldest_revision(self) -> int:
        """The oldest revision a watch can still resume after."""
        return self.changes[0].revision - 1 if self.changes else self.revision

    def commit(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new version: identity on create, a new resourceVersion, generation+1 if spec changed."""
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        namespace, name = meta["namespace"], meta["name"]
        old = self.get(kind, namespace, name)
        self.revision += 1
        if old is None:
            meta["uid"] = meta.get("uid") or kube_objects.new_uid()
            meta["creationTimestamp"] = meta.get("creationTimestamp") or kube_objects.now()
            if "spec" in obj:
                meta["generation"] = 1
        else:
            meta["uid"], meta["creationTimestamp"] = (
                old["metadata"]["uid"],
                old["metadata"]["creationTimestamp"],
            )
            if "generation" in old["metadata"]:
                bump = 1 if old.get("spec") != obj.get("spec") else 0
                meta["generation"] = old["metadata"]["generation"] + bump
        meta["resourceVersion"] = str(self.revision)
        key = self._key(kind, namespace, name)
        stored = clone(obj)
        if key in self.objects:
            self.objects[key].history.append(stored)
        else:
            self.objects[key] = stored
        self._live.setdefault(kind.short, {})[namespace, name] = clone(obj)
        self._publish(Change(self.revision, kind, "ADDED" if old is None else "MODIFIED", obj, old))
        return clone(obj)

    def remove(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.get(kind, namespace, name)
        if obj is None:
            return None
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        self.objects[self._key(kind, namespace, name)].delete()
        del self._live[kind.short][namespace, name]
        self._publish(Change(self.revision, kind, "DELETED", obj, None))
        return obj

    def record_event(
        self, involved: dict[str, Any], reason: str, message: str, warning: bool, component: str
    ) -> None:
        """An Event about ``involved``; a repeat of the same one counts up, as the event recorder does."""
        events = kube_objects.KINDS["event"]
        key = (involved["metadata"].get("uid", ""), reason, message)
        known = self._events_by_key.get(key)
        event = self.get(events, *known) if known else None
        if event is not None:
            event["count"] += 1
            event["lastTimestamp"] = kube_objects.now()
            self.commit(events, event)
            return
        self._event_serial += 1
        event = self.commit(
            events, kube_objects.event(involved, reason, message, warning, component, self._event_serial)
        )
        self._events_by_key[key] = (event["metadata"]["namespace"], event["metadata"]["name"])

    def _publish(self, change: Change) -> None:
        self.changes.append(change)
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()
        if self.on_change is not None and not self.quiet:
            self.on_change()
