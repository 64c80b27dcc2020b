"""Shared parts of the tuning-pod and StatefulSet tests (real local cluster, marker ``kube``).

``kube_tuning_support`` (importable from here): manifests, a connector factory and readers.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
