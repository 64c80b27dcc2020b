"""The commands and code the README and the docs pages show are true of this repository.

- Every file a shell command of README.md or docs/**/*.md names (``config/...``, ``examples/...``,
  ``scripts/...``, ``deploy/...``...) exists, so each runs as written from the repository's folder.
- Every ``servo-actors ... validate`` among them runs and exits 0 (the others run in
  tests/runner/test_runner_readme.py, or say there why they cannot).
- A code block marked ``<!-- verbatim: PATH -->`` is a part of PATH, character for character, so
  the connector guide cannot drift from the example the tests run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
REPO_FOLDERS = ("config", "examples", "scripts", "deploy", "docs", "kube", "tests", "servo_actors")
VALIDATE_TIMEOUT = 60.0
"""Generous bound on one ``validate`` (it imports the connector types a file names)."""
_BLOCK = re.compile(r"^([ \t]*)```(?:sh|bash)\n(.*?)^[ \t]*```", re.M | re.S)
_VERBATIM = re.compile(r"^<!-- verbatim: (\S+) -->\n```\w*\n(.*?)^```", re.M | re.S)


def commands() -> list[tuple[str, str]]:
    """``(document, command)`` for each command line of each shell block (continuations joined)."""
    found = []
    for document in DOCUMENTS:
        for indent, body in _BLOCK.findall(document.read_text()):
            text = "".join(line.removeprefix(indent) for line in body.splitlines(keepends=True))
            for line in text.replace("\\\n", " ").splitlines():
                if line.strip():
                    found.append((document.relative_to(REPO).as_posix(), line.strip()))
    return found


def named_files(command: str) -> list[str]:
    """The repository paths a command names (placeholders such as DIR and FILE are not paths)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split("#", 1)[0].split()
    paths = []
    for word in words:
        word = word.split("=", 1)[1] if re.match(r"^[A-Z_]+=", word) else word
        word = word.rstrip(";&|")
        if word.startswith(tuple(f"{folder}/" for folder in REPO_FOLDERS)) and not re.search(
            r"[\[\]*$<>]", word
        ):
            paths.append(word)
    return paths


def test_the_documents_show_shell_commands() -> None:
    shown = commands()
    assert len(shown) > 20
    assert {document for document, _ in shown} >= {"README.md", "docs/usage.md", "docs/connectors/writing.md"}


def test_every_file_a_shown_command_names_exists() -> None:
    missing = [
        f"{document}: {command!r} names {path}, which does not exist"
        for document, command in commands()
        for path in named_files(command)
        if not (REPO / path).exists()
    ]
    assert not missing, "\n".join(missing)


VALIDATES = sorted(
    {command for _, command in commands() if re.search(r"\bservo-actors .*\bvalidate\b", command)}
)


def test_the_documents_validate_the_examples_they_show() -> None:
    assert any("examples/connectors/servo.yaml" in command for command in VALIDATES)
    assert any("config/synthetic.yaml" in command for command in VALIDATES)


@pytest.mark.parametrize("command", VALIDATES)
def test_a_shown_validate_runs_as_written(command: str, servo_on_path: dict[str, str]) -> None:
    done = subprocess.run(
        ["bash", "-e", "-c", command.split(" #", 1)[0]],
        cwd=REPO,
        env=servo_on_path,
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT,
    )
    assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    assert done.stdout.startswith("OK: ")


def test_every_verbatim_block_is_a_part_of_its_file() -> None:
    marked = [
        (document, path, body)
        for document in DOCUMENTS
        for path, body in _VERBATIM.findall(document.read_text())
    ]
    assert len(marked) >= 10
    drifted = [
        f"{document.relative_to(REPO)}: a block is not a part of {path}: {body.splitlines()[0]!r}"
        for document, path, body in marked
        if body not in (REPO / path).read_text()
    ]
    assert not drifted, "\n".join(drifted)


@pytest.fixture
def servo_on_path() -> dict[str, str]:
    """The environment of a reader's shell: this interpreter's ``servo-actors`` first on PATH."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("OPSANI_", "SERVO_"))}
    return {**kept, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


NOT_OURS = {"types/api.py": "servox's own source (docs/interop.md)"}
"""Python files the documents name that are not in this repository, and whose they are."""


def test_every_python_file_the_documents_name_exists() -> None:
    """A module named in backquotes (``actors/runtime/operation_path.py``, ``servo_actors/...``, a script,
    a test, or a bare ``gp.py``) is in the repository: moving a module fails here until the page
    that names it moves with it."""
    missing = []
    for document in DOCUMENTS:
        if document.is_symlink():  # docs/benchmark-results.md: BENCHMARKS.md, written by the scripts
            continue
        for path in re.findall(r"`([\w./-]+\.py)`", document.read_text()):
            if path in NOT_OURS or (REPO / path).exists() or (REPO / "servo_actors" / path).exists():
                continue
            tops = ("servo_actors", "scripts", "tests")
            if "/" not in path and any(next(REPO.glob(f"{top}/**/{path}"), None) for top in tops):
                continue
            missing.append(f"{document.relative_to(REPO)}: `{path}`")
    assert not missing, "modules the documents name that do not exist:\n" + "\n".join(missing)
