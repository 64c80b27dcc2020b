"""An ADJUST after a rollout left under way, on the real control plane: the connector waits on every
workload it names whose rollout is not done, patched by it or not, and counts the settlement from
when the current pods became Ready (their Ready condition, written by kwok through the API server).

The Deployment has ``minReadySeconds``, so each rollout lasts a few seconds: long enough to kill
the connector's process in it (as the servo does on a cancel) or to ADJUST while one is under way.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from typing import Any

import pytest
from real_app import (
    ROLLOUT_TIMEOUT,
    SIMULATE_ENV,
    App,
    ProgressLog,
    env_of,
    main_container,
    rolled_out,
    web_manifest,
)
from waiting import wait_until

from servo_actors.connectors.base import ConnectorFailure, Control
from servo_actors.connectors.kubernetes.rollout_rules import settlement_left
from servo_actors.durations import parse_duration

pytestmark = pytest.mark.kube

MIN_READY = 2
"""The Deployment's minReadySeconds: a new pod counts as available (and the rollout as done) that
long after it became Ready."""
SETTLEMENT = 4.0
"""Seconds of settlement asked by the ADJUSTs: longer than MIN_READY, so that after an in-flight
rollout some but not all of it is left."""
PATCHED_TIMEOUT = 60.0
"""Seconds for the killed connector to report its patch sent."""
ASKED = {"cpu": 0.75, "GOGC": 150}


def _components(values: dict[str, Any]) -> dict[str, Any]:
    return {"web": {"settings": {name: {"value": value} for name, value in values.items()}}}


def _adjust_reporting(app: App, values: dict[str, Any], reports: Any) -> None:
    """The child: one ADJUST, each progress report put on ``reports``."""
    app.connector().adjust(_components(values), Control(), lambda percent, message="": reports.put(message))


def _adjust_killed_mid_rollout(app: App, values: dict[str, Any]) -> None:
    """An ADJUST in a process of its own, SIGKILLed as soon as it has sent its patch (the servo
    kills the connector's process on a cancel)."""
    context = multiprocessing.get_context("fork")
    reports = context.Queue()
    child = context.Process(target=_adjust_reporting, args=(app, values, reports))
    child.start()
    try:
        while True:
            message = reports.get(timeout=PATCHED_TIMEOUT)
            if message.startswith("patched"):
                break
    except queue.Empty:
        pytest.fail("the ADJUST never reported its patch")
    finally:
        child.kill()
        child.join()
        reports.close()
        reports.join_thread()


def _settling_seconds(progress: ProgressLog) -> list[float]:
    """The seconds left of every ``settling: ... left`` report."""
    return [
        parse_duration(message.removeprefix("settling: ").removesuffix(" left"))
        for _, message in progress.reports
        if message.startswith("settling: ") and message.endswith(" left")
    ]


def test_an_adjust_cancelled_mid_rollout_is_waited_for_by_the_same_adjust_again(
    app: App, progress: ProgressLog
) -> None:
    app.create(web_manifest(replicas=1, minReadySeconds=MIN_READY))
    _adjust_killed_mid_rollout(app, ASKED)
    assert not rolled_out(app.deployment()), "the rollout finished before the cancel: nothing in flight"

    app.connector().adjust(_components(ASKED), Control(settlement=SETTLEMENT), progress)

    after = app.deployment()
    assert rolled_out(after), after["status"]
    assert "successfully rolled out" in app.rollout_status(timeout=1)
    messages = [message for _, message in progress.reports]
    assert messages[0] == "nothing to change", messages
    assert "web: already at the requested settings, a rollout under way: waiting for it" in messages
    assert any(m.startswith("web: ") and "replica" in m for m in messages), messages  # the wait's own
    assert messages[-1] == "adjusted", messages
    # Only the remainder: the new pod was Ready MIN_READY seconds before the rollout was done.
    assert all(left <= SETTLEMENT - MIN_READY + 1 for left in _settling_seconds(progress)), messages
    # and the settlement was kept: the pods had been Ready that long when the ADJUST returned.
    assert settlement_left(app.pods(), SETTLEMENT, time.time()) == 0.0


def test_an_adjust_to_the_values_an_outside_actor_just_set_waits_for_its_rollout(
    app: App, progress: ProgressLog
) -> None:
    app.create(web_manifest(replicas=1, minReadySeconds=MIN_READY))
    app.cluster.kubectl("set", "env", "deployment/web", "-c", "main", "GOGC=150", "-n", app.namespace)

    app.connector().adjust(_components({"GOGC": 150}), Control(), progress)

    after = app.deployment()
    assert rolled_out(after), after["status"]
    messages = [message for _, message in progress.reports]
    assert messages[0] == "nothing to change", messages
    assert "web: already at the requested settings, a rollout under way: waiting for it" in messages


def test_a_no_op_adjust_of_a_long_settled_deployment_returns_at_once(app: App, progress: ProgressLog) -> None:
    app.create(web_manifest(replicas=1))
    connector = app.connector()
    connector.adjust(_components(ASKED), Control(), ProgressLog())
    settlement = 2.0
    wait_until(
        lambda: settlement_left(app.pods(), settlement, time.time()) == 0.0,
        ROLLOUT_TIMEOUT,
        interval=0.25,
        what=f"web's pods Ready for {settlement:.0f} s",
    )

    connector.adjust(_components(ASKED), Control(settlement=settlement), progress)

    assert progress.reports == [(5.0, "nothing to change"), (100, "adjusted")]


def test_a_failing_rollout_left_by_a_cancelled_adjust_is_left_as_it_is_by_rollback(
    app: App, progress: ProgressLog
) -> None:
    """The next ADJUST to the same values waits on the rollout under way and fails on it; with
    ``on_failure: rollback`` it has nothing of its own to put back (it patched nothing, and what
    the cancelled ADJUST replaced died with it), so the Deployment is left as it is, and said so."""
    app.create(web_manifest(replicas=1))
    crash = {SIMULATE_ENV: "crash-loop"}
    _adjust_killed_mid_rollout(app, crash)

    with pytest.raises(ConnectorFailure) as caught:
        app.connector(on_failure="rollback").adjust(_components(crash), Control(), progress)

    failure = caught.value
    assert (failure.status, failure.reason) == ("rejected", "start-failed"), failure.message
    assert failure.message.endswith(
        "Deployment web was already at the requested settings before this ADJUST, which did not "
        "patch it, so it has nothing of this ADJUST's to roll back: it was left as it is."
    ), failure.message
    assert env_of(main_container(app.deployment()))[SIMULATE_ENV] == "crash-loop"
    assert [message for _, message in progress.reports][:2] == [
        "nothing to change",
        "web: already at the requested settings, a rollout under way: waiting for it",
    ]
