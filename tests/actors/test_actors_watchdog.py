"""The watchdog's rules, with the clock and /proc passed in (no sleeping, no processes)."""

from __future__ import annotations

from servo_actors.actors.processes import ProcStat
from servo_actors.actors.watchdog import Watchdog

SUPERVISOR, ADMIN, LOGGER = 30, 20, 21


def stat(pid: int, state: str = "S") -> ProcStat:
    return ProcStat(pid, state, 1, pid, 20, 100)


def watched(interval: float = 1.0, timeout: float = 3.0) -> Watchdog:
    dog = Watchdog(interval, timeout)
    dog.watch("supervisor", SUPERVISOR)
    dog.watch("Thespian admin", ADMIN)
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


def test_a_stopped_process_is_lost_after_the_timeout_and_forgiven_if_it_continues() -> None:
    dog = watched(timeout=3.0)
    assert dog.verdict(10.0, table(supervisor="T").get) is None
    assert dog.stopped("supervisor")
    assert dog.verdict(12.9, table(supervisor="T").get) is None
    assert dog.verdict(13.0, table(supervisor="T").get) == "the supervisor (pid 30) has been stopped for 3.0s"
    again = watched(timeout=3.0)
    again.verdict(10.0, table(admin="t").get)
    assert again.verdict(12.0, table().get) is None  # SIGCONT: the clock starts over
    assert not again.stopped("Thespian admin")
    assert again.verdict(14.0, table(admin="T").get) is None
    assert again.verdict(16.9, table(admin="T").get) is None


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
