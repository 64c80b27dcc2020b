"""``CommandConnector``: the ``command`` connector's operations, each running the configured
command (see the package docstring for the contract)."""

from __future__ import annotations

import json
import os
from typing import Any

from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn
from servo_actors.connectors.command.config import CommandConfig
from servo_actors.connectors.command.environment import control_env, settings_env
from servo_actors.connectors.command.output import (
    parse_adjusted,
    parse_description,
    parse_json,
    parse_measurement,
)
from servo_actors.connectors.command.process import CommandSpec, run_command, seconds_text
from servo_actors.durations import format_duration

__all__ = ["CommandConnector", "WITHHELD_ENV"]

WITHHELD_ENV = ("OPSANI_TOKEN",)
"""The servo's own secrets, not passed on to commands."""


class CommandConnector(Connector):
    """Runs the configured shell commands; see the package docstring for the contract."""

    config_model = CommandConfig
    config: CommandConfig

    def __init__(self, name: str, config: Any = None) -> None:
        super().__init__(name, config)
        self._description: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        if self.config.describe is None:
            description: dict[str, Any] = {"components": {}, "metrics": {}}
        else:
            stdout = run_command(self._spec("describe", self.config.describe), self.config.timeout, {})
            description = parse_description(parse_json("describe", stdout))
        self._description = description
        return description

    def measure(self, metrics: list[str], control: Control, progress: ProgressFn) -> dict[str, Any]:
        if self.config.measure is None:
            return {"metrics": {}, "annotations": {}}
        env = {
            "SERVO_METRICS": ",".join(metrics),
            "SERVO_DURATION": seconds_text(control.duration),
            "SERVO_WARMUP": seconds_text(control.warmup),
            "SERVO_DELAY": seconds_text(control.delay),
            **control_env(control),
        }
        expected = control.warmup + control.duration + control.delay
        stdout = self._run_reporting("measure", self.config.measure, expected, env, progress)
        return parse_measurement(parse_json("measure", stdout), self._units(), metrics)

    def adjust(self, components: dict[str, Any], control: Control, progress: ProgressFn) -> dict[str, Any]:
        if not components:
            return {}
        if self.config.adjust is None:
            raise ConnectorFailure(
                f"{self.name}: no adjust command configured", status="rejected", reason="not-adjustable"
            )
        env = {**settings_env(components), "SERVO_ADJUST": json.dumps(components), **control_env(control)}
        stdout = self._run_reporting("adjust", self.config.adjust, control.settlement, env, progress)
        if not stdout.strip():
            return self._echo(components)
        return parse_adjusted(parse_json("adjust", stdout))

    def check(self) -> list[dict[str, Any]]:
        results = []
        for check_name, entry in self.config.check.items():
            command = entry if isinstance(entry, str) else entry.run
            try:
                run_command(self._spec("check", command), self.config.timeout, {})
            except ConnectorFailure as failure:
                result = {"name": check_name, "success": False, "message": failure.message}
            else:
                result = {"name": check_name, "success": True, "message": "exited with status 0"}
            if not isinstance(entry, str):
                result.update(entry.model_dump(exclude={"run"}, exclude_none=True))
            results.append(result)
        return results

    def _run_reporting(
        self, operation: str, command: str, expected: float, env: dict[str, str], progress: ProgressFn
    ) -> str:
        """Run with ``timeout + expected`` seconds, reporting progress against ``expected``."""

        def tick(elapsed: float) -> None:
            # Capped below 100: the command, not the clock, says when it is done.
            percent = min(99, round(100 * elapsed / expected)) if expected > 0 else 0
            progress(percent, f"{operation} command running for {format_duration(elapsed)}")

        progress(0, f"{operation} command started")
        stdout = run_command(
            self._spec(operation, command),
            self.config.timeout + expected,
            env,
            on_tick=tick,
            tick_interval=self.config.progress_interval,
        )
        progress(100, f"{operation} command finished")
        return stdout

    def _spec(self, operation: str, command: str) -> CommandSpec:
        env = {key: value for key, value in os.environ.items() if key not in WITHHELD_ENV}
        env.update(self.config.env)
        env.update({"SERVO_OPERATION": operation, "SERVO_CONNECTOR": self.name})
        return CommandSpec(operation, command, self.config.shell, self.config.cwd, env)

    def _units(self) -> dict[str, str | None]:
        if self._description is None and self.config.describe is not None:
            self.describe()
        metrics = (self._description or {}).get("metrics", {})
        return {name: (spec or {}).get("unit") for name, spec in metrics.items()}

    def _echo(self, components: dict[str, Any]) -> dict[str, Any]:
        """The requested values as in force, with bounds from the last describe when known."""
        described = (self._description or {}).get("components", {})
        echoed: dict[str, Any] = {}
        for component, body in components.items():
            known = described.get(component, {}).get("settings", {})
            settings = {}
            for setting, wanted in body["settings"].items():
                settings[setting] = {**known.get(setting, {}), "value": wanted["value"]}
            echoed[component] = {"settings": settings}
        return echoed
