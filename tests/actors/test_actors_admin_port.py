"""An actor system's port taken by another live servo (issue 20, item 5): said in one line, and a
free port used at once, instead of a silent 11-14 s wait on the other servo's admin.

The other servo is a real process with an actor system of its own (its own message key, so its
admin refuses ours, as a second servo's would). The collision is made on purpose through
``admin_port``: in a real start it is a race between picking a free port and binding it.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from waiting import wait_until

from servo_actors.actors.linux import processes
from servo_actors.actors.transport.ports import port_is_taken
from servo_actors.actors.transport.system import ActorSystemHandle

pytestmark = pytest.mark.timeout(90)

START_BOUND = 8.0
"""Generous bound on a start that finds its port taken (about 0.1 s measured; a start that asks
the other servo's admin waits 11-14 s for it before it gives up)."""
OTHER_READY = 30.0
"""Seconds the other servo gets to start its actor system and print its port."""

OTHER_SERVO = """
import sys
from pathlib import Path
from servo_actors.actors.transport.system import ActorSystemHandle
handle = ActorSystemHandle(Path(sys.argv[1]))
handle.start()
print(handle.admin_port, handle.session_id, flush=True)
sys.stdin.read()  # until the test ends it
"""


def test_a_port_another_servo_holds_is_said_in_one_line_and_a_free_one_used_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_SERVO, str(tmp_path / "other")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    handle = ActorSystemHandle(tmp_path / "ours")
    try:
        assert other.stdout is not None
        line = other.stdout.readline()  # bounded by the test's timeout
        taken, other_session = (int(word) for word in line.split())
        assert port_is_taken("127.0.0.1", taken)
        handle = ActorSystemHandle(tmp_path / "ours", admin_port=taken)
        began = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="servo_actors.actors.transport.system"):
            handle.start()
        took = time.monotonic() - began
        print(f"start with the port taken: {took:.2f} s")
        assert took < START_BOUND
        assert handle.admin_port not in (None, taken)
        said = [r.getMessage() for r in caplog.records if f":{taken} is taken" in r.getMessage()]
        assert len(said) == 1, caplog.text
        assert "\n" not in said[0] and "another servo" in said[0]
    finally:
        handle.kill()
        # SIGTERM: it dies, and every process of its actor system with it (the lifeline).
        processes.stop_child(other, OTHER_READY)
        for pipe in (other.stdin, other.stdout):
            if pipe is not None:
                pipe.close()
    wait_until(
        lambda: not processes.session_members(other_session),
        OTHER_READY,
        what="the other servo's system gone",
    )
    assert not processes.session_members(other_session), "the other servo's actor system survived it"
