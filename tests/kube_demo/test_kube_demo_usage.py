"""scripts/kube-demo's bad usage: exit 2 and a message naming the flag, before any cluster is
touched (no kube marker: nothing here needs the cluster)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent.parent / "scripts" / "kube-demo"
USAGE_TIMEOUT = 60.0
"""Generous bound on a run that only parses its arguments (it imports the package)."""


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--app", "real", "--namespace", "Not_A_Name"], "--namespace 'Not_A_Name' is not a namespace name"),
        (["--namespace=-leading-dash"], "is not a namespace name"),
        (["--namespace", "x" * 64], "at most 63 characters"),
        (["--app", "real", "--abort-every", "-1"], "--abort-every must be 0 or more"),
        (["--app", "real", "--steps", "0"], "--steps must be from 1 to 500"),
    ],
)
def test_bad_usage_names_the_flag(args: list[str], named: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dir", str(tmp_path / "cluster"), *args],
        capture_output=True, text=True, timeout=USAGE_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "cluster").exists()
