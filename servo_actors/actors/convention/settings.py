"""The leader's side of a convention, from ``supervisor.convention``: how its actor system starts,
and the settings its supervisor places connectors by.

Without ``supervisor.convention`` nothing here applies: the actor system listens on a free
loopback port with a random per-run key. With it, the servo's actor system (admin, logger,
supervisor, local connector hosts and the servo process's own endpoint) listens only on
``listen``, its admin on that port, so that member systems (``servo-actors agent --join``) can
register with it, and every message is authenticated with the key in ``secret_file``.

Thespian facts this relies on (4.0.1): a system whose capabilities name no ``Convention
Address.IPv4`` is its own convention leader; members register with the leader's admin, which
tells actors that asked (``notifyOnSystemRegistrationChanges``) with an
``ActorSystemConventionUpdate`` carrying the member's capabilities (``remote_hosts.py`` takes it
from there). Addresses compare equal across two local addresses on one port: two systems of one
machine (127.0.0.1 and 127.0.0.2 in tests) must use different ports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servo_actors.actors.rules.placement import DEFAULT_GRACE, Requirement
from servo_actors.actors.transport import message_auth
from servo_actors.config.models import ServoConfig
from servo_actors.endpoints import parse_endpoint
from servo_actors.errors import ConfigError, SupervisorError

__all__ = [
    "SECRET_KEY",
    "SYSTEM_CAPABILITIES",
    "ConventionSettings",
    "convention_settings",
    "read_secret",
    "system_options",
]

SECRET_KEY = "supervisor.convention.secret_file"
SYSTEM_CAPABILITIES = {"AllowRemoteActorSources": "no", "servo-actors.role": "leader"}
"""Thespian capabilities of a leader system: no actor code is loaded from peers."""


@dataclass(frozen=True)
class ConventionSettings:
    """What the supervisor needs to place connectors (plain data, sent to it in ``Start``)."""

    leader: str
    """The leader's ``HOST:PORT`` (what agents join), for messages and logs."""
    interval: float = 1.0
    timeout: float = 5.0
    grace: float = DEFAULT_GRACE
    placements: tuple[tuple[str, Requirement], ...] = ()
    """``(connector, requirement)`` of every placed connector."""

    def wants(self) -> dict[str, Requirement]:
        return dict(self.placements)


def convention_settings(config: ServoConfig) -> ConventionSettings | None:
    """The supervisor's convention settings, or None in local mode."""
    convention = config.supervisor.convention
    if convention is None:
        return None
    placements = tuple(
        (spec.name, Requirement(spec.placement.capability, spec.placement.value))
        for spec in config.connectors
        if spec.placement is not None
    )
    return ConventionSettings(
        leader=convention.listen,
        interval=convention.heartbeat.interval,
        timeout=convention.heartbeat.timeout,
        grace=convention.placement_grace,
        placements=placements,
    )


def read_secret(config: ServoConfig) -> bytes:
    """The shared key; ConfigError naming ``supervisor.convention.secret_file`` (never its content)."""
    convention = config.supervisor.convention
    assert convention is not None
    try:
        return message_auth.key_from_file(convention.secret_file)
    except SupervisorError as exc:
        raise ConfigError(str(exc), source=config.source, key=SECRET_KEY) from None


def system_options(config: ServoConfig) -> dict[str, Any]:
    """Keyword arguments of ``ActorSystemHandle`` for this servo: none in local mode; the address,
    capabilities and shared key of a leader otherwise (ConfigError if the secret file is unusable)."""
    convention = config.supervisor.convention
    if convention is None:
        return {}
    return {
        "listen": parse_endpoint(convention.listen),
        "capabilities": dict(SYSTEM_CAPABILITIES),
        "key": read_secret(config),
    }
