"""Tests of the kubernetes connector.

- ``k8s_objects`` (plain API objects for the pure tests) is importable from here.
- ``cluster``: an emulated cluster (tests/support/kube_cluster.py) with Deployment ``web`` rolled
  out and the controllers running; ``make_connector(**config)`` a connector pointed at it.
- ``servo``, ``optimizer``, ``kit``: the end-to-end fixtures of tests/runner (a real
  ``servo-actors run`` process against the embedded optimizer), shared rather than copied.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from k8s_objects import WEB_CONTAINER, connector_config  # noqa: E402
from kube_cluster import FailureMode, KubeCluster  # noqa: E402  (tests/support, on the path from tests/conftest.py)

from servo_actors.connectors.kubernetes import KubernetesConnector  # noqa: E402


def _load_runner_fixtures() -> Any:
    spec = importlib.util.spec_from_file_location(
        "runner_fixtures_for_kubernetes", HERE.parent / "runner" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


_runner = _load_runner_fixtures()
servo = _runner.servo
optimizer = _runner.optimizer
kit = _runner.kit

ROLLOUT_SECONDS = 0.2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[KubeCluster]:
    emulated = KubeCluster.start(tmp_path / "cluster")
    try:
        emulated.add_deployment("web", containers=[WEB_CONTAINER], replicas=2)
        emulated.controller(FailureMode.HEALTHY, rollout_seconds=ROLLOUT_SECONDS)
        yield emulated
        assert not emulated.controller_errors, emulated.controller_errors
    finally:
        emulated.stop()


@pytest.fixture
def make_connector(cluster: KubeCluster) -> Callable[..., KubernetesConnector]:
    def make(**changes: Any) -> KubernetesConnector:
        return KubernetesConnector("k8s", connector_config(cluster, **changes))

    return make


class ProgressLog:
    """A ``progress`` callable that keeps every report."""

    def __init__(self) -> None:
        self.reports: list[tuple[float, str]] = []

    def __call__(self, percent: float, message: str = "") -> None:
        self.reports.append((percent, message))


@pytest.fixture
def progress() -> ProgressLog:
    return ProgressLog()
