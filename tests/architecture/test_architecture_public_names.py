"""Every module of the package that another module imports names from says what it exports
(``__all__``), and lists there every public name the others import from it (issue 24)."""

from __future__ import annotations

import ast
from pathlib import Path

import servo_actors

PACKAGE = Path(servo_actors.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _declared(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:  # built, not written out: trusted as it is
                return None
    return set()


def test_modules_imported_from_declare_what_they_export() -> None:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    trees = {name: ast.parse(path.read_text(), str(path)) for name, path in modules.items()}
    imported: dict[str, set[str]] = {}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module in modules
                and node.module != name
            ):
                for alias in node.names:
                    if f"{node.module}.{alias.name}" not in modules:
                        imported.setdefault(node.module, set()).add(alias.name)
    problems = []
    for module, names in sorted(imported.items()):
        declared = _declared(trees[module])
        if declared is None:
            continue
        if not declared:
            problems.append(f"{module}: no __all__ (others import {', '.join(sorted(names))})")
            continue
        unlisted = sorted(n for n in names if not n.startswith("_") and n != "*" and n not in declared)
        if unlisted:
            problems.append(f"{module}: __all__ lacks {', '.join(unlisted)}, which other modules import")
    assert not problems, "\n".join(problems)
