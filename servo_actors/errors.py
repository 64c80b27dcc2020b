"""One error hierarchy. Each message names what is at fault: a file and key, a URL, a connector.

The CLI turns a ``ServoError`` into a one-line message and an exit code; a traceback is never
the user interface. Every exception the project defines belongs to this tree::

    ServoError
    ├── ConfigError                 the configuration (file, key, what is wrong); exit 2
    ├── UsageError                  the command line; exit 2
    ├── ProtocolError               a message on the wire of the wrong shape (names the field)
    ├── OptimizerError              the optimizer unreachable or refusing (names the URL)
    ├── SupervisorError             the actor system lost or not answering
    ├── StopRequested               signals.py: a stop signal arrived mid-command; exit 128 + N
    └── ConnectorError              a connector failed in a way the servo reports
        ├── ConnectorFailure        connectors/base.py: what connector authors raise (public API)
        ├── InvalidResult           actors/host/connector_calls.py: a result of the wrong shape
        ├── NotPlainData            actors/transport/plain_data.py: a result that is not plain data
        ├── ResultTooLarge          ... a result over the byte limit
        ├── UnprintableError        connectors/chaos.py: a drill (its text cannot be printed)
        ├── KubeError               connectors/kubernetes/client.py: the API server failed a call
        │   └── KubeUnreachable, KubeTimeout, KubeApiError
        ├── KubeConfigError         connectors/kubernetes/kubeconfig.py
        ├── SettingError            connectors/kubernetes/settings.py: a setting the connector refuses
        ├── ClusterStateError       ... the cluster holds what the connector cannot describe
        ├── ConflictError           connectors/kubernetes/adjustment.py: changed under the connector
        ├── RolloutFailed           connectors/kubernetes/rollout.py
        └── TuningFailed            connectors/kubernetes/tuning_adjust.py

``ConnectorFailure`` lives with the connector API (``servo_actors.connectors``), where connector
authors import it; the others live beside the code that raises them. Some also derive from the
built-in exception their callers catch (``ValueError``), never from a second project class.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConnectorError",
    "OptimizerError",
    "ProtocolError",
    "ServoError",
    "SupervisorError",
    "UsageError",
]


class ServoError(Exception):
    """Base of every error servo-actors raises on purpose."""

    exit_code = 1


class ConfigError(ServoError):
    """The configuration is wrong: ``source: key.path: what is wrong``."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        self.detail = message
        prefix = "".join(f"{part}: " for part in (source, key) if part)
        super().__init__(f"{prefix}{message}")


class UsageError(ServoError):
    """Bad command-line usage (an unknown setting, a value out of range...)."""

    exit_code = 2


class ProtocolError(ServoError):
    """A message on the wire does not have the shape docs/protocol.md gives it. Names the field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class OptimizerError(ServoError):
    """The optimizer could not be reached or refused us. Names the URL, never the token."""

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None) -> None:
        self.url = url
        self.status = status
        super().__init__(message)


class ConnectorError(ServoError):
    """A connector failed in a way the servo reports (not a crash of the servo)."""


class SupervisorError(ServoError):
    """The supervisor could not be run: its actor system was lost (SupervisorLost), it did not
    answer, or microreboots exceeded their intensity. (A connector past its restart intensity is
    not one: it is marked failed and the others go on.)"""
