"""One exception tree (errors.py): every exception the package defines is a ``ServoError``, and no
class of the package inherits from two of its classes (collaborators, not split-off bases)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import servo_actors
from servo_actors.errors import ServoError


def package_classes() -> list[type]:
    found: dict[str, type] = {}
    for module in pkgutil.walk_packages(servo_actors.__path__, "servo_actors."):
        loaded = importlib.import_module(module.name)
        for value in vars(loaded).values():
            if inspect.isclass(value) and value.__module__ == loaded.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def test_every_exception_of_the_package_is_in_the_servo_error_tree() -> None:
    outside = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in package_classes()
        if issubclass(cls, BaseException) and not issubclass(cls, ServoError)
    ]
    assert not outside, f"exceptions outside errors.ServoError's tree: {outside}"


def test_no_class_of_the_package_inherits_from_two_of_its_classes() -> None:
    twice = []
    for cls in package_classes():
        ours = [base for base in cls.__bases__ if base.__module__.startswith("servo_actors.")]
        if len(ours) > 1:
            twice.append(f"{cls.__module__}.{cls.__qualname__}")
    assert not twice, f"classes with two project base classes: {twice}"
