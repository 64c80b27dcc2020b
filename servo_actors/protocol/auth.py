"""The optimizer token: the header it goes out in, and keeping it out of every log line and error.

Apart from the client so that the one place the token is read into a header, and the one place a
reply is scrubbed of it, can be checked on their own (docs/protocol.md, "Endpoint and authentication", gives the token's three forms).

>>> auth_headers(SecretStr("X-SF-Token abc"))
{'X-SF-Token': 'abc'}
>>> redact("echoed: abc", "abc")
'echoed: **********'
"""

from __future__ import annotations

from pydantic import SecretStr

from servo_actors.errors import ConfigError
from servo_actors.logs import MASK

__all__ = ["auth_headers", "redact"]


def auth_headers(token: SecretStr | None) -> dict[str, str]:
    """The token header in its three forms (docs/protocol.md, "Endpoint and authentication"). ConfigError (without the token) if unusable.

    ``X-SF-Token abc`` -> ``X-SF-Token: abc``; ``Bearer abc`` -> ``Authorization: Bearer abc``;
    ``abc`` -> ``Authorization: Bearer abc``.
    """
    if token is None:
        return {}
    value = token.get_secret_value().strip()
    if not value:
        raise ConfigError("is empty", key="optimizer.token")
    if value.startswith("X-SF-Token "):
        name, header = "X-SF-Token", value.removeprefix("X-SF-Token ").strip()
    elif "Bearer" in value:
        name, header = "Authorization", value
    else:
        name, header = "Authorization", f"Bearer {value}"
    # requests would quote a bad header value in its exception: refuse it here, without the value.
    if not header or header.startswith(" ") or any(not (" " <= ch <= "~") for ch in header):
        raise ConfigError(
            "is empty or has characters an HTTP header cannot carry (control or non-ASCII)",
            key="optimizer.token",
        )
    return {name: header}


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` masked (unchanged when there is no secret)."""
    # A server might echo what we sent; the token must not reach a log line through it.
    return text.replace(secret, MASK) if secret else text
