"""The protocol's words, written once: events, commands, statuses and the reasons several layers share.

Every other module takes its words from here (the wire models of ``protocol``, the
metrics' label values of ``observability``, the runner, the supervisor's results, the embedded
optimizer). It imports nothing, so that any layer may import it (.importlinter: the bottom layer).
``docs/protocol.md`` defines what each word means.

>>> RESULT_EVENT[MEASURE]
'MEASUREMENT'
>>> OPERATION_EVENT["adjust"] == RESULT_EVENT[ADJUST]
True
>>> COMMAND_OF_EVENT[DESCRIPTION]
'DESCRIBE'
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ADJUST",
    "ADJUSTMENT",
    "COMMANDS",
    "COMMAND_OF_EVENT",
    "CRASH_LOOP",
    "DESCRIBE",
    "DESCRIPTION",
    "EVENTS",
    "FAILURE_STATUSES",
    "GOODBYE",
    "HELLO",
    "HOST_UNAVAILABLE",
    "MEASURE",
    "MEASUREMENT",
    "NOT_UP_REASONS",
    "OPERATIONS",
    "OPERATION_EVENT",
    "OPTIMIZER_STATUSES",
    "RESTART_REASONS",
    "RESULT_EVENT",
    "SERVO_STATUSES",
    "SLEEP",
    "START_TIMEOUT",
    "STATUS_SEVERITY",
    "SUPERVISOR_LOST",
    "WHATS_NEXT",
]

# ----- events: what the servo posts ----------------------------------------------------------------

HELLO: Final = "HELLO"
WHATS_NEXT: Final = "WHATS_NEXT"
DESCRIPTION: Final = "DESCRIPTION"
MEASUREMENT: Final = "MEASUREMENT"
ADJUSTMENT: Final = "ADJUSTMENT"
GOODBYE: Final = "GOODBYE"
EVENTS: Final = (HELLO, WHATS_NEXT, DESCRIPTION, MEASUREMENT, ADJUSTMENT, GOODBYE)

# ----- commands: what the optimizer answers a WHATS_NEXT with ----------------------------------------

DESCRIBE: Final = "DESCRIBE"
MEASURE: Final = "MEASURE"
ADJUST: Final = "ADJUST"
SLEEP: Final = "SLEEP"
COMMANDS: Final = (DESCRIBE, MEASURE, ADJUST, SLEEP)

RESULT_EVENT: Final[dict[str, str]] = {DESCRIBE: DESCRIPTION, MEASURE: MEASUREMENT, ADJUST: ADJUSTMENT}
"""The event that carries a command's result and its progress (SLEEP has none)."""
COMMAND_OF_EVENT: Final[dict[str, str]] = {event: command for command, event in RESULT_EVENT.items()}
"""The command a result event answers."""

# ----- operations: what the servo does on its connectors --------------------------------------------

OPERATIONS: Final = ("describe", "measure", "adjust", "check")
"""The operations of the connectors (``check`` has no command: the CLI's and ``run --check``'s)."""
OPERATION_EVENT: Final[dict[str, str]] = {
    "describe": DESCRIPTION,
    "measure": MEASUREMENT,
    "adjust": ADJUSTMENT,
}
"""The result event of an operation that answers a command."""

# ----- statuses ----------------------------------------------------------------------------------

SERVO_STATUSES: Final = ("ok", "failed", "rejected", "aborted", "cancelled")
"""Every status a servo's result may carry."""
FAILURE_STATUSES: Final = ("failed", "rejected", "aborted", "cancelled")
"""The statuses of a result that is not ok."""
STATUS_SEVERITY: Final = ("ok", "rejected", "aborted", "failed", "cancelled")
"""Statuses from best to worst; an aggregate of several connectors' parts takes the worst."""
OPTIMIZER_STATUSES: Final = ("ok", "invalid", "unexpected-event", "cancel")
"""Every status the optimizer's answer to a post may carry."""

# ----- reasons several layers share -----------------------------------------------------------------

START_TIMEOUT: Final = "start-timeout"
"""A connector's start passed its ``startup_timeout``."""
CRASH_LOOP: Final = "crash-loop"
"""A connector raised or exited while starting, or kept crashing."""
HOST_UNAVAILABLE: Final = "host-unavailable"
"""No host of the convention can take a connector placed on another host."""
NOT_UP_REASONS: Final = (START_TIMEOUT, CRASH_LOOP, HOST_UNAVAILABLE)
"""Reasons of the part of a connector that is not up (docs/recovery.md, "A connector that cannot start")."""
SUPERVISOR_LOST: Final = "supervisor-lost"
"""The reason of an operation whose actor system was lost under it (and of the microreboot's log)."""
RESTART_REASONS: Final = ("cancel", "deadline", "crash", "start-timeout", "retry", "reload", "microreboot")
"""Why a connector was restarted: the label values of ``servo_connector_restarts_total``."""
