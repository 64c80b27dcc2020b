"""SIGHUP: the configuration file read again, its connectors started beside the running ones.

Apart from the loop: a reload is a whole procedure of its own (a second actor system, kept or
dropped), and the loop only calls it between commands and during a SLEEP.
"""

from __future__ import annotations

import logging

from servo_actors.actors import ServoRuntime
from servo_actors.errors import ConfigError, SupervisorError
from servo_actors.observability import events
from servo_actors.runner.recovery import Recovery
from servo_actors.runner.state import RunnerState
from servo_actors.signals import StopRequested

__all__ = ["Reload"]

log = logging.getLogger(__name__)


class Reload:
    """The runner's reload of its configuration file (SIGHUP)."""

    def __init__(self, state: RunnerState, recovery: Recovery) -> None:
        self._state = state
        self._recovery = recovery

    def reload(self) -> None:
        """SIGHUP: load the file again; a good one replaces the connectors, a broken one is refused.

        The new connectors start in a second actor system beside the running one, which is stopped
        only once they all answer: a file that is valid but whose connectors cannot start (restart
        intensity exceeded, or not ready within their startup budget) leaves the running ones
        serving, untouched. (Stopping the old set first and restoring it on failure would leave a
        window with no connectors, and a second start that may fail too.) The cost: for a moment
        both sets run, so a connector that needs an exclusive resource at startup (a fixed port)
        cannot be reloaded this way; that reload fails and says why.
        """
        state = self._state
        assert state.runtime is not None
        from servo_actors.config.loading import load_apps, require_optimizer
        from servo_actors.connectors.registry import connector_settings_problems

        source = state.config_path or "servo.yaml"
        try:
            apps = load_apps(state.config_path, connector_check=connector_settings_problems)
            # A file of several applications: this servo's own (by its ORG/APP) is the one applied.
            new = apps.by_app(state.config.app or "") if apps.several else apps.first
            require_optimizer(new)
            runtime = ServoRuntime(new)
        except ConfigError as exc:
            log.error("configuration reload refused, keeping the running one: %s", exc)
            return
        convention = state.config.supervisor.convention
        if convention is not None:
            # The running actor system holds the leader's address, which agents join: a second one
            # cannot start beside it (docs/convention.md).
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
            started = runtime.start(stop=state.signals.stop)
        except SupervisorError as exc:
            log.error("configuration reload from %s failed, keeping the running connectors: %s", source, exc)
            return
        if not started:
            raise StopRequested(state.stop_name())
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
        old, state.runtime = state.runtime, runtime
        old.stop()
        events.reloaded(spec.name for spec in new.connectors)
        state.described_metrics = None
        log.info(
            "configuration reloaded from %s: the new connectors answer, the old ones are stopped", source
        )
        if new.optimizer != state.config.optimizer or new.settings != state.config.settings:
            assert state.client is not None
            state.client.close()
            state.client = state.new_client(new)
        if new.supervisor.microreboots != state.config.supervisor.microreboots:
            self._recovery.reset_intensity(new)
        state.config = new
