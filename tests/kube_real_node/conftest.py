"""The local cluster's real node (marker ``kube``): the session's cluster (``kube_cluster``,
tests/conftest.py) runs it; ``real_node.py`` holds what its tests share (the node's name, label
and toleration, the app image, reading a container's cgroups)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
