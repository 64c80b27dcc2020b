"""The kubernetes connector against the real local control plane (marker ``kube``).

The connector is driven as the emulator tests in tests/connectors_kubernetes drive it (its public
``describe`` / ``adjust`` / ``measure`` / ``check``), but every rule it meets here is the real one:
the Deployment, ReplicaSet and HPA controllers, the scheduler, the API server's validation and
merge, and kwok's pod stages (kube/stages/simulate-failures.yaml) for failures on demand.

- ``app``: an ``App`` in a fresh namespace (``kube_namespace``): ``app.create(...)`` applies
  Deployment ``web`` and waits for kubectl's rollout rule; ``app.connector(**config)`` a connector
  pointed at it; reads of the real objects (``deployment``, ``replicasets``, ``hpa``, ``pods``).
- ``progress``: a ``ProgressLog`` keeping every progress report.
- ``web_manifest`` / ``CONNECTOR_WEB``: the Deployment and its connector config, for modules that
  set up their own namespace (``App(cluster, namespace)``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from kube_local import LocalCluster  # noqa: E402  (tests/support, on the path from tests/conftest.py)
from real_app import App, ProgressLog  # noqa: E402


@pytest.fixture
def app(kube_cluster: LocalCluster, kube_namespace: str) -> App:
    return App(kube_cluster, kube_namespace)


@pytest.fixture
def progress() -> ProgressLog:
    return ProgressLog()


@pytest.fixture(scope="module")
def module_namespace(request: pytest.FixtureRequest, kube_cluster: LocalCluster) -> Iterator[str]:
    """One namespace for a whole module (for set-ups that are slow to reach, such as the first
    metrics of an HPA); deleted after the module."""
    name = kube_cluster.new_namespace(Path(str(request.node.path)).stem)
    yield name
    kube_cluster.delete_namespace(name)
