"""Placement and the member's view of its leader: pure rules on a fake clock (no sleeps).

One case per rule, as in OTP's supervisor suite: where a connector goes, when it waits, when it
is unavailable, when a member is lost, and what a member does about a silent leader.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servo_actors.actors.convention.member import LeaderWatch
from servo_actors.actors.rules.placement import Placement, Requirement
from servo_actors.protocol.backoff import BackoffPolicy

LOAD = Requirement("loadgen-host")
EU = Requirement("zone", "eu-1")


def placement(now: float = 0.0, **wants: Requirement) -> Placement:
    return Placement(wants or {"load": LOAD}, timeout=5.0, grace=3.0, now=now)


# ----- where a connector goes ------------------------------------------------------------------


def test_a_connector_goes_only_to_a_member_offering_its_capability() -> None:
    p = placement()
    p.member_joined("a:1", {"other": ""}, 0.0)
    assert p.choose("load", 0.0) is None
    p.member_joined("b:2", {"loadgen-host": "big"}, 0.1)
    assert p.choose("load", 0.1) == "b:2"
    assert p.where("load") == "b:2" and p.describe("load") == "b:2"


def test_a_value_in_the_placement_must_match_exactly() -> None:
    p = placement(web=EU)
    p.member_joined("us:1", {"zone": "us-1"}, 0.0)
    assert p.choose("web", 0.0) is None
    p.member_joined("eu:1", {"zone": "eu-1"}, 0.0)
    assert p.choose("web", 0.0) == "eu:1"


def test_connectors_spread_over_members_fewest_first_then_earliest_joined() -> None:
    p = placement(a=LOAD, b=LOAD, c=LOAD)
    p.member_joined("m2:1", {"loadgen-host": ""}, 1.0)
    p.member_joined("m1:1", {"loadgen-host": ""}, 2.0)
    assert [p.choose(name, 3.0) for name in ("a", "b", "c")] == ["m2:1", "m1:1", "m2:1"]


def test_choose_is_stable_until_released() -> None:
    p = placement(a=LOAD)
    p.member_joined("m:1", {"loadgen-host": ""}, 0.0)
    assert p.choose("a", 0.0) == p.choose("a", 1.0) == "m:1"
    assert p.release("a", 2.0) == "m:1"
    assert p.where("a") is None and p.member("m:1").hosting == set()


def test_a_local_connector_is_not_placed() -> None:
    p = placement()
    assert not p.placed("prom") and p.choose("prom", 0.0) is None
    assert p.describe("prom") == "local" and not p.unavailable("prom", 100.0)


# ----- waiting and host-unavailable ---------------------------------------------------------------


def test_a_connector_waits_for_a_member_for_the_grace_then_is_unavailable() -> None:
    p = placement(now=10.0)
    assert p.choose("load", 10.0) is None
    assert not p.unavailable("load", 12.9)
    assert p.waiting_until("load") == 13.0
    assert p.unavailable("load", 13.0)
    assert p.describe("load") == "waiting for a member offering loadgen-host"


def test_a_member_arriving_ends_unavailability_at_once() -> None:
    p = placement()
    assert p.unavailable("load", 5.0)
    p.member_joined("m:1", {"loadgen-host": ""}, 6.0)
    assert not p.unavailable("load", 6.0)
    assert p.choose("load", 6.0) == "m:1"


def test_a_released_connector_with_another_member_fitting_is_never_unavailable() -> None:
    p = placement()
    p.member_joined("m:1", {"loadgen-host": ""}, 0.0)
    p.choose("load", 0.0)
    p.release("load", 1.0)
    assert not p.unavailable("load", 100.0)


# ----- members lost --------------------------------------------------------------------------------


def test_a_member_is_lost_after_timeout_of_silence_not_before() -> None:
    p = placement()
    p.member_joined("m:1", {"loadgen-host": ""}, 0.0)
    p.heard("m:1", 2.0)
    assert p.lost_members(6.99) == []
    assert p.lost_members(7.0) == ["m:1"]


def test_a_lost_member_gives_back_its_connectors_and_their_grace_starts() -> None:
    p = placement(a=LOAD, b=LOAD)
    p.member_joined("m:1", {"loadgen-host": ""}, 0.0)
    p.choose("a", 0.0), p.choose("b", 0.0)
    assert p.member_lost("m:1", 7.0) == ["a", "b"]
    assert p.where("a") is None and p.members == ()
    assert not p.unavailable("a", 9.9) and p.unavailable("a", 10.0)


def test_a_member_that_joins_again_hands_back_what_its_earlier_self_hosted() -> None:
    p = placement()
    p.member_joined("m:1", {"loadgen-host": ""}, 0.0)
    p.choose("load", 0.0)
    assert p.member_joined("m:1", {"loadgen-host": ""}, 2.0) == ["load"]
    assert p.where("load") is None and p.choose("load", 2.0) == "m:1"


def test_heard_never_moves_backwards_and_unknown_members_are_ignored() -> None:
    p = placement()
    p.member_joined("m:1", {}, 0.0)
    p.heard("m:1", 4.0)
    p.heard("m:1", 1.0)
    p.heard("nobody:1", 4.0)
    assert p.lost_members(8.9) == [] and p.lost_members(9.0) == ["m:1"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["join", "lose", "choose", "release", "heard"]),
            st.sampled_from(["m1:1", "m2:1", "m3:1"]),
            st.sampled_from(["a", "b", "c"]),
            st.floats(0.0, 2.0),
        ),
        max_size=40,
    )
)
def test_any_interleaving_keeps_placement_consistent(steps: list[tuple[str, str, str, float]]) -> None:
    """Whatever happens in whatever order: a connector is on at most one live member that offers
    its capability, and that member lists it; only a connector with no fitting member is ever
    unavailable."""
    wants = {"a": LOAD, "b": LOAD, "c": EU}
    p = Placement(wants, timeout=5.0, grace=3.0, now=0.0)
    now = 0.0
    offers = {
        "m1:1": {"loadgen-host": ""},
        "m2:1": {"zone": "eu-1"},
        "m3:1": {"loadgen-host": "", "zone": "eu-1"},
    }
    for action, member, connector, step in steps:
        now += step
        if action == "join":
            p.member_joined(member, offers[member], now)
        elif action == "lose":
            p.member_lost(member, now)
        elif action == "choose":
            p.choose(connector, now)
        elif action == "release":
            p.release(connector, now)
        else:
            p.heard(member, now)
        for name, want in wants.items():
            where = p.where(name)
            if where is not None:
                host = p.member(where)
                assert host is not None and name in host.hosting and want.met_by(host.capabilities)
                assert not p.unavailable(name, now)
            if p.unavailable(name, now):
                assert p.candidates(name) == []
        listed = [(n, m.name) for m in p.members for n in m.hosting]
        assert sorted(listed) == sorted((n, p.where(n)) for n in wants if p.where(n) is not None)


# ----- the member's view of its leader --------------------------------------------------------------


def watch(min_delay: float = 0.5, max_delay: float = 4.0) -> LeaderWatch:
    return LeaderWatch(BackoffPolicy(min=min_delay, max=max_delay, max_time=float("inf"), jitter=0.0))


def test_joining_backs_off_exponentially_up_to_the_bound() -> None:
    w, rng, now, delays = watch(), random.Random(0), 0.0, []
    for _ in range(6):
        assert w.join_due(now)
        delays.append(w.join_attempted(now, rng))
        assert not w.join_due(now + delays[-1] - 0.01)
        now += delays[-1]
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_an_attached_member_stops_joining_and_heartbeats_every_interval() -> None:
    w = watch()
    w.attach("run-1", "10.0.0.5:1900", interval=1.0, timeout=5.0, now=0.0)
    assert not w.join_due(100.0)
    assert w.heartbeat_due(0.0)
    w.heartbeat_sent(0.0)
    assert not w.heartbeat_due(0.99) and w.heartbeat_due(1.0)
    assert w.next_due(0.0) == 1.0


def test_the_leader_is_lost_after_timeout_without_a_message_of_its_incarnation() -> None:
    w = watch()
    w.attach("run-1", "leader", interval=1.0, timeout=5.0, now=0.0)
    assert w.heard("run-1", 3.0)
    assert not w.heard("run-0", 7.0)  # an earlier leader's message does not count
    assert not w.leader_lost(7.99) and w.leader_lost(8.0)


def test_after_losing_its_leader_a_member_joins_again_at_once_backing_off_afresh() -> None:
    w = watch()
    rng = random.Random(0)
    w.join_attempted(0.0, rng), w.join_attempted(0.5, rng)
    w.attach("run-1", "leader", interval=1.0, timeout=5.0, now=1.0)
    w.detach(9.0)
    assert not w.attached and w.join_due(9.0)
    assert w.join_attempted(9.0, rng) == 0.5
