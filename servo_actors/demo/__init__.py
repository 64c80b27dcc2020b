"""A complete local optimization: the embedded optimizer plus a servo with a synthetic application.

The optimizer runs as its own process (``servo-actors optimizer serve``) on a free loopback port,
so the servo talks to it over real HTTP exactly as it would to a remote one; the servo runs here,
its synthetic connector in a supervised actor process. Each step is printed as the optimizer
records it; at the end, the recommendation against the baseline. ``abort_every=N`` presses Abort
on every Nth MEASURE or ADJUST, to show crash-only recovery live. SIGTERM/SIGINT end it at any
moment; the exit code is then 128 + the signal.

The parts: ``run`` (``run_demo``, the main flow and its Abort presses), ``setup`` (what a demo
optimizes: ``DemoOptions``, ``DemoSetup``, the synthetic plan and config), ``optimizer_process``
(starting and stopping the optimizer's process), ``summary`` (the step lines and the closing
summary), ``app_demo`` (``AppDemo``: one application's part, its lines, Abort presses and
summary), ``errors`` (``DemoError``). ``DemoOptions.apps`` runs several applications in the one
servo, each against its own session of the one optimizer.
"""

from servo_actors.demo.app_demo import (
    ABORT_LOOK_INTERVAL,
    ABORT_WAIT,
    PRESS_JOIN_TIMEOUT,
    STATE_TIMEOUT,
)
from servo_actors.demo.errors import DemoError
from servo_actors.demo.optimizer_process import (
    OPTIMIZER_START_TIMEOUT,
    OPTIMIZER_STOP_TIMEOUT,
    STDERR_TAIL_LINES,
)
from servo_actors.demo.run import (
    STATUS_INTERVAL,
    STATUS_STOP_TIMEOUT,
    run_demo,
)
from servo_actors.demo.setup import (
    DEMO_APP,
    MAX_APPS,
    PROGRESS_INTERVAL,
    TIME_SCALE,
    DemoOptions,
    DemoSetup,
    demo_config,
    demo_plan,
    synthetic_setup,
)
from servo_actors.demo.summary import summary_lines

__all__ = [
    "ABORT_LOOK_INTERVAL",
    "ABORT_WAIT",
    "DEMO_APP",
    "DemoError",
    "DemoOptions",
    "DemoSetup",
    "MAX_APPS",
    "OPTIMIZER_START_TIMEOUT",
    "OPTIMIZER_STOP_TIMEOUT",
    "PRESS_JOIN_TIMEOUT",
    "PROGRESS_INTERVAL",
    "STATE_TIMEOUT",
    "STATUS_INTERVAL",
    "STATUS_STOP_TIMEOUT",
    "STDERR_TAIL_LINES",
    "TIME_SCALE",
    "demo_config",
    "demo_plan",
    "run_demo",
    "summary_lines",
    "synthetic_setup",
]
