"""What a demo optimizes: its options, the optimizer's plan and the servo's configuration.

``DemoSetup`` pairs a plan with the servo configuration for a given optimizer URL;
``synthetic_setup`` is the default one (the synthetic application, ``demo_plan`` and
``demo_config``), scripts/kube-demo builds another. Apart from the run so a caller can describe
its own demo without the loop that runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servo_actors.config import ServoConfig

__all__ = [
    "DEMO_APP",
    "PROGRESS_INTERVAL",
    "TIME_SCALE",
    "DemoOptions",
    "DemoSetup",
    "demo_config",
    "demo_plan",
    "synthetic_setup",
]

DEMO_APP = "demo.local/web"
TIME_SCALE = 0.05
"""The synthetic application runs this much faster than real time (a 30 s measure takes 1.5 s)."""
PROGRESS_INTERVAL = "100ms"
"""The demo servo's progress posts: an Abort lands this soon after it is pressed."""


@dataclass(frozen=True)
class DemoOptions:
    steps: int = 15
    seed: int = 0
    abort_every: int = 0
    measure_seconds: float = 30.0
    time_scale: float = TIME_SCALE


def demo_plan(options: DemoOptions) -> dict[str, Any]:
    return {
        "app": DEMO_APP,
        "steps": options.steps,
        "seed": options.seed,
        "measure": {"duration": options.measure_seconds, "warmup": 0},
        "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250", "error_rate <= 0.01"]},
        "sleep": 600,
    }


def demo_config(optimizer_url: str, options: DemoOptions) -> ServoConfig:
    return ServoConfig.model_validate(
        {
            "optimizer": {"id": DEMO_APP, "base_url": optimizer_url},
            "settings": {
                "progress_interval": PROGRESS_INTERVAL,
                "timeouts": {"connect": "2s", "read": "10s"},
                "backoff": {"min": "100ms", "max": "1s", "max_time": "30s"},
            },
            "connectors": [
                {
                    "name": "app",
                    "type": "synthetic",
                    "config": {
                        "seed": options.seed,
                        "time_scale": options.time_scale,
                        "rollout_seconds": "5s",
                    },
                }
            ],
        }
    )


@dataclass(frozen=True)
class DemoSetup:
    """What a demo optimizes: the optimizer's plan, and the servo's configuration given the
    optimizer's URL (its ``optimizer.id`` must be the plan's ``app``)."""

    plan: dict[str, Any]
    config: Callable[[str], ServoConfig]


def synthetic_setup(options: DemoOptions) -> DemoSetup:
    """The default demo: the synthetic application (``demo_plan`` and ``demo_config``)."""
    return DemoSetup(demo_plan(options), lambda url: demo_config(url, options))
