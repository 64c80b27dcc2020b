"""Connectors as supervised actors: each in its own process, killed and respawned fresh on
cancel, deadline or crash (docs/architecture.md). ``ServoRuntime`` is the whole public surface the
runner and the CLI need; the rest is the machinery behind it, in four subpackages:

- ``rules``: the supervision rules, pure (state machines on events and a clock passed in), and
  the plain data they exchange;
- ``linux``: process control (process trees, cgroups, kills, the lifeline, the watchdog, /proc);
- ``transport``: the Thespian transport (the actor system, message authentication, patches);
- ``convention``: hosts of a convention (connectors placed on other machines).

On top of them: ``runtime`` (the servo's side), ``operation_path`` (the one way an operation is
performed), ``supervisor`` and ``host`` (the actors) and ``declared_times``.
"""

from __future__ import annotations

from servo_actors.actors.operation import CancelRequest, Operation
from servo_actors.actors.rules.results import ConnectorOutcome, OperationResult
from servo_actors.actors.runtime import ServoRuntime

__all__ = ["CancelRequest", "ConnectorOutcome", "Operation", "OperationResult", "ServoRuntime"]
