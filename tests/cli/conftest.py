"""Fixtures for the CLI tests: a clean environment, the CLI in-process (CliRunner) and as a process.

The in-process runner is the real ``cli`` group with its real options and error policy; the
subprocess helpers start the installed ``servo-actors`` script or ``python -m servo_actors``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from servo_actors.logs import forget_secrets

SUBPROCESS_TIMEOUT = 30  # seconds; one CLI start takes well under a second
SERVO_ENV_PREFIXES = ("OPSANI_", "SERVO_", "NO_COLOR")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No servo variable from the caller's environment; logging and secrets as they were after."""
    for name in [name for name in os.environ if name.startswith(SERVO_ENV_PREFIXES)]:
        monkeypatch.delenv(name)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    forget_secrets()


@pytest.fixture(scope="session")
def servo_script() -> str:
    """The installed ``servo-actors`` script of this interpreter (a venv's, or the system's)."""
    beside = Path(sys.executable).parent / "servo-actors"
    found = str(beside) if beside.exists() else shutil.which("servo-actors")
    assert found, "the servo-actors script is not installed: pip install -e ."
    return found


@pytest.fixture
def run_process(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_process(argv, **env)``: a real process in an empty directory (no servo.yaml), with no
    servo variables from the caller's environment but those given."""

    def run(argv: Sequence[str], **env: str) -> subprocess.CompletedProcess[str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith(SERVO_ENV_PREFIXES)}
        return subprocess.run(
            list(argv),
            cwd=tmp_path,
            env={**environment, **env},
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
        )

    return run
