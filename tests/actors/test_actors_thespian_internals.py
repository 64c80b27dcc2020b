"""The start-up self-check: a Thespian whose internals changed fails loudly, naming what changed.

Each test changes Thespian itself (monkeypatch, undone after the test), never servo-actors.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import thespian.system.transport.TCPTransport as tcp
import yaml
from thespian.system import multiprocCommon
from thespian.system.transport.IPBase import IPActorAddress

from servo_actors.actors import ServoRuntime
from servo_actors.actors.transport.thespian_internals import INTERNALS, thespian_problems
from servo_actors.errors import SupervisorError

pytestmark = pytest.mark.timeout(60)


def test_the_installed_thespian_has_everything_the_servo_relies_on() -> None:
    assert thespian_problems() == []
    assert len(INTERNALS) > 30


def test_a_missing_module_global_stops_the_start_naming_it(monkeypatch, kit, tmp_path: Path) -> None:
    monkeypatch.delattr(tcp, "LISTEN_DEPTH")
    runtime = ServoRuntime(kit.servo_config(kit.chaos("a")), run_dir=tmp_path / "run")
    with pytest.raises(SupervisorError) as caught:
        runtime.start()
    message = str(caught.value)
    assert message.startswith("Thespian is not as servo-actors needs it (thespian==4.0.1): ")
    assert (
        "thespian.system.transport.TCPTransport.LISTEN_DEPTH is missing (needed for the listen queue)"
        in message
    )
    assert not runtime.started and runtime.members() == []


def test_a_missing_method_is_named(monkeypatch) -> None:
    monkeypatch.delattr(multiprocCommon.MultiProcReplicator, "_checkChildLiveness")
    assert thespian_problems() == [
        "thespian.system.multiprocCommon.MultiProcReplicator._checkChildLiveness is missing (needed for child exit codes)"
    ]


def test_an_attribute_the_code_no_longer_stores_is_named(monkeypatch) -> None:
    def renamed(self, childAddr, childClass, childProc, childNum):  # noqa: N803 (Thespian's names)
        self.address, self.process = childAddr, childProc

    monkeypatch.setattr(multiprocCommon.ChildInfo, "__init__", renamed)
    assert thespian_problems() == [
        "thespian.system.multiprocCommon.ChildInfo.__init__ no longer uses childAddr, childProc (needed for child PIDs)"
    ]


def test_a_property_that_became_something_else_is_still_found(monkeypatch) -> None:
    monkeypatch.delattr(IPActorAddress, "bindArgs")
    assert thespian_problems() == [
        "thespian.system.transport.IPBase.IPActorAddress.bindArgs is missing (needed for loopback-only binds)"
    ]


def test_the_cli_says_what_is_missing_in_one_line_and_exits_1(monkeypatch, run_cli, tmp_path: Path) -> None:
    monkeypatch.delattr(tcp.TCPTransport, "_check_XMIT_4_done")
    config = tmp_path / "servo.yaml"
    config.write_text(yaml.safe_dump({"connectors": [{"name": "a", "type": "chaos"}]}))
    result = run_cli(["-c", str(config), "check"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: Thespian is not as servo-actors needs it"), result.stderr
    assert (
        "TCPTransport.TCPTransport._check_XMIT_4_done is missing (needed for message authentication)"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_sigchld_wakeups_are_one_per_pending_check() -> None:
    # Thespian's SIGCHLD handler connects to its own listen socket to wake its select loop; the
    # patch skips the call while a check is already pending (its connection is still queued).
    from servo_actors.actors.transport.thespian_patches import coalescing_interrupt_wait

    connections = []

    def original(transport, signal_shutdown=False, check_children=False):  # as TCPTransport's
        transport._shutdownSignalled |= signal_shutdown
        transport._checkChildren |= check_children
        connections.append((signal_shutdown, check_children))

    interrupt_wait = coalescing_interrupt_wait(original)
    transport = type("Transport", (), {"_checkChildren": False, "_shutdownSignalled": False})()
    for _ in range(50):  # 50 children killed at once
        interrupt_wait(transport, check_children=True)
    assert connections == [(False, True)]
    transport._checkChildren = False  # the loop accepted the connection and ran the check
    interrupt_wait(transport, check_children=True)
    interrupt_wait(transport, signal_shutdown=True)  # a shutdown always wakes it
    assert connections == [(False, True), (False, True), (True, False)]


def test_the_self_check_still_passes_once_the_patches_are_in(kit, tmp_path: Path) -> None:
    from thespian.system.transport import ReceiveEnvelope, TransmitIntent

    runtime = ServoRuntime(kit.servo_config(kit.chaos("a")), run_dir=tmp_path / "run")
    runtime.start()
    try:
        assert runtime.run("check").ok
    finally:
        runtime.stop()
    assert thespian_problems() == []  # a second start checks the patched classes
    # Log lines still say what they are about, once formatted.
    envelope = ReceiveEnvelope("sender", {"text": "hello"})
    assert "hello" in str(envelope) and "hello" in str(envelope.identify())
    assert "hello" in str(TransmitIntent("target", "hello").identify())
