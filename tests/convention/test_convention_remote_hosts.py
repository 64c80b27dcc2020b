"""The leader's side of the member protocol (RemoteHosts) on a fake clock, its sends recorded.

What a member system says (Thespian's announcement, then the member agent's messages) is played
here as real message objects; what the leader sends back is read from the recording.
"""

from __future__ import annotations

from typing import Any

import pytest
from thespian.actors import ActorSystemConventionUpdate

from servo_actors.actors.convention.remote_hosts import (
    HostLost,
    Placeable,
    RemoteGone,
    RemoteHosts,
    RemoteSpawned,
    Unplaced,
)
from servo_actors.actors.convention.settings import ConventionSettings
from servo_actors.actors.rules import member_messages as mm
from servo_actors.actors.rules.messages import ChildSpec
from servo_actors.actors.rules.placement import Requirement

M1 = "10.0.0.7:1901"
SPEC = ChildSpec("load", "chaos")


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, Any]] = []
        self.deregistered: list[Any] = []

    def send(self, address: Any, message: Any) -> None:
        self.sent.append((address, message))

    def deregister(self, address: Any) -> None:
        self.deregistered.append(address)

    def take(self, kind: type) -> list[tuple[Any, Any]]:
        found = [(a, msg) for a, msg in self.sent if isinstance(msg, kind)]
        self.sent = [(a, msg) for a, msg in self.sent if not isinstance(msg, kind)]
        return found


@pytest.fixture
def world() -> tuple[RemoteHosts, Recorder]:
    recorder = Recorder()
    settings = ConventionSettings(
        leader="10.0.0.5:1900",
        interval=1.0,
        timeout=5.0,
        grace=3.0,
        placements=(("load", Requirement("loadgen-host")),),
    )
    hosts = RemoteHosts(settings, send=recorder.send, deregister=recorder.deregister, now=0.0)
    return hosts, recorder


def announce(hosts: RemoteHosts, member: str = M1, now: float = 0.0, added: bool = True) -> list[Any]:
    capabilities = {mm.MEMBER_CAPABILITY: member, mm.AGENT_CAPABILITY: f"agent@{member}"}
    return hosts.handle(ActorSystemConventionUpdate(f"admin@{member}", capabilities, added), None, now)


def join(hosts: RemoteHosts, recorder: Recorder, member: str = M1, now: float = 0.0) -> list[Any]:
    announce(hosts, member, now)
    [(address, attach)] = recorder.take(mm.Attach)
    assert address == f"agent@{member}" and attach.incarnation == hosts.incarnation
    return hosts.handle(mm.Attached(hosts.incarnation, member, 4242, {"loadgen-host": ""}), address, now)


def test_an_announced_agent_is_attached_and_then_hosts_what_is_spawned(world) -> None:
    hosts, recorder = world
    assert join(hosts, recorder) == [Placeable(("load",))]
    assert hosts.spawn(SPEC, 1, 0.1) == []
    [(address, spawn)] = recorder.take(mm.SpawnHost)
    assert address == f"agent@{M1}" and spawn.generation == 1 and spawn.spec == SPEC
    events = hosts.handle(mm.HostSpawned(M1, "load", 1, 777, "host-address"), address, 0.2)
    assert events == [RemoteSpawned("load", 1, M1, "host-address", 777)]
    assert hosts.where("load") == M1


def test_a_spawn_waits_for_a_member_through_the_grace_then_is_unplaced(world) -> None:
    hosts, recorder = world
    assert hosts.spawn(SPEC, 1, 0.0) == []
    assert hosts.next_due() <= 3.0
    assert hosts.tick(2.9) == []
    [unplaced] = hosts.tick(3.0)
    assert isinstance(unplaced, Unplaced) and unplaced.generation == 1
    assert "needs a member offering loadgen-host" in unplaced.message
    assert "servo-actors agent --capability loadgen-host" in unplaced.message
    # Later spawns fail at once, until a member offering it joins.
    assert hosts.spawn(SPEC, 2, 4.0) == [Unplaced("load", 2, unplaced.message)]
    assert join(hosts, recorder, now=5.0) == [Placeable(("load",))]


def test_a_member_joining_during_the_grace_takes_the_waiting_spawn_at_once(world) -> None:
    hosts, recorder = world
    hosts.spawn(SPEC, 1, 0.0)
    assert join(hosts, recorder, now=1.0) == []  # nothing to announce: the spawn went there
    [(_, spawn)] = recorder.take(mm.SpawnHost)
    assert spawn.generation == 1
    hosts.handle(mm.Heartbeat(hosts.incarnation, M1), f"agent@{M1}", 4.0)
    assert hosts.tick(4.0) == []


