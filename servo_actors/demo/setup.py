"""What a demo optimizes: its options, the optimizer's plan and the servo's configuration.

``DemoSetup`` pairs a plan with the servo configuration for a given optimizer URL;
``synthetic_setup`` is the default one (the synthetic application, ``demo_plan`` and
``demo_config``), scripts/kube-demo builds another. Apart from the run so a caller can describe
its own demo without the loop that runs it.

A demo of several applications (``DemoOptions.apps``) optimizes the synthetic application several
times over, each independently: ``demo_apps`` names them (``demo.local/web-1``...) and gives each
its own seed (``seed``, ``seed + 1``...), so their searches differ; ``servo_yaml`` is the servo's
multi-document configuration of them all, one document per application.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import yaml

from servo_actors.config import ServoConfig
from servo_actors.demo.errors import DemoError

__all__ = [
    "DEMO_APP",
    "MAX_APPS",
    "PROGRESS_INTERVAL",
    "TIME_SCALE",
    "DemoOptions",
    "DemoSetup",
    "demo_apps",
    "demo_config",
    "demo_document",
    "demo_plan",
    "servo_yaml",
    "synthetic_setup",
]

DEMO_APP = "demo.local/web"
TIME_SCALE = 0.05
"""The synthetic application runs this much faster than real time (a 30 s measure takes 1.5 s)."""
PROGRESS_INTERVAL = "100ms"
"""The demo servo's progress posts: an Abort lands this soon after it is pressed."""
MAX_APPS = 8
"""Most applications one demo runs: each has its connector processes and its own search, and the
demo is meant to be watched on a laptop."""


@dataclass(frozen=True)
class DemoOptions:
    steps: int = 15
    seed: int = 0
    abort_every: int = 0
    measure_seconds: float = 30.0
    time_scale: float = TIME_SCALE
    apps: int = 1
    """Applications the one servo optimizes, each against its own session of the optimizer."""

    def __post_init__(self) -> None:
        if isinstance(self.apps, bool) or not isinstance(self.apps, int) or not 1 <= self.apps <= MAX_APPS:
            raise DemoError(f"apps: a demo runs 1 to {MAX_APPS} applications, not {self.apps!r}")


def demo_apps(options: DemoOptions) -> list[tuple[str, DemoOptions]]:
    """Each application of the demo (ORG/APP) with its own options: one, ``DEMO_APP``, with
    ``options`` as they are; several, ``DEMO_APP-1``... each seeded one more than the one before."""
    if options.apps == 1:
        return [(DEMO_APP, options)]
    return [
        (f"{DEMO_APP}-{n}", replace(options, apps=1, seed=options.seed + n - 1))
        for n in range(1, options.apps + 1)
    ]


def demo_plan(options: DemoOptions, app: str = DEMO_APP) -> dict[str, Any]:
    return {
        "app": app,
        "steps": options.steps,
        "seed": options.seed,
        "measure": {"duration": options.measure_seconds, "warmup": 0},
        "objective": {"minimize": "cost", "constraints": ["p99_latency <= 250", "error_rate <= 0.01"]},
        "sleep": 600,
    }


def demo_document(optimizer_url: str, options: DemoOptions, app: str = DEMO_APP) -> dict[str, Any]:
    """The servo's configuration of one demo application, as its YAML document holds it."""
    return {
        "optimizer": {"id": app, "base_url": optimizer_url},
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


def demo_config(optimizer_url: str, options: DemoOptions, app: str = DEMO_APP) -> ServoConfig:
    return ServoConfig.model_validate(demo_document(optimizer_url, options, app))


def servo_yaml(optimizer_url: str, options: DemoOptions) -> str:
    """The servo.yaml of every application of the demo: one YAML document each (``demo_apps``)."""
    return yaml.safe_dump_all(
        [demo_document(optimizer_url, own, app) for app, own in demo_apps(options)], sort_keys=False
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
