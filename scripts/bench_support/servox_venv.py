"""A throwaway virtualenv with servox 25.3.0, as scripts/interop_servox.sh makes one (docs/interop.md).

servox 25.3.0 needs typer 0.7, which breaks with click 8.2: ``click<8.2`` is the only pin added;
everything else resolves from servox's own pins. servox supports Python 3.9-3.12.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench_support.optimizer import BenchError

SERVOX_VERSION = "25.3.0"
SERVOX_PINS = (f"servox=={SERVOX_VERSION}", "click<8.2")
INSTALL_TIMEOUT = 600.0
"""Seconds for ``python -m venv`` plus ``pip install`` of servox."""
PIP_NETWORK_TIMEOUT = 60
"""pip's own per-connection timeout (seconds)."""
VERSION_TIMEOUT = 60.0
SUPPORTED_PYTHON = ((3, 9), (3, 12))


def check_python() -> None:
    low, high = SUPPORTED_PYTHON
    if not low <= sys.version_info[:2] <= high:
        raise BenchError(
            f"servox {SERVOX_VERSION} needs Python {low[0]}.{low[1]}-{high[0]}.{high[1]}, "
            f"not {sys.version.split()[0]} (use --no-servox)"
        )


def make_venv(parent: Path) -> Path:
    """Create ``parent/servox-venv`` with servox installed; BenchError (with pip's log tail) if not."""
    check_python()
    venv = parent / "servox-venv"
    log = parent / "pip.log"
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(venv)],
            check=True,
            timeout=INSTALL_TIMEOUT,
            capture_output=True,
        )
        with open(log, "wb") as out:
            subprocess.run(
                [
                    str(venv / "bin" / "pip"),
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "--timeout",
                    str(PIP_NETWORK_TIMEOUT),
                    *SERVOX_PINS,
                ],
                check=True,
                timeout=INSTALL_TIMEOUT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise BenchError(
            f"installing {' '.join(SERVOX_PINS)} failed ({exc}); use --no-servox to skip servox\n{tail}"
        ) from None
    return venv


def check_venv(venv: Path) -> Path:
    if not (venv / "bin" / "servo").exists():
        raise BenchError(
            f"{venv} has no bin/servo: install {' '.join(SERVOX_PINS)} there, or leave --servox-venv out"
        )
    return venv


def versions(venv: Path) -> dict[str, str]:
    """Versions of servox and the packages that shape its behaviour, from the venv itself."""
    code = (
        "import json; from importlib.metadata import version; "
        "print(json.dumps({n: version(n) for n in ('servox', 'click', 'typer', 'httpx', 'pydantic', 'uvloop')}))"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=VERSION_TIMEOUT
    )
    if out.returncode != 0:
        raise BenchError(f"cannot read servox's version from {venv}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)
