"""The images' Go modules (kube/app, kube/images/pause): formatted by gofmt, clean under go vet,
go.mod and go.sum tidy as checked in."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from project_images import ROOT, go_or_skip

pytestmark = pytest.mark.timeout(600)  # go vet may first download the modules

MODULES = ["kube/app", "kube/images/pause"]
GO_TIMEOUT = 600.0


def go_command() -> str:
    go_or_skip()
    found = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    return found


def run(command: list[str], module: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CGO_ENABLED="0", GOTOOLCHAIN="local", GOWORK="off", GOFLAGS="-buildvcs=false")
    return subprocess.run(
        command, cwd=ROOT / module, env=env, capture_output=True, text=True, timeout=GO_TIMEOUT
    )


@pytest.mark.parametrize("module", MODULES)
def test_gofmt_go_vet_and_tidy(module: str) -> None:
    go = go_command()
    gofmt = str(Path(go).resolve().parent / "gofmt")
    formatted = run([gofmt, "-l", "."], module)
    assert (formatted.returncode, formatted.stdout) == (0, ""), (
        f"gofmt -l: {formatted.stdout}{formatted.stderr}"
    )
    vetted = run([go, "vet", "./..."], module)
    assert vetted.returncode == 0, f"go vet in {module}:\n{vetted.stderr}"
    tidy = run([go, "mod", "tidy", "-diff"], module)
    assert tidy.returncode == 0, f"go.mod/go.sum of {module} are not tidy:\n{tidy.stdout}{tidy.stderr}"