def test_a_silent_member_is_lost_its_connectors_with_it_and_it_is_deregistered(world) -> None:
    hosts, recorder = world
    join(hosts, recorder)
    hosts.spawn(SPEC, 1, 0.0)
    hosts.handle(mm.Heartbeat(hosts.incarnation, M1), f"agent@{M1}", 2.0)
    assert not [e for e in hosts.tick(6.9) if isinstance(e, HostLost)]
    [lost] = hosts.tick(7.0)
    assert isinstance(lost, HostLost) and lost.generation == 1 and "is lost" in lost.message
    assert recorder.deregistered == [f"admin@{M1}"]
    # Its process went with it: a kill of that generation is done already.
    assert hosts.kill("load", 1, 7.1) is True
    assert hosts.members() == []


def test_heartbeats_go_out_every_interval_to_attached_members_only(world) -> None:
    hosts, recorder = world
    join(hosts, recorder)
    announce(hosts, "other:1")  # announced, never answers
    recorder.take(mm.Attach)
    hosts.tick(0.0), hosts.tick(0.5), hosts.tick(1.0)
    beats = recorder.take(mm.Heartbeat)
    assert [address for address, _ in beats] == [f"agent@{M1}", f"agent@{M1}"]


def test_a_kill_goes_to_the_member_and_its_gone_ends_the_generation(world) -> None:
    hosts, recorder = world
    join(hosts, recorder)
    hosts.spawn(SPEC, 1, 0.0)
    assert hosts.kill("load", 1, 1.0) is False
    assert hosts.kill("load", 1, 1.1) is False  # a repeat within KILL_RESEND sends nothing more
    assert len(recorder.take(mm.KillHost)) == 1
    assert hosts.kill("load", 1, 1.6) is False
    assert len(recorder.take(mm.KillHost)) == 1
    events = hosts.handle(mm.HostGone(M1, "load", 1, -9, True), f"agent@{M1}", 1.7)
    assert events == [RemoteGone("load", 1, -9, True)]
    assert hosts.kill("load", 1, 1.8) is True and hosts.where("load").startswith("waiting")


def test_answers_about_a_replaced_generation_or_another_leader_are_dropped(world) -> None:
    hosts, recorder = world
    join(hosts, recorder)
    hosts.spawn(SPEC, 1, 0.0)
    hosts.spawn(SPEC, 2, 0.1)
    assert hosts.handle(mm.HostGone(M1, "load", 1, 0, False), None, 0.2) == []
    assert hosts.handle(mm.Attached("another-run", M1, 1, {}), None, 0.2) == []
    assert hosts.handle("not a convention message", None, 0.2) is None


def test_a_member_that_no_longer_serves_us_is_lost_at_once(world) -> None:
    hosts, recorder = world
    join(hosts, recorder)
    hosts.spawn(SPEC, 1, 0.0)
    events = hosts.handle(mm.NotAttached(hosts.incarnation, M1), f"agent@{M1}", 1.0)
    assert [type(e) for e in events] == [HostLost]
    assert recorder.deregistered == [f"admin@{M1}"]


def test_a_member_announced_again_with_a_new_agent_replaces_its_earlier_self(world) -> None:
    hosts, recorder = world
    join(hosts, recorder)
    hosts.spawn(SPEC, 1, 0.0)
    capabilities = {mm.MEMBER_CAPABILITY: M1, mm.AGENT_CAPABILITY: "a restarted agent"}
    events = hosts.handle(ActorSystemConventionUpdate(f"admin@{M1}", capabilities, True), None, 1.0)
    assert [type(e) for e in events] == [HostLost]
    [(address, _)] = recorder.take(mm.Attach)
    assert address == "a restarted agent"


def test_thespian_announcing_the_same_agent_again_changes_nothing(world) -> None:
    """A member that registers afresh before it heard the leader's answer is announced "removed",
    then "added": its connectors are not lost for that."""
    hosts, recorder = world
    join(hosts, recorder)
    hosts.spawn(SPEC, 1, 0.0)
    assert announce(hosts, now=0.5, added=False) == []
    assert announce(hosts, now=0.5) == []
    assert recorder.take(mm.Attach) == [] and hosts.where("load") == M1


def test_a_refusing_member_is_logged_once_and_never_used(world, caplog) -> None:
    hosts, recorder = world
    announce(hosts)
    for _ in range(3):
        hosts.handle(mm.AttachRefused(hosts.incarnation, M1, "serves another servo"), None, 0.5)
    assert caplog.text.count("refused to join: serves another servo") == 1
    assert hosts.spawn(SPEC, 1, 1.0) == []
    assert recorder.take(mm.SpawnHost) == []


def test_a_plain_thespian_system_joining_is_ignored(world) -> None:
    hosts, recorder = world
    assert hosts.handle(ActorSystemConventionUpdate("admin@x", {"Admin Port": 1}, True), None, 0.0) == []
    assert recorder.sent == []


def test_detach_all_tells_every_attached_member(world) -> None:
    hosts, recorder = world
    join(hosts, recorder)
    hosts.detach_all()
    [(address, detach)] = recorder.take(mm.Detach)
    assert address == f"agent@{M1}" and detach.incarnation == hosts.incarnation
