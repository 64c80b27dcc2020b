"""The watchdog's rules, with the clock and /proc passed in (no sleeping, no processes)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servo_actors.actors.linux.processes import ProcStat
from servo_actors.actors.linux.watchdog import Watchdog

SUPERVISOR, ADMIN, LOGGER = 30, 20, 21


def stat(pid: int, state: str = "S") -> ProcStat:
    return ProcStat(pid, state, 1, pid, 20, 100)


def watched(interval: float = 1.0, timeout: float = 3.0) -> Watchdog:
    # As the runtime watches them: each dies with the one it depends on.
    dog = Watchdog(interval, timeout)
    dog.watch("supervisor", SUPERVISOR, depends_on="Thespian admin")
    dog.watch("Thespian admin", ADMIN, depends_on="Thespian logger")
    dog.watch("Thespian logger", LOGGER)
    return dog


def table(**states: str) -> dict[int, ProcStat]:
    pids = {"supervisor": SUPERVISOR, "admin": ADMIN, "logger": LOGGER}
    found = {pid: stat(pid) for pid in pids.values()}
    for role, state in states.items():
        if state == "gone":
            del found[pids[role]]
        else:
            found[pids[role]] = stat(pids[role], state)
    return found


def test_all_well() -> None:
    assert watched().verdict(0.0, table().get) is None


def test_a_dead_or_zombie_process_is_lost_at_once() -> None:
    assert watched().verdict(0.0, table(logger="gone").get) == "the Thespian logger (pid 21) died"
    assert watched().verdict(0.0, table(admin="Z").get) == "the Thespian admin (pid 20) died"


def test_the_process_whose_death_explains_the_others_is_named_with_what_went_with_it() -> None:
    # A dead admin takes the supervisor with it; a dead logger takes the admin, and so the supervisor.
    assert (
        watched().verdict(0.0, table(admin="gone", supervisor="gone").get)
        == "the Thespian admin (pid 20) died, and the supervisor (pid 30) with it"
    )
    assert (
        watched().verdict(0.0, table(logger="gone", admin="Z", supervisor="gone").get)
        == "the Thespian logger (pid 21) died, and the supervisor (pid 30) and the Thespian admin (pid 20) with it"
    )
    assert watched().verdict(0.0, table(supervisor="gone").get) == "the supervisor (pid 30) died"
    # Two that depend on nothing dead (killed one by one): the first watched is named.
    assert watched().verdict(0.0, table(supervisor="gone", logger="gone").get) == (
        "the supervisor (pid 30) died, and the Thespian logger (pid 21) with it"
    )


def test_a_stopped_process_is_lost_after_the_timeout_and_forgiven_if_it_continues() -> None:
    dog = watched(timeout=3.0)
    assert dog.verdict(10.0, table(supervisor="T").get) is None
    assert dog.stopped("supervisor")
    assert dog.verdict(12.9, table(supervisor="T").get) is None
    # Never seen running: how long before the first look it stopped is not known.
    assert dog.verdict(13.0, table(supervisor="T").get) == (
        "the supervisor (pid 30) has been stopped for at least 3.0s"
    )
    again = watched(timeout=3.0)
    again.verdict(10.0, table(admin="t").get)
    assert again.verdict(12.0, table().get) is None  # SIGCONT: the clock starts over
    assert not again.stopped("Thespian admin")
    assert again.verdict(14.0, table(admin="T").get) is None
    assert again.verdict(16.9, table(admin="T").get) is None


def test_a_stop_found_by_an_idle_look_is_said_with_both_ends_of_its_length() -> None:
    # Idle: a look every 5 s. It answered a ping sent at 0.0, was stopped just after, found stopped
    # at the look at 5.0, and is lost at 10.0: stopped for 5 s to 10 s, not "5.0s".
    dog = Watchdog(interval=1.0, timeout=5.0, idle_interval=5.0)
    dog.watch("supervisor", SUPERVISOR)
    dog.idle = True
    dog.ping_sent("ping-1", 0.0)
    dog.answered("ping-1", 0.01)
    assert dog.verdict(5.0, {SUPERVISOR: stat(SUPERVISOR, "T")}.get) is None
    assert dog.verdict(10.0, {SUPERVISOR: stat(SUPERVISOR, "T")}.get) == (
        "the supervisor (pid 30) has been stopped for 5.0s to 10.0s"
        " (found stopped 5.0s ago, last seen running 10.0s ago)"
    )
    # Seen running at one look, stopped at the next one an interval later: the same.
    busy = watched(interval=1.0, timeout=3.0)
    assert busy.verdict(9.0, table().get) is None
    assert busy.verdict(10.0, table(supervisor="T").get) is None
    assert busy.verdict(13.0, table(supervisor="T").get) == (
        "the supervisor (pid 30) has been stopped for 3.0s to 4.0s"
        " (found stopped 3.0s ago, last seen running 4.0s ago)"
    )


def test_pings_go_out_one_at_a_time_every_interval() -> None:
    dog = watched(interval=1.0, timeout=3.0)
    assert dog.ping_due(0.0)
    dog.ping_sent("ping-1", 0.0)
    assert not dog.ping_due(5.0)  # one outstanding at a time
    assert dog.ping_id == "ping-1"
    dog.answered("something-else", 0.2)
    assert dog.ping_id == "ping-1"
    dog.answered("ping-1", 0.2)
    assert dog.ping_id is None
    assert not dog.ping_due(0.9)
    assert dog.ping_due(1.0)  # an interval after the last went out
    dog.ping_sent("ping-2", 1.0)
    dog.answered("ping-2", 2.5)  # read late (a SLEEP looks every interval): the next is due at once
    assert dog.ping_due(2.5)


def test_the_next_check_is_the_earliest_moment_a_verdict_or_a_ping_can_change() -> None:
    dog = watched(interval=1.0, timeout=3.0)
    assert dog.next_check(0.0) == 0.0  # a ping is due now
    dog.ping_sent("ping-1", 0.0)
    assert dog.next_check(0.5) == 1.5  # at most an interval apart, to see a process stop
    dog.answered("ping-1", 0.5)
    assert dog.next_check(0.5) == 1.0  # the next ping
    dog.ping_sent("ping-2", 1.0)
    dog.verdict(1.2, table(admin="T").get)  # the admin stopped
    assert dog.next_check(1.2) == 2.2
    assert dog.next_check(3.9) == 4.0  # the ping's deadline (sent at 1.0, timeout 3)
    assert dog.verdict(4.0, table(admin="T").get) is not None


def test_no_ping_is_due_while_the_supervisor_is_stopped_but_its_deadline_is() -> None:
    dog = watched(interval=1.0, timeout=3.0)
    assert dog.verdict(0.0, table(supervisor="T").get) is None
    assert not dog.ping_due(0.5)  # it could not answer
    assert dog.next_check(0.5) == 1.5  # not "now": an idle wait must not spin while it is stopped
    assert dog.next_check(2.6) == 3.0  # the stop's deadline
    assert dog.verdict(3.0, table(supervisor="T").get) is not None


def test_an_unanswered_ping_is_lost_after_the_timeout() -> None:
    dog = watched(interval=1.0, timeout=3.0)
    dog.ping_sent("ping-1", 5.0)
    assert dog.verdict(7.9, table().get) is None
    verdict = dog.verdict(8.0, table().get)
    assert verdict == "the supervisor (pid 30) did not answer a liveness check within 3s"


def test_no_ping_before_the_supervisor_is_known_and_reset_forgets_everything() -> None:
    dog = Watchdog(1.0, 3.0)
    assert not dog.ping_due(0.0)
    dog.watch("supervisor", SUPERVISOR)
    dog.ping_sent("ping-1", 0.0)
    dog.reset()
    assert dog.watched == {} and dog.ping_id is None
    assert dog.verdict(100.0, {}.get) is None


def test_a_cancel_waits_on_a_stopped_supervisor_for_its_own_deadline_not_the_timeout() -> None:
    dog = watched(timeout=30.0)
    assert dog.verdict(10.0, table(supervisor="T").get) is None  # stopped before the cancel
    dog.hurry("supervisor", 12.0, 1.0, "a cancel")
    assert dog.next_check(12.0) == 13.0
    assert dog.verdict(12.9, table(supervisor="T").get) is None  # the cancel's deadline is its own
    assert dog.verdict(13.0, table(supervisor="T").get) == (
        "the supervisor (pid 30) has been stopped for at least 3.0s and did not take a cancel within 1s"
    )


def test_a_hurry_counts_from_the_stop_when_it_comes_later_and_ends_with_calm() -> None:
    dog = watched(timeout=30.0)
    dog.hurry("supervisor", 0.0, 1.0, "a cancel")
    assert dog.verdict(5.0, table().get) is None  # running: nothing to hurry
    assert dog.verdict(6.0, table(supervisor="T").get) is None  # stopped while the cancel waits
    assert dog.verdict(7.0, table(supervisor="T").get) is not None
    dog.calm()
    assert dog.verdict(8.0, table(supervisor="T").get) is None  # answered: the timeout again
    assert dog.verdict(36.0, table(supervisor="T").get) == (
        "the supervisor (pid 30) has been stopped for 30.0s to 31.0s"
        " (found stopped 30.0s ago, last seen running 31.0s ago)"
    )


def test_a_hurry_on_the_supervisor_leaves_the_others_their_timeout() -> None:
    dog = watched(timeout=30.0)
    dog.hurry("supervisor", 0.0, 1.0, "a cancel")
    assert dog.verdict(0.0, table(admin="T").get) is None
    assert dog.verdict(29.0, table(admin="T").get) is None
    dog.reset()
    assert dog.verdict(31.0, {}.get) is None and dog.next_check(31.0) == 32.0


@given(
    stopped_at=st.floats(0, 50),
    hurried_at=st.floats(0, 50),
    patience=st.floats(0.1, 10),
    timeout=st.floats(0.1, 60),
    step=st.floats(0.01, 2),
)
def test_a_stopped_supervisor_is_lost_at_the_first_look_past_the_earlier_of_its_deadlines(
    stopped_at: float, hurried_at: float, patience: float, timeout: float, step: float
) -> None:
    dog = watched(interval=1.0, timeout=timeout)
    dog.hurry("supervisor", hurried_at, patience, "a cancel")
    deadline = min(stopped_at + timeout, max(stopped_at, hurried_at) + patience)
    now = stopped_at
    while (verdict := dog.verdict(now, table(supervisor="T").get)) is None:
        assert now < deadline
        assert dog.next_check(now) <= max(now, deadline)  # an idle wait wakes in time
        now += step
    assert deadline <= now < deadline + step + 1e-9, verdict


# ----- idle mode: pings every idle_interval during a SLEEP ----------------------------------------


def idle_dog(interval: float = 1.0, timeout: float = 3.0, idle_interval: float = 5.0) -> Watchdog:
    dog = Watchdog(interval, timeout, idle_interval)
    dog.watch("supervisor", SUPERVISOR)
    return dog


def test_idle_pings_go_out_every_idle_interval() -> None:
    dog = idle_dog()
    dog.idle = True
    assert dog.current_interval == 5.0
    assert dog.ping_due(0.0)
    dog.ping_sent("ping-1", 0.0)
    dog.answered("ping-1", 0.001)
    assert not dog.ping_due(4.9)
    assert dog.next_check(0.001) == 5.0
    assert dog.ping_due(5.0)


def test_going_busy_brings_the_next_ping_back_to_the_busy_interval() -> None:
    dog = idle_dog()
    dog.idle = True
    dog.ping_sent("ping-1", 10.0)
    dog.answered("ping-1", 10.001)
    assert not dog.ping_due(11.0)
    dog.idle = False
    assert dog.current_interval == 1.0
    assert dog.ping_due(11.0)
    assert dog.next_check(10.5) == 11.0


def test_an_outstanding_ping_is_looked_for_every_busy_interval_even_while_idle() -> None:
    # Its answer is read late in a SLEEP: the unanswered ping's deadline still holds, and the
    # watchdog looks for its answer an ordinary interval later rather than an idle one.
    dog = idle_dog(timeout=3.0)
    dog.idle = True
    dog.ping_sent("ping-1", 0.0)
    assert dog.next_check(0.0) == 1.0
    assert dog.next_check(2.5) == 3.0
    assert dog.verdict(3.0, table().get) is not None


def test_without_an_idle_interval_idle_changes_nothing() -> None:
    dog = Watchdog(1.0, 3.0)
    dog.watch("supervisor", SUPERVISOR)
    dog.idle = True
    assert dog.current_interval == 1.0
    dog.ping_sent("ping-1", 0.0)
    dog.answered("ping-1", 0.001)
    assert dog.next_check(0.001) == 1.0


@given(
    idle_interval=st.floats(0.5, 30.0),
    timeout=st.floats(0.5, 30.0),
    sent=st.floats(0.0, 100.0),
    steps=st.lists(st.tuples(st.booleans(), st.floats(0.0, 10.0)), max_size=8),
)
def test_idle_or_not_a_hang_is_noticed_within_idle_interval_plus_timeout(
    idle_interval: float, timeout: float, sent: float, steps: list[tuple[bool, float]]
) -> None:
    # A supervisor that never answers again, whatever the idle/busy changes: the caller looks at
    # next_check each time and sends a ping when one is due; the verdict comes within the bound.
    dog = idle_dog(timeout=timeout, idle_interval=idle_interval)
    now = sent
    ids = iter(range(10_000))
    for idle, _ in steps:
        dog.idle = idle
    bound = now + max(idle_interval, 1.0) + timeout
    for _ in range(1000):
        if dog.ping_due(now):
            dog.ping_sent(f"ping-{next(ids)}", now)
        if dog.verdict(now, table().get) is not None:
            break
        now = dog.next_check(now)
    assert dog.verdict(now, table().get) is not None
    assert now <= bound + 1e-9
