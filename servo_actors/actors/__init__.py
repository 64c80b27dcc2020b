"""Connectors as supervised actors: each in its own process, killed and respawned fresh on
cancel, deadline or crash (docs/architecture.md). ``ServoRuntime`` is the whole public surface the
runner and the CLI need; the rest is the machinery behind it, one subpackage per concern, each on
the ones after it:

- ``runtime``: the servo's side (``ServoRuntime``, its link to the actor system, the one
  operation path, the actor system several applications share);
- ``supervisor``: the Supervisor actor, its children's processes, the child specs;
- ``convention``: hosts of a convention (connectors placed on other machines);
- ``host``: the connector host, the actor that runs one connector in its own process;
- ``transport``: the Thespian transport (the actor system, message authentication, patches);
- ``linux``: process control (process trees, cgroups, kills, the lifeline, the watchdog, /proc);
- ``rules``: the supervision rules, pure (state machines on events and a clock passed in), and
  the plain data they exchange.
"""

from __future__ import annotations

from servo_actors.actors.rules.results import ConnectorOutcome, OperationResult
from servo_actors.actors.runtime.operation import CancelRequest, Operation
from servo_actors.actors.runtime.servo_runtime import ServoRuntime

__all__ = ["CancelRequest", "ConnectorOutcome", "Operation", "OperationResult", "ServoRuntime"]
