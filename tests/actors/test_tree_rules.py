"""The supervision tree's rules (``actors/rules/tree.py``) on a fake clock: one_for_one over the
applications at the top, restart intensity and backoff per application, the root's own intensity,
and a new configuration touching only the applications it changes (issue 36)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servo_actors.actors.rules.tree import (
    AppLost,
    AppPolicy,
    AppState,
    AppStopped,
    AppUp,
    GiveUp,
    GiveUpAll,
    KillApp,
    Reconfigured,
    RootLost,
    StartApp,
    StopAll,
    StopApp,
    TreeSupervision,
    TreeTick,
)

WEB, DB, CI = "acme.com/web", "acme.com/db", "acme.com/ci"
POLICY = AppPolicy(max_restarts=2, period=60.0, backoff_min=1.0, backoff_max=8.0, jitter=0.0)


def tree(*apps: str, **kwargs: object) -> TreeSupervision:
    rules = TreeSupervision({app: POLICY for app in apps}, rng=random.Random(1), **kwargs)  # type: ignore[arg-type]
    assert rules.start() == [StartApp(app) for app in apps]
    for app in apps:
        rules.handle(AppUp(app), 0.0)
    return rules


def named(effects: list[object]) -> set[str]:
    return {effect.app for effect in effects if hasattr(effect, "app")}  # type: ignore[attr-defined]


def test_everything_starts_in_order_and_runs_once_up() -> None:
    rules = TreeSupervision({WEB: POLICY, DB: POLICY})
    assert rules.start() == [StartApp(WEB), StartApp(DB)]
    assert rules.states == {WEB: AppState.STARTING, DB: AppState.STARTING}
    rules.handle(AppUp(DB), 0.1)
    assert rules.states == {WEB: AppState.STARTING, DB: AppState.RUNNING}


def test_a_lost_application_supervisor_restarts_that_subtree_only() -> None:
    rules = tree(WEB, DB)
    assert rules.handle(AppLost(WEB, "supervisor died"), 10.0) == [KillApp(WEB), StartApp(WEB)]
    assert rules.state(DB) is AppState.RUNNING and rules.restarts(DB) == 0
    assert rules.state(WEB) is AppState.STARTING and rules.restarts(WEB) == 1


def test_a_second_loss_in_a_streak_waits_its_backoff() -> None:
    rules = tree(WEB, DB)
    rules.handle(AppLost(WEB, "died"), 10.0)
    rules.handle(AppUp(WEB), 10.1)
    assert rules.handle(AppLost(WEB, "died"), 11.0) == [KillApp(WEB)]
    assert rules.state(WEB) is AppState.RESTARTING and rules.next_wakeup() == pytest.approx(12.0)
    assert rules.handle(TreeTick(), 11.9) == []
    assert rules.handle(TreeTick(), 12.0) == [StartApp(WEB)]
    assert rules.next_wakeup() is None


def test_a_loss_noticed_twice_is_handled_once() -> None:
    rules = tree(WEB)
    rules.handle(AppLost(WEB, "died"), 10.0)
    rules.handle(AppUp(WEB), 10.1)
    rules.handle(AppLost(WEB, "died"), 11.0)
    assert rules.handle(AppLost(WEB, "died again"), 11.1) == []


def test_past_its_intensity_an_application_gives_up_and_the_others_go_on() -> None:
    rules = tree(WEB, DB)
    now = 0.0
    for _ in range(POLICY.max_restarts):
        now += 1.0
        rules.handle(AppLost(WEB, "died"), now)
        rules.handle(TreeTick(), now + POLICY.backoff_max)
        rules.handle(AppUp(WEB), now)
    effects = rules.handle(AppLost(WEB, "died"), now + 1.0)
    assert effects[0] == KillApp(WEB) and isinstance(effects[1], GiveUp) and effects[1].app == WEB
    assert "more than 2 restarts within 60s" in effects[1].message
    assert rules.state(WEB) is AppState.FAILED and rules.state(DB) is AppState.RUNNING
    # DB keeps its own budget, untouched by WEB's.
    assert rules.handle(AppLost(DB, "died"), now + 2.0) == [KillApp(DB), StartApp(DB)]
    # A failed application stays down: no tick, no loss brings it back.
    assert rules.handle(TreeTick(), now + 1000.0) == []
    assert rules.handle(AppLost(WEB, "late notice"), now + 1000.0) == []


def test_losses_spread_over_more_than_the_period_never_give_up() -> None:
    rules = tree(WEB)
    for index in range(10):
        now = index * (POLICY.period + 1.0)
        effects = rules.handle(AppLost(WEB, "died"), now)
        assert not any(isinstance(effect, GiveUp) for effect in effects)
        rules.handle(TreeTick(), now + POLICY.backoff_max)
        rules.handle(AppUp(WEB), now + POLICY.backoff_max)


def test_the_root_lost_restarts_the_whole_tree_but_not_a_failed_application() -> None:
    rules = tree(WEB, DB, CI)
    for now in (1.0, 2.0, 3.0):
        rules.handle(AppLost(CI, "died"), now)
        rules.handle(TreeTick(), now + POLICY.backoff_max)
        rules.handle(AppUp(CI), now + POLICY.backoff_max)
    assert rules.state(CI) is AppState.FAILED
    effects = rules.handle(RootLost("admin died"), 20.0)
    assert effects == [StopAll(), StartApp(WEB), StartApp(DB)]
    assert rules.states == {WEB: AppState.STARTING, DB: AppState.STARTING, CI: AppState.FAILED}


def test_the_root_past_its_intensity_gives_up_everything_once() -> None:
    rules = tree(WEB, DB, root_max_restarts=1, root_period=60.0)
    assert rules.handle(RootLost("admin died"), 1.0)[0] == StopAll()
    effects = rules.handle(RootLost("admin died"), 2.0)
    assert effects[0] == StopAll() and isinstance(effects[1], GiveUpAll)
    assert rules.handle(AppLost(WEB, "died"), 3.0) == []
    assert rules.handle(RootLost("again"), 4.0) == []


def test_reconfigure_adds_removes_and_restarts_only_what_changed() -> None:
    rules = tree(WEB, DB, CI)
    changed = AppPolicy(
        max_restarts=2, period=60.0, backoff_min=1.0, backoff_max=8.0, jitter=0.0, config="v2"
    )
    new = "acme.com/new"
    effects = rules.handle(Reconfigured({WEB: POLICY, DB: changed, new: POLICY}), 5.0)
    assert effects == [StopApp(CI, goodbye="shutdown"), StopApp(DB, goodbye=None), StartApp(new)]
    assert rules.state(WEB) is AppState.RUNNING and rules.restarts(WEB) == 0
    assert rules.handle(AppStopped(CI), 5.1) == [] and rules.state(CI) is None
    assert rules.handle(AppStopped(DB), 5.2) == [StartApp(DB)]
    assert rules.state(DB) is AppState.STARTING


def test_reconfigure_gives_a_failed_application_a_fresh_chance_only_when_it_changed() -> None:
    rules = tree(WEB, DB)
    for now in (1.0, 2.0, 3.0):
        rules.handle(AppLost(WEB, "died"), now)
        rules.handle(TreeTick(), now + POLICY.backoff_max)
    assert rules.state(WEB) is AppState.FAILED
    assert rules.handle(Reconfigured({WEB: POLICY, DB: POLICY}), 10.0) == []
    fixed = AppPolicy(config="fixed")
    assert rules.handle(Reconfigured({WEB: fixed, DB: POLICY}), 11.0) == [StartApp(WEB)]
    assert rules.state(WEB) is AppState.STARTING


def test_a_loss_while_stopping_finishes_the_stop_with_a_kill() -> None:
    rules = tree(WEB, DB)
    rules.handle(Reconfigured({DB: POLICY}), 1.0)
    assert rules.handle(AppLost(WEB, "died"), 1.1) == [KillApp(WEB)]
    assert rules.handle(AppStopped(WEB), 1.2) == [] and rules.state(WEB) is None


EVENTS = st.one_of(
    st.builds(AppLost, st.sampled_from([WEB, DB, CI]), st.just("died")),
    st.builds(AppUp, st.sampled_from([WEB, DB, CI])),
    st.builds(AppStopped, st.sampled_from([WEB, DB, CI])),
    st.just(TreeTick()),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(EVENTS, st.floats(min_value=0.0, max_value=5.0)), max_size=40))
def test_an_applications_event_never_names_another_application(steps) -> None:
    """one_for_one: whatever happens to one application (its losses, answers, stops, in any order
    and at any pace), no effect names another one, except the ticks that restart the ones due."""
    rules = tree(WEB, DB, CI)
    now = 0.0
    for event, pause in steps:
        now += pause
        effects = rules.handle(event, now)
        if isinstance(event, TreeTick):
            assert all(isinstance(effect, StartApp) for effect in effects)
        else:
            assert named(effects) <= {event.app}
        assert not any(isinstance(effect, (StopAll, GiveUpAll)) for effect in effects)


def test_a_streak_of_losses_restarts_after_growing_gaps_up_to_the_maximum() -> None:
    """What the running servo waits between one application's restarts (``runner/app_restarts.py``):
    at once, then backoff_min doubling up to backoff_max, while another application restarts at once."""
    policy = AppPolicy(max_restarts=10, period=600.0, backoff_min=1.0, backoff_max=6.0, jitter=0.0)
    rules = TreeSupervision({WEB: policy, DB: policy}, rng=random.Random(1))
    rules.start()
    now, gaps = 0.0, []
    for _ in range(6):
        now += 0.5
        effects = rules.handle(AppLost(WEB, "died"), now)
        if StartApp(WEB) in effects:
            gaps.append(0.0)
        else:
            due = rules.next_wakeup()
            assert due is not None
            if rules.restarts(DB) == 0:  # its own first loss restarts at once, WEB waiting or not
                assert rules.handle(AppLost(DB, "died"), now) == [KillApp(DB), StartApp(DB)]
            assert rules.handle(TreeTick(), due - 0.01) == []
            assert rules.handle(TreeTick(), due) == [StartApp(WEB)]
            gaps.append(due - now)
            now = due
            rules.handle(AppUp(DB), now)
        rules.handle(AppUp(WEB), now)
    assert gaps == pytest.approx([0.0, 1.0, 2.0, 4.0, 6.0, 6.0])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(EVENTS, st.floats(min_value=0.0, max_value=5.0)), max_size=40),
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=0, max_value=2**32),
)
def test_every_restart_waits_its_backoff_and_no_application_waits_on_another(steps, jitter, seed) -> None:
    """Any interleaving of three applications' losses, answers and stops, at any pace and jitter:
    a restart that waits is due within [backoff_min * (1 - jitter), backoff_max] of its loss and
    happens on the first tick at or after that time; a tick leaves no application past its due
    time waiting (one application's backoff never holds another's restart)."""
    policy = AppPolicy(max_restarts=3, period=60.0, backoff_min=1.0, backoff_max=8.0, jitter=jitter)
    rules = TreeSupervision({app: policy for app in (WEB, DB, CI)}, rng=random.Random(seed))
    rules.start()
    now = 0.0
    for event, pause in steps:
        now += pause
        before = rules.next_wakeup()
        effects = rules.handle(event, now)
        if isinstance(event, AppLost) and rules.state(event.app) is AppState.RESTARTING:
            due = rules.next_wakeup()
            assert due is not None
            if before is None or due < before:
                assert 1.0 * (1 - jitter) - 1e-9 <= due - now <= 8.0 + 1e-9
        if isinstance(event, TreeTick):
            assert all(isinstance(effect, StartApp) for effect in effects)
            due = rules.next_wakeup()
            assert due is None or due > now, "an application left waiting past its backoff"
