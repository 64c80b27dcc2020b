"""Tests of scripts/bench_loop.py's helpers (``scripts/bench_support``): put ``scripts/`` on the path."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = str(Path(__file__).resolve().parent.parent.parent / "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
