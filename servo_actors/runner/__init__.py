"""The control loop: HELLO, then WHATS_NEXT and the command it brings, until a signal ends the run.

::

    runner = Runner(config, config_path="servo.yaml")
    exit_code = runner.run()      # blocks until SIGTERM/SIGINT (0) or a terminal failure (1)

The loop itself is small; the pieces it leans on live elsewhere: ``OptimizerClient`` (HTTP and
retries), ``ServoRuntime`` (the supervised connectors) and ``OperationPath`` (the one way an
operation is performed and cancelled on them), ``ProgressSchedule`` (when to post
progress, what percentage), ``ProgressLane`` (progress posts off the loop, one in flight, every
reply read), ``SignalWatcher`` (SIGTERM/SIGINT/SIGHUP) and ``params`` (an operation's result
as a wire event).

Every request to the optimizer runs on a worker while the loop ticks the watchdog every
``TICK_INTERVAL`` (``runtime.poll``): a supervisor that dies while the optimizer is slow to answer
WHATS_NEXT (or HELLO) is noticed and microrebooted within the watchdog's bound, not once the request
returns. Progress replies are never dropped: an operation's result goes out only after its open
progress post is answered, so a ``cancel`` answered to that post wins and the command gets exactly
one result (``cancelled``).

Cancellation is crash-only: whatever the optimizer answers that ends a running operation
(``cancel``, ``unexpected-event``, ``invalid``) makes the supervisor kill every connector and start
fresh ones; the loop never waits on a connector to tidy up.

Recovery of the servo's own processes is crash-only too: when the runtime finds its actor system
lost (the supervisor, Thespian's admin or logger dead, stopped or not answering), it kills all of
it; the command in flight is answered ``failed`` (reason ``supervisor-lost``) and the loop starts a
fresh actor system (a microreboot) before it polls again, also in the middle of a SLEEP. More than
``supervisor.microreboots.max`` of them within ``period`` end the run (GOODBYE ``failure``, exit 1).
With several applications, each loop's microreboots (at once, after a backoff, or never again) are
the tree's rules' decisions (``app_restarts``).

The package's modules, each on the ones after it: ``apps`` (``AppsRunner``: a servo of several
applications, a ``Runner`` each), ``loop`` (``Runner``: the serve loop, the dispatch of a command,
a SLEEP, GOODBYE; it holds the collaborators below), ``operations`` (``Operations``: one command
through the operation path, its progress and result posts), ``reload`` (``Reload``: SIGHUP),
``recovery`` (``Recovery``: microreboots, requests awaited while the watchdog ticks), ``state``
(``RunnerState``: what the runner and its collaborators share), ``params`` (commands and results
as the wire has them) and ``app_restarts`` (``AppRestarts``: the tree's rules carried out for the
applications of a servo of several).
"""

from __future__ import annotations

from servo_actors.runner.loop import SLEEP_SLICE, Runner
from servo_actors.runner.operations import (
    REPLY_CHECK_FIRST,
    Operations,
)
from servo_actors.runner.params import (
    result_param,
    telemetry,
)
from servo_actors.runner.recovery import TICK_INTERVAL, Recovery
from servo_actors.runner.reload import Reload
from servo_actors.runner.state import Observer, RunnerState

__all__ = [
    "Observer",
    "Operations",
    "REPLY_CHECK_FIRST",
    "Recovery",
    "Reload",
    "Runner",
    "RunnerState",
    "SLEEP_SLICE",
    "TICK_INTERVAL",
    "result_param",
    "telemetry",
]
