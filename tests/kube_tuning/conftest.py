"""Shared parts of the tuning-pod and StatefulSet tests (real local cluster, marker ``kube``).

``kube_tuning_support`` (importable from here): manifests, a connector factory and readers.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import importlib.util  # noqa: E402
from typing import Any  # noqa: E402


def _load_runner_fixtures() -> Any:
    """The end-to-end fixtures of tests/runner (a real ``servo-actors run`` process against the
    embedded optimizer), shared rather than copied."""
    spec = importlib.util.spec_from_file_location(
        "runner_fixtures_for_kube_tuning", HERE.parent / "runner" / "conftest.py"
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
