"""The optimizer token: the header it goes out in (docs/protocol.md, "Endpoint and
authentication", gives the token's three forms). Keeping it out of every log line and error is
``logs.redact``'s, the one redaction: the client passes it the token.

>>> auth_headers(SecretStr("X-SF-Token abc"))
{'X-SF-Token': 'abc'}
"""

from __future__ import annotations

from pydantic import SecretStr

from servo_actors.errors import ConfigError

__all__ = ["auth_headers"]


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
