"""``command``: describe, measure, adjust and check an application with your own shell commands.

Configuration (every command is optional)::

    - name: app
      type: command
      config:
        timeout: 30s            # per command; see "Timeouts" below
        shell: /bin/sh          # commands run as [shell, "-c", command]
        cwd: /srv/app           # working directory (default: the servo's)
        env: {APP_URL: http://127.0.0.1:8080}
        describe: ./describe.sh
        measure: ./measure.sh
        adjust: ./adjust.sh
        check:                  # a single command, or name: command (or name: mapping)
          app-up: curl -fsS http://127.0.0.1:8080/health
          disk:
            run: test -w /srv/app
            remedy: sudo chown servo /srv/app   # shown by `check` when it fails, never run
            severity: critical  # critical | common (default) | warning
            tags: [storage]     # for `check --tag`; `id` too, for `check --id`

What each command receives (environment; values are never pasted into the command string):

- always: ``SERVO_OPERATION`` (describe|measure|adjust|check), ``SERVO_CONNECTOR`` (its name),
  and the ``env`` of the config on top of the servo's environment (``OPSANI_TOKEN`` withheld);
- measure: ``SERVO_METRICS`` (requested names, comma-separated, may be empty),
  ``SERVO_DURATION``, ``SERVO_WARMUP``, ``SERVO_DELAY`` (seconds);
- measure and adjust: ``SERVO_CONTROL_DURATION``, ``SERVO_CONTROL_WARMUP``,
  ``SERVO_CONTROL_DELAY``, ``SERVO_CONTROL_SETTLEMENT`` (seconds), ``SERVO_CONTROL_USERDATA``
  (JSON);
- adjust: ``SERVO_<COMPONENT>_<SETTING>`` for each requested value (names uppercased, every
  other character than A-Z and 0-9 turned into ``_``; strings as they are, numbers and booleans
  as JSON: ``1.5``, ``true``), and ``SERVO_ADJUST`` holding the whole request as JSON
  (``{"web": {"settings": {"cpu": {"value": 1.5}}}}``).

What each command prints on stdout (log to stderr; stderr is only read to explain a failure):

- describe: ``{"components": {...}, "metrics": {...}}``, the two parts exactly as docs/protocol.md's
  ``descriptor.application.components`` and ``descriptor.measurement.metrics``, e.g.
  ``{"components": {"web": {"settings": {"replicas": {"type": "range", "min": 1, "max": 4,
  "step": 1, "value": 2}}}}, "metrics": {"p99_latency": {"unit": "ms"}}}``;
- measure: ``{"metrics": {...}, "annotations": {...}}`` with docs/protocol.md's metric shapes (a
  single reading ``{"unit": "ms", "value": 12.5}`` or time series ``{"unit": "ms", "values":
  [{"id": "...", "data": [[epoch_seconds, value], ...]}]}``; a missing unit is taken from
  describe), or the simple form ``{"p99_latency": 12.5, "throughput": 300}``, which becomes
  single readings with the units from describe. Only requested metrics are returned;
- adjust: nothing (the requested values are then reported as in force), or
  ``{"components": {...}}`` holding the settings now in force, in describe's shape;
- check: nothing; the exit status is the result (0 passes). A check given as a mapping adds its
  ``remedy``, ``severity``, ``tags`` and ``id`` to the result (``connectors.check_result``).

A non-zero exit fails the operation with the exit status and the tail of stderr; output that is
not the JSON above fails it with what is wrong.

Timeouts: each command may run for ``timeout``; a measure command for ``timeout`` plus the
control's warmup + duration + delay, an adjust command for ``timeout`` plus its settlement (the
command is expected to wait those out). Every command runs in a process group of its own;
when it overruns, the whole group (its children too) is killed with SIGKILL and the operation
fails with reason ``timeout``. When the command exits, whatever it left running in its group
is killed too: to start something that outlives the command, detach it (``setsid``). On Linux
the command is also killed if the connector's process dies (a cancel kills that process).

The package's modules: ``config`` (``CommandConfig``), ``connector`` (``CommandConnector``),
``process`` (running one command), ``environment`` (the variables a command receives) and
``output`` (reading what it printed).
"""

from __future__ import annotations

from servo_actors.connectors.command.config import (
    DEFAULT_TIMEOUT,
    CommandConfig,
)
from servo_actors.connectors.command.connector import WITHHELD_ENV, CommandConnector
from servo_actors.connectors.command.environment import (
    setting_env_name,
)
from servo_actors.connectors.command.process import (
    MAX_OUTPUT_BYTES,
    REAP_TIMEOUT,
    STDERR_TAIL_CHARS,
    STDERR_TAIL_LINES,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_OUTPUT_BYTES",
    "REAP_TIMEOUT",
    "STDERR_TAIL_CHARS",
    "STDERR_TAIL_LINES",
    "WITHHELD_ENV",
    "CommandConfig",
    "CommandConnector",
    "setting_env_name",
]
