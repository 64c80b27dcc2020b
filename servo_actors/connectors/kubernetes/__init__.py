"""The ``kubernetes`` connector (see ``connector.py`` and the README, "The kubernetes connector")."""

from servo_actors.connectors.kubernetes.connector import KubernetesConnector

__all__ = ["KubernetesConnector"]
