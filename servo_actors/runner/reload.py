"""SIGHUP: the configuration file read again, its connectors started beside the running ones.

Apart from the loop: a reload is a whole procedure of its own (a second actor system, kept or
dropped), and the loop only calls it between commands and during a SLEEP.
"""

from __future__ import annotations

import logging

from servo_actors.actors import ServoRuntime
from servo_actors.actors.rules.restart_policy import RestartIntensity
from servo_actors.errors import ConfigError, SupervisorError
from servo_actors.observability import events
from servo_actors.runner.state import RunnerState
from servo_actors.signals import StopRequested

__all__ = ["RunnerReload"]

log = logging.getLogger(__name__)


class RunnerReload(RunnerState):
    """The runner's reload of its configuration file (SIGHUP)."""

    def _reload(self) -> None:
        """SIGHUP: load the file again; a good one replaces the connectors, a broken one is refused.

        The new connectors start in a second actor system beside the running one, which is stopped
        only once they all answer: a file that is valid but whose connectors cannot start (restart
        intensity exceeded, or not ready within their startup budget) leaves the running ones
        serving, untouched. (Stopping the old set first and restoring it on failure would leave a
        window with no connectors, and a second start that may fail too.) The cost: for a moment
        both sets run, so a connector that needs an exclusive resource at startup (a fixed port)
        cannot be reloaded this way; that reload fails and says why.
        """
        assert self.runtime is not None
        from servo_actors.config.loading import require_optimizer
        from servo_actors.connectors.registry import load_apps

        source = self.config_path or "servo.yaml"
        try:
            apps = load_apps(self.config_path)
            # A file of several applications: this servo's own (by its ORG/APP) is the one applied.
            new = apps.by_app(self.config.app or "") if apps.several else apps.first
            require_optimizer(new)
            runtime = ServoRuntime(new)
        except ConfigError as exc:
            log.error("configuration reload refused, keeping the running one: %s", exc)
            return
        convention = self.config.supervisor.convention
        if convention is not None:
            # The running actor system holds the leader's address, which agents join: a second one
            # cannot start beside it (README, "Connectors on other hosts").
            log.error(
                "configuration reload from %s refused, keeping the running connectors: a servo with "
                "supervisor.convention holds %s and cannot start new connectors beside it; restart "
                "the servo to apply the file (agents join the new one by themselves)",
                source,
                convention.listen,
            )
            return
        log.info("configuration reload from %s: starting the new connectors beside the running ones", source)
        try:
            started = runtime.start(stop=self.signals.stop)
        except SupervisorError as exc:
            log.error("configuration reload from %s failed, keeping the running connectors: %s", source, exc)
            return
        if not started:
            raise StopRequested(self._stop_name())
        not_up = runtime.not_up_why
        if not_up:
            listed = "; ".join(f"{name} ({why})" for name, why in sorted(not_up.items()))
            log.error(
                "configuration reload from %s failed, keeping the running connectors: not up: %s",
                source,
                listed,
            )
            runtime.stop()
            return
        old, self.runtime = self.runtime, runtime
        old.stop()
        events.reloaded(spec.name for spec in new.connectors)
        self._described_metrics = None
        log.info(
            "configuration reloaded from %s: the new connectors answer, the old ones are stopped", source
        )
        if new.optimizer != self.config.optimizer or new.settings != self.config.settings:
            assert self.client is not None
            self.client.close()
            self.client = self._new_client(new)
        if new.supervisor.microreboots != self.config.supervisor.microreboots:
            reboots = new.supervisor.microreboots
            self._microreboots = RestartIntensity(reboots.max, reboots.period)
        self.config = new
