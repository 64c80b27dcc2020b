"""Who may do what: the emulated RBAC, as requests (403) and SelfSubjectAccessReviews see it.

By default everything is allowed (a cluster-admin kubeconfig), minus what ``deny()`` took away.
``restrict_to(role)`` instead allows exactly the rules of a Role manifest, as the servo's
ServiceAccount bound to deploy/kubernetes/role.yaml would be. Subresources are their own
resources (``deployments/scale``), as in RBAC.
"""

from __future__ import annotations

from typing import Any

USER = "system:serviceaccount:default:servo"


class AccessPolicy:
    """allowed(verb, resource, group) and the real server's answers built on it."""

    def __init__(self) -> None:
        self.denied: set[tuple[str, str, str]] = set()
        self.rules: list[dict[str, Any]] | None = None

    def restrict_to(self, role: dict[str, Any] | None) -> None:
        self.rules = None if role is None else list(role.get("rules") or [])

    def allowed(self, verb: str, resource: str, group: str) -> bool:
        if (verb, resource, group) in self.denied:
            return False
        if self.rules is None:
            return True
        return any(
            _covers(rule.get("verbs"), verb)
            and _covers(rule.get("resources"), resource)
            and _covers(rule.get("apiGroups"), group)
            for rule in self.rules
        )

    def forbidden_message(
        self, verb: str, resource: str, group: str, name: str | None, namespace: str | None
    ) -> str:
        plural, _, subresource = resource.partition("/")
        qualified = f"{plural}.{group}" if group else plural
        named = f' "{name}"' if name else ""
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        return (
            f'{qualified}{named} is forbidden: User "{USER}" cannot {verb} resource "{plural}"'
            + (f' subresource "{subresource}"' if subresource else "")
            + f' in API group "{group}"{where}'
        )

    def review(self, review: dict[str, Any]) -> dict[str, Any] | None:
        """The answer to a SelfSubjectAccessReview, or None if it names no resourceAttributes."""
        attributes = (review.get("spec") or {}).get("resourceAttributes")
        if not isinstance(attributes, dict):
            return None
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource = f"{resource}/{attributes['subresource']}"
        allowed = self.allowed(attributes.get("verb", ""), resource, attributes.get("group", ""))
        answer = {key: value for key, value in review.items() if key != "status"}
        answer.update({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"})
        answer["metadata"] = dict(answer.get("metadata") or {}, creationTimestamp=None)
        answer["status"] = {"allowed": allowed}
        if allowed:
            answer["status"]["reason"] = (
                'RBAC: allowed by RoleBinding "servo/default" of Role "servo" to '
                'ServiceAccount "servo/default"'
            )
        return answer


def _covers(listed: Any, wanted: str) -> bool:
    values = list(listed or [])
    return "*" in values or wanted in values
