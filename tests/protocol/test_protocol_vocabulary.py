"""The protocol's words are written once (servo_actors/vocabulary.py): the wire models use the same
words, and no other module of the package spells an event, a command or a shared reason out."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from servo_actors import vocabulary
from servo_actors.protocol import commands as wire_commands
from servo_actors.protocol import wire_types

PACKAGE = Path(vocabulary.__file__).parent
WORDS = {
    *vocabulary.EVENTS,
    *vocabulary.COMMANDS,
    vocabulary.SUPERVISOR_LOST,
    *vocabulary.NOT_UP_REASONS,
}


def test_the_wire_models_use_the_vocabulary() -> None:
    assert tuple(wire_types.Event) == vocabulary.EVENTS
    assert tuple(wire_types.CommandName) == vocabulary.COMMANDS
    assert {str(c): str(e) for c, e in wire_types.RESULT_EVENT.items()} == vocabulary.RESULT_EVENT
    assert get_args(wire_types.ServoStatusName) == vocabulary.SERVO_STATUSES
    assert get_args(wire_types.OptimizerStatusName) == vocabulary.OPTIMIZER_STATUSES
    assert set(vocabulary.FAILURE_STATUSES) == set(vocabulary.SERVO_STATUSES) - {"ok"}
    assert set(vocabulary.STATUS_SEVERITY) == set(vocabulary.SERVO_STATUSES)
    commands = [
        wire_commands.DescribeCommand,
        wire_commands.MeasureCommand,
        wire_commands.AdjustCommand,
        wire_commands.SleepCommand,
    ]
    assert tuple(get_args(c.model_fields["cmd"].annotation)[0] for c in commands) == vocabulary.COMMANDS


def _exempt(tree: ast.AST) -> set[int]:
    """Docstrings, and the words of a ``Literal[...]`` type (a type must spell them out: the wire
    models' command types, checked against the vocabulary above)."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "Literal"
        ):
            found.update(id(inner) for inner in ast.walk(node.slice))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                found.add(id(body[0].value))
    return found


def test_no_other_module_spells_the_words_out() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "vocabulary.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        exempt = _exempt(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in WORDS and id(node) not in exempt:
                spelled.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert not spelled, "words of the protocol spelled out of servo_actors/vocabulary.py:\n" + "\n".join(
        spelled
    )
