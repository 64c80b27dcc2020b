"""``HOST:PORT`` listen addresses (``settings.metrics.listen``, ``run --metrics-listen``).

Only IP literals and ``localhost`` are accepted, so that where the servo listens is decided by the
configuration, never by a name server::

    >>> parse_listen("127.0.0.1:9464")
    ('127.0.0.1', 9464)
    >>> parse_listen("[::1]:9464")
    ('::1', 9464)
    >>> parse_listen("localhost:9464")
    ('127.0.0.1', 9464)
"""

from __future__ import annotations

import ipaddress

__all__ = [
    "LOCALHOST",
    "MAX_PORT",
    "format_listen",
    "parse_listen",
]

LOCALHOST = "127.0.0.1"
MAX_PORT = 65535


def parse_listen(value: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT``; ValueError saying what is wrong with it."""
    text = value.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9464)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{value!r}: write an IPv6 address in brackets, as [::1]:9464")
    if host == "localhost":
        host = LOCALHOST
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        raise ValueError(f"{value!r}: the host must be an IP address or localhost, not {host!r}") from None
    if not port_text.isdigit() or not 1 <= int(port_text) <= MAX_PORT:
        raise ValueError(f"{value!r}: the port must be a number from 1 to {MAX_PORT}")
    return host, int(port_text)


def format_listen(host: str, port: int) -> str:
    """``HOST:PORT`` again, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
