"""One check result as it leaves a connector: the fields a ``check()`` entry may carry, made plain.

A connector's ``check()`` returns a list of mappings. ``name``, ``success`` and ``message`` are
the contract every connector has always met; the rest is optional::

    {"name": "prometheus reachable", "success": False, "message": "connection refused",
     "id": "reachable",                   # short, for `check --id`; default: from the name
     "severity": "critical",              # critical | common (default) | warning
     "tags": ["network"],                 # for `check --tag`
     "remedy": "kubectl -n monitoring get svc prometheus"}   # what a person can run to fix it

``severity`` is servox's: a ``critical`` check is a precondition of the connector's later ones
(``check --halt-on`` skips those after it fails), ``common`` fails on its own, and ``warning`` is
advisory (its failure is shown but fails nothing). ``remedy`` is text for a person: the servo
shows it and never runs it. A default ``id`` is the 8-hex-digit BLAKE2b digest of the name, as
servox makes it, so ids stay the same from run to run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["SEVERITIES", "check_entry", "default_check_id"]

SEVERITIES: Final = ("critical", "common", "warning")
"""A check's severities, the most severe first (servox's ``ErrorSeverity``)."""
DEFAULT_SEVERITY: Final = "common"


def default_check_id(name: str) -> str:
    """The id of a check that gives none: servox's, the BLAKE2b digest (4 bytes) of its name."""
    return hashlib.blake2b(name.encode("utf-8"), digest_size=4).hexdigest()


def check_entry(plain: Mapping[str, Any]) -> dict[str, Any]:
    """``plain`` (one entry of ``check()``, plain data already) in the shape every reader gets.

    Unknown severities read as ``common`` and tags as lowercase text, so a connector's slip never
    loses its result; a remedy that is empty or not text is left out.
    """
    name = str(plain.get("name", ""))
    severity = str(plain.get("severity") or DEFAULT_SEVERITY).lower()
    tags = plain.get("tags") or ()
    if isinstance(tags, str):
        tags = [tags]
    remedy = plain.get("remedy")
    return {
        "name": name,
        "success": bool(plain.get("success", False)),
        "message": str(plain.get("message") or ""),
        "id": str(plain.get("id") or default_check_id(name)),
        "severity": severity if severity in SEVERITIES else DEFAULT_SEVERITY,
        "tags": sorted({str(tag).strip().lower() for tag in tags if str(tag).strip()}),
        "remedy": remedy.strip() if isinstance(remedy, str) and remedy.strip() else None,
    }
