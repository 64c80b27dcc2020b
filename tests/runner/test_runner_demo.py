"""`servo-actors demo`, the README's main job, as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest


@pytest.mark.timeout(180)
def test_demo_runs_a_short_plan_with_aborts_and_leaves_nothing(kit, tmp_path) -> None:
    marker = uuid.uuid4().hex
    env = {**os.environ, "SERVO_ACTORS_TEST_MARK": marker}
    done = subprocess.run(
        [sys.executable, "-m", "servo_actors", "demo", "--steps", "4", "--abort-every", "3"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=150,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "step  4:" in out and "best: step" in out, out
    # The closing summary: baseline against the (confirmed or labelled) recommendation.
    assert "summary: baseline (step 0) -> recommendation" in out and "objective (minimize)" in out, out
    assert "pressed Abort" in out and "cancelled: connectors killed and restarted fresh" in out, out
    assert "Traceback" not in out
    kit.wait_until(lambda: not kit.marked_pids(marker), 10, what="every process of the demo gone")
