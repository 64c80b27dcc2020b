"""``HOST:PORT`` of the actor systems of a convention: parsed once, checked, printed back the same.

Thespian's TCP transport speaks IPv4 only, and an address that others must reach cannot be a
wildcard: a system listens exactly on the address it is given, never on every interface. So
``HOST`` is a dotted IPv4 address other than ``0.0.0.0`` (a name would be resolved once, here,
and could then differ from what peers resolve: an address is what the user means anyway).

>>> parse_endpoint("10.0.0.5:1900")
Endpoint(host='10.0.0.5', port=1900)
>>> str(parse_endpoint(" 127.0.0.2:1901 "))
'127.0.0.2:1901'
>>> parse_endpoint("0.0.0.0:1900")
Traceback (most recent call last):
...
ValueError: '0.0.0.0:1900': 0.0.0.0 would listen on every interface; give this host's address on the network the other systems reach it by
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = [
    "Endpoint",
    "MAX_PORT",
    "parse_endpoint",
]

MAX_PORT = 65535


@dataclass(frozen=True, order=True)
class Endpoint:
    """One TCP endpoint: an IPv4 address and a port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def thespian(self) -> str:
        """The form Thespian's ``Convention Address.IPv4`` capability takes."""
        return str(self)


def parse_endpoint(text: object) -> Endpoint:
    """``text`` (``HOST:PORT``) as an Endpoint; ValueError saying what is wrong with it."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not HOST:PORT")
    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not host or not port_text:
        raise ValueError(f"{raw!r} is not HOST:PORT (for example 10.0.0.5:1900)")
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(
            f"{raw!r}: {host!r} is not an IPv4 address (Thespian's TCP transport is IPv4 only; "
            "write the address, not a name)"
        ) from None
    if address.is_unspecified:
        raise ValueError(
            f"{raw!r}: {host} would listen on every interface; give this host's address on the "
            "network the other systems reach it by"
        )
    if address.is_multicast:
        raise ValueError(f"{raw!r}: {host} is a multicast address")
    if not port_text.isdigit() or not 1 <= int(port_text) <= MAX_PORT:
        raise ValueError(f"{raw!r}: port {port_text!r} is not a number from 1 to {MAX_PORT}")
    return Endpoint(str(address), int(port_text))
