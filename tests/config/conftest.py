"""Fixtures for the config tests: a clean environment and config files in tmp_path (the CLI runner
and ``test_plugins`` are in tests/conftest.py).

``plugins/`` holds ``sa_test_connectors``, a real importable package of test-only connectors, and
its ``.dist-info`` (entry points). ``test_plugins`` puts it on ``sys.path``; subprocess tests put
its folder in ``PYTHONPATH``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servo_actors.logs import forget_secrets

REPO = Path(__file__).resolve().parents[2]
# Every variable that changes how servo-actors reads its configuration or prints.
SERVO_ENV = (
    "OPSANI_OPTIMIZER",
    "OPSANI_TOKEN",
    "OPSANI_TOKEN_FILE",
    "OPSANI_BASE_URL",
    "OPSANI_URL",
    "SERVO_UID",
    "SERVO_CONFIG",
    "SERVO_LOG_LEVEL",
    "SERVO_LOG_FORMAT",
    "NO_COLOR",
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No servo variable from the caller's environment; logging and secrets as they were after."""
    for name in SERVO_ENV:
        monkeypatch.delenv(name, raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    forget_secrets()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """``write_config(text, name="servo.yaml")``: the path of a new file in tmp_path."""

    def write(text: str, name: str = "servo.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
