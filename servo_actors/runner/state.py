"""What one runner holds (its config, runtime, optimizer client and identity guard), shared by the
runner and its collaborators (``Recovery``, ``Operations``, ``Reload``), each of which holds it.

A plain object with its own constructor: the collaborators read and replace its fields (a reload
replaces the runtime, the client and the config), so each always sees the current ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servo_actors.actors import ServoRuntime
from servo_actors.config import ServoConfig
from servo_actors.identity import IdentityGuard
from servo_actors.observability import events
from servo_actors.protocol.client import OptimizerClient
from servo_actors.runner.app_restarts import AppRestarts
from servo_actors.signals import SignalWatcher

__all__ = ["Observer", "RunnerState"]

Observer = Callable[[str, dict[str, Any]], None]
"""``observer(what, detail)``: told of each command and result, for ``demo`` and tests."""


class RunnerState:
    """One runner's state, set up from ``config`` (see ``Runner``)."""

    def __init__(
        self,
        config: ServoConfig,
        *,
        config_path: str | None = None,
        observer: Observer | None = None,
        signals: SignalWatcher | None = None,
        root: AppRestarts | None = None,
    ) -> None:
        from servo_actors.config.loading import require_optimizer

        require_optimizer(config)
        self.config = config
        self.config_path = config_path
        self.signals = signals or SignalWatcher()
        self.root = root
        """With a root (a servo of several applications: ``AppRestarts``, over the shared actor
        system, whose rules decide this application's microreboots): this runner is one
        application's loop on a thread of its own, with a ``SignalWatcher.child`` of its own as
        ``signals``. Its connectors join the root's actor system; the signals, SIGHUP and the
        metrics endpoint are the caller's, on the main thread."""
        self.observer = observer
        self.stop_reason: str | None = None
        self.runtime: ServoRuntime | None = None
        self.client: OptimizerClient | None = None
        self.identity: IdentityGuard | None = None
        self.described_metrics: dict[str, Any] | None = None
        """The metrics of the last DESCRIBE (an ADJUSTMENT's ``state.measurement``); None: ask."""

    def stop_name(self) -> str:
        return self.stop_reason or self.signals.stop_signal or "shutdown"

    def new_client(self, config: ServoConfig) -> OptimizerClient:
        assert config.optimizer is not None
        # Two servos of one identity livelock: the guard notices, says so and slows the polls.
        self.identity = IdentityGuard.for_config(config, previous=self.identity)
        return OptimizerClient(
            config.optimizer,
            config.settings,
            servo_uid=config.servo_uid,
            stop=self.signals.stop,
            watcher=events.AnswerRecorder(self.identity),  # the guard, and the servo's metrics
        )

    def notify(self, what: str, detail: dict[str, Any]) -> None:
        if self.observer is not None:
            self.observer(what, detail)
