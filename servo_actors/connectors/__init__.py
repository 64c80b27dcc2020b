"""Connectors: plain classes that describe, measure and adjust. See ``Connector``."""

from servo_actors.connectors.base import Connector, ConnectorFailure, Control, ProgressFn

__all__ = ["Connector", "ConnectorFailure", "Control", "ProgressFn"]
