"""The ``kubernetes`` connector (see ``connector.py`` and docs/connectors/kubernetes.md)."""

from servo_actors.connectors.kubernetes.connector import KubernetesConnector

__all__ = ["KubernetesConnector"]
