"""Connectors as supervised actors: each in its own process, killed and respawned fresh on
cancel, deadline or crash (architecture.md). ``ServoRuntime`` is the whole public surface the
runner and the CLI need; the rest is the machinery behind it.
"""

from servo_actors.actors.results import ConnectorOutcome, OperationResult
from servo_actors.actors.runtime import CancelRequest, Operation, ServoRuntime

__all__ = ["CancelRequest", "ConnectorOutcome", "Operation", "OperationResult", "ServoRuntime"]
