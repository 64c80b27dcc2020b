"""scripts/build-image for tests: run it, and skip (or, under CI=true, fail) without Go.

::

    go_or_skip()
    done = run_build_image("--json", "all")      # a CompletedProcess (text)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kube_local
import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD_IMAGE = ROOT / "scripts" / "build-image"
BUILD_TIMEOUT = 1800.0
"""Seconds for `scripts/build-image all`: seconds when Go's caches are warm; a fresh machine
first downloads the modules from the proxy."""


def go_or_skip() -> None:
    """Skips the test without the Go toolchain (found as scripts/kube-cluster finds it), saying
    why; under CI=true that is a failure, as for the kube tests."""
    reason = kube_local.go_missing()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}: CI must run the image tests")
        pytest.skip(reason)


def run_build_image(*args: str) -> subprocess.CompletedProcess[str]:
    """``scripts/build-image ARGS`` with the interpreter running the tests (standard library only)."""
    return subprocess.run(
        [sys.executable, str(BUILD_IMAGE), *args], capture_output=True, text=True, timeout=BUILD_TIMEOUT
    )
