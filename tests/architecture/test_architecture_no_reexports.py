"""A name is imported from the module that defines it: a package's ``__init__`` may gather its
public names, no other module exports a name it imports, and no package exports a private one."""

from __future__ import annotations

import ast
from pathlib import Path

import servo_actors

PACKAGE = Path(servo_actors.__file__).parent


def _exported(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [str(name) for name in ast.literal_eval(node.value)]
    return []


def _imported(tree: ast.Module) -> set[str]:
    return {
        alias.asname or alias.name.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }


def test_no_module_but_a_package_exports_what_it_imports() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        imported = set(_imported(tree)) & set(_exported(tree))
        where = path.relative_to(PACKAGE.parent)
        if path.name == "__init__.py":
            private = sorted(name for name in imported if name.startswith("_"))
            if private:
                problems.append(f"{where} exports private names of its modules: {', '.join(private)}")
        elif imported:
            problems.append(f"{where} exports names it imports: {', '.join(sorted(imported))}")
    assert not problems, "\n".join(problems)
