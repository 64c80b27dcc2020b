"""Tests of the kubernetes connector. ``k8s_objects`` (plain API objects for the pure tests) is
importable from here; the emulated cluster is ``kube_cluster`` in tests/support."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
