"""A targets file for ``loadgen``: several requests sent in turn, in vegeta's two formats.

``http`` (vegeta's default)::

    # comments and blank lines are ignored
    GET http://shop.default.svc:8080/
    Accept: text/html

    POST http://shop.default.svc:8080/cart
    Content-Type: application/json
    @bodies/cart.json

A line ``METHOD URL`` starts a target; ``Name: value`` lines under it are its headers, and
``@PATH`` its body, read from a file (relative to the targets file; vegeta took it relative to
the working directory).

``json``: one JSON object per line, ``{"method": "GET", "url": "...", "header": {"Name":
["value"]}, "body": "BASE64"}``, as ``vegeta attack -format=json`` reads it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["MAX_TARGETS", "METHODS", "Target", "TargetsFormat", "read_targets"]

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
"""The methods loadgen sends."""
MAX_TARGETS = 10_000
"""The most targets one file may hold (each is kept in memory for the whole measurement)."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest targets or body file read."""
TargetsFormat = Literal["http", "json"]
_HTTP_URL = re.compile(r"^https?://[^/\s]+")


@dataclass(frozen=True)
class Target:
    """One request to send."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


def read_targets(path: Path, targets_format: TargetsFormat) -> list[Target]:
    """The targets in the file at ``path``; ValueError saying what is wrong and where (line N)."""
    text = _read_text(path, "targets file")
    targets = _http_targets(text, path.parent) if targets_format == "http" else _json_targets(text)
    if not targets:
        raise ValueError(f"{path}: no target in it")
    if len(targets) > MAX_TARGETS:
        raise ValueError(f"{path}: {len(targets)} targets, more than {MAX_TARGETS}")
    return targets


def _read_text(path: Path, what: str) -> str:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ValueError(f"{path}: the {what} is larger than {MAX_FILE_BYTES} bytes")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: the {what} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def _check(method: str, url: str, where: str) -> str:
    method = method.upper()
    if method not in METHODS:
        raise ValueError(f"{where}: {method!r} is not one of {', '.join(METHODS)}")
    if not _HTTP_URL.match(url):
        raise ValueError(f"{where}: {url!r} is not an http(s) URL")
    return method


def _http_targets(text: str, folder: Path) -> list[Target]:
    targets: list[Target] = []
    current: dict[str, object] | None = None

    def close() -> None:
        if current is not None:
            targets.append(Target(**current))  # type: ignore[arg-type]  # built from checked parts below

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = f"line {number}"
        if not line or line.startswith("#"):
            continue
        first, _, rest = line.partition(" ")
        if first.upper() in METHODS or (rest and _HTTP_URL.match(rest.strip()) and not first.endswith(":")):
            close()
            current = {"method": _check(first, rest.strip(), where), "url": rest.strip(), "headers": {}}
            continue
        if current is None:
            raise ValueError(f"{where}: a target starts with METHOD URL, not {line!r}")
        if line.startswith("@"):
            body_path = folder / line[1:].strip()
            current["body"] = _read_text(body_path, "body file").encode("utf-8")
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise ValueError(f"{where}: {line!r} is not a header (Name: value), a body (@FILE) or METHOD URL")
        current["headers"][name.strip()] = value.strip()  # type: ignore[index]  # a dict, made above
    close()
    return targets


def _json_targets(text: str) -> list[Target]:
    targets = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{where}: a target is a JSON object")
        method = _check(str(item.get("method", "")), str(item.get("url", "")), where)
        headers: dict[str, str] = {}
        header = item.get("header") or {}
        if not isinstance(header, dict):
            raise ValueError(f"{where}: header is an object of name: [values]")
        for name, values in header.items():
            items = values if isinstance(values, list) else [values]
            headers[str(name)] = ", ".join(str(value) for value in items)
        body = None
        if item.get("body"):
            try:
                body = base64.b64decode(str(item["body"]), validate=True)
            except binascii.Error:
                raise ValueError(f"{where}: body is not base64") from None
        targets.append(Target(method, str(item["url"]), headers, body))
    return targets
