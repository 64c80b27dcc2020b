"""Signals during a long measure, and what a terminal sees (progress line, colour, NO_COLOR).

The interrupt test proves cleanup from the outside: while the measure runs, it records the
session of the actor system (the session of the command connector's shell) and the CLI's own
session; after the CLI exits, no live process may remain in either.
"""

from __future__ import annotations

import os
import pty
import select
import shlex
import signal
import subprocess
import time
from pathlib import Path

import click
import pytest

from servo_actors.actors.linux import processes

pytestmark = pytest.mark.timeout(90)

EXIT_BOUND = 20.0
"""Seconds the CLI may take to exit after the signal; it takes well under one."""
START_BOUND = 30.0
"""Seconds until the measure command must be running."""
GONE_BOUND = 5.0
SYNTHETIC = {"name": "app", "type": "synthetic", "config": {"time_scale": 0}}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_measure_stops_everything(servo, tmp_path: Path, kit, signum: int) -> None:
    marker = tmp_path / "measuring.pid"
    script = {
        "name": "script",
        "type": "command",
        # A measure that would run far longer than the test: it must be killed, not waited out.
        "config": {"measure": f"echo $$ > {shlex.quote(str(marker))}; exec sleep 300"},
    }
    servo.write_config(SYNTHETIC, script)
    cli = servo.start("measure", "-d", "30s", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        shell = int(
            kit.wait_until(
                lambda: marker.exists() and marker.read_text().strip(), START_BOUND, what="measure"
            )
        )
        actor_session = processes.proc_stat(shell).sid
        assert actor_session != cli.pid  # the actor system lives in a session of its own
        sessions = {cli.pid, actor_session}
        assert processes.session_members(actor_session)
        started = time.monotonic()
        cli.send_signal(signum)
        stdout, stderr = cli.communicate(timeout=EXIT_BOUND)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert time.monotonic() - started < EXIT_BOUND
    assert cli.returncode == 128 + signum, stderr
    name = signal.Signals(signum).name
    assert f"interrupted by {name}: measure abandoned, its connectors were stopped" in stderr
    assert "Traceback" not in stderr and stdout == ""
    kit.wait_until(
        lambda: not any(processes.session_members(sid) for sid in sessions),
        GONE_BOUND,
        what="every process gone",
    )
    assert not processes.is_running(shell)


def run_on_terminal(servo, *args: str, no_color: bool) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; its exit code and all it wrote."""
    main, side = pty.openpty()
    env = {"NO_COLOR": "1"} if no_color else {}
    cli = servo.start(*args, stdout=side, stderr=side, stdin=subprocess.DEVNULL, env=env)
    os.close(side)
    output = b""
    deadline = time.monotonic() + START_BOUND
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(main, 4096)
                except OSError:  # EIO: the terminal's other side closed (the CLI exited)
                    break
                if not chunk:
                    break
                output += chunk
            elif cli.poll() is not None:
                break
        code = cli.wait(timeout=EXIT_BOUND)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        os.close(main)
    return code, output.decode()


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
def test_measure_on_a_terminal_shows_a_progress_line(servo, no_color: bool) -> None:
    hold = {"name": "hold", "type": "wait", "config": {"progress_interval": "200ms"}}
    servo.write_config(SYNTHETIC, hold)
    code, output = run_on_terminal(servo, "measure", "cost", "-d", "2s", no_color=no_color)
    assert code == 0, output
    lines = [part for part in output.split("\r") if part.startswith("measure [")]
    assert len(lines) >= 2, output  # redrawn in place while the 2 s pass
    assert lines[-1].split("]")[1].split()[0].endswith("%")
    assert "0s/2s" in output or "1s/2s" in output
    assert ("\x1b[" in output) is not no_color
    # The line is wiped before the table is printed.
    assert "METRIC" in output.split("measure [")[-1]


@pytest.mark.parametrize("no_color", [False, True], ids=["colour", "NO_COLOR"])
def test_check_on_a_terminal_colours_results_unless_no_color(servo, no_color: bool) -> None:
    servo.write_config(
        {"name": "probe", "type": "command", "config": {"check": {"up": "true", "down": "exit 3"}}}
    )
    code, output = run_on_terminal(servo, "check", no_color=no_color)
    assert code == 1
    if no_color:
        assert "\x1b[" not in output
    else:
        assert "\x1b[32mok\x1b[0m" in output
        assert "\x1b[31m\x1b[1mFAILED\x1b[0m" in output
    # Colour does not break the alignment: without the escapes the result column lines up.
    lines = [click.unstyle(line) for line in output.replace("\r", "").splitlines()]
    column = next(line for line in lines if line.startswith("CONNECTOR")).index("RESULT")
    assert sorted(line[column:].split()[0] for line in lines if line.startswith("probe")) == ["FAILED", "ok"]
