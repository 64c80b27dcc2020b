"""The actors package's modules moved into subpackages (issue 24); their old paths still import
the moved module itself for one release, with a DeprecationWarning (README, migration notes)."""

from __future__ import annotations

import importlib
import sys

import pytest

import servo_actors.actors as actors


@pytest.mark.parametrize("old", sorted(actors._OLD_PATHS))
def test_an_old_path_imports_the_moved_module(old: str) -> None:
    sys.modules.pop(f"servo_actors.actors.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"servo_actors.actors.{old} moved to"):
        module = importlib.import_module(f"servo_actors.actors.{old}")
    assert module is importlib.import_module(f"servo_actors.actors.{actors._OLD_PATHS[old]}")


def test_the_old_convention_module_keeps_its_names() -> None:
    from servo_actors.actors.convention import convention_settings, system_options
    from servo_actors.actors.convention.settings import convention_settings as moved

    assert convention_settings is moved and callable(system_options)
