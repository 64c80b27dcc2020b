"""The connector author's guide's example (examples/connectors), run as the guide tells a reader.

docs/connectors/writing.md shows ``examples/connectors/cache_tuner.py`` and its servo.yaml; here
the real ``servo-actors`` script loads it through ``type: cache_tuner:CacheTuner`` (importable by
PYTHONPATH, as the guide says) and runs ``describe``, ``adjust`` and ``measure`` with ``--json``;
docs/connectors/testing.md shows ``examples/connectors/test_cache_tuner.py``, run here by pytest
as written. If the example or the API drifts, the guide's pages fail here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from marked_processes import MARKER_VAR, marked_pids

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "connectors"
CONFIG = EXAMPLE / "servo.yaml"
COMMAND_TIMEOUT = 60.0
"""Generous bound on one CLI command (it starts an actor system and one connector)."""
PYTEST_TIMEOUT = 120.0
LEAK_GRACE = 10.0


def servo_script() -> str:
    beside = Path(sys.executable).parent / "servo-actors"
    found = str(beside) if beside.exists() else shutil.which("servo-actors")
    assert found, "the servo-actors script is not installed: pip install -e ."
    return found


def environment(marker: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("OPSANI_", "SERVO_", "NO_COLOR"))}
    return {**kept, "PYTHONPATH": str(EXAMPLE), MARKER_VAR: marker}


def no_process_left(marker: str) -> None:
    deadline = time.monotonic() + LEAK_GRACE
    while (left := marked_pids(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes of the example's commands survived them: {left}"


def test_the_example_connector_through_the_real_cli(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex

    def cli(*args: str) -> dict:
        done = subprocess.run(
            [servo_script(), "-c", str(CONFIG), *args, "--json"],
            cwd=tmp_path,  # the servo's working directory: state_file's relative path resolves here
            env=environment(marker),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        return json.loads(done.stdout)

    try:
        described = cli("describe")["data"]
        settings = described["components"]["cache"]["settings"]
        assert settings["size_mb"]["type"] == "range" and settings["policy"]["type"] == "enum"
        assert set(described["metrics"]) == {"hit_ratio", "latency_p95", "memory_cost"}

        adjusted = cli("adjust", "cache.size_mb=512", "cache.policy=lfu")["data"]["components"]
        assert adjusted["cache"]["settings"]["size_mb"]["value"] == 512
        # The relative state_file is relative to the servo's working directory, not to servo.yaml.
        assert json.loads((tmp_path / "cache-tuner-state.json").read_text()) == {
            "size_mb": 512,
            "policy": "lfu",
        }
        assert not (EXAMPLE / "cache-tuner-state.json").exists()
        again = cli("describe")["data"]["components"]["cache"]["settings"]
        assert again["policy"]["value"] == "lfu"  # fresh connector processes, the state kept outside

        measured = cli("measure", "hit_ratio", "memory_cost", "-d", "1s")["data"]["metrics"]
        [series] = measured["hit_ratio"]["values"]
        assert series["id"] == "cache" and len(series["data"]) == 2  # sample_interval 0.5 s
        assert measured["memory_cost"] == {"unit": "$/h", "value": 0.025}
    finally:
        no_process_left(marker)


def test_the_guides_connector_tests_pass_as_written() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/connectors"],
        cwd=REPO,
        env=environment(uuid.uuid4().hex),
        capture_output=True,
        text=True,
        timeout=PYTEST_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout and "failed" not in done.stdout
