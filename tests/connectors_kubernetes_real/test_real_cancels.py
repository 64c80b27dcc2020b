"""The scenario this project exists for, on the real control plane: a Deployment with an HPA under
optimization by the kubernetes connector through `servo-actors run` (a real subprocess) and the
embedded optimizer, with cancels pressed at random moments.

At least ``CANCELS`` cancels meet a progress post (while the connector reads and patches, waits for
the rollout by the real Deployment controller, settles, or measures); others come too late and
meet the result, or the finished command. Every trial is checked (tests/support/kube_real.py,
``run_cancel_storm``): a cancel met at a progress post is answered ``cancelled``; every cancel that
met the command kills the connector's process and a fresh one answers the next DESCRIBE, which
reads what the cluster really holds (compared with the objects read as the admin); the servo never
stops. At the end an ADJUST that is not cancelled leaves the Deployment and the HPA with its
values (and the real HPA controller keeps the replicas within its new bounds), and SIGTERM ends
the servo with GOODBYE, one HELLO before it.

The seed is printed; ``SERVO_KUBE_CANCEL_SEED`` replays a run, ``SERVO_KUBE_CANCELS`` sets the count.
"""

from __future__ import annotations

import os
import random

import pytest
from kube_real import (
    COMMAND_TIMEOUT,
    NAME,
    CommandQueue,
    ServoRun,
    adjust_command,
    cluster_settings,
    connector,
    create_app,
    deployment_path,
    hpa_path,
    random_values,
    run_cancel_storm,
    same_settings,
    servo_config,
)
from waiting import wait_until

pytestmark = pytest.mark.kube

CANCELS = int(os.environ.get("SERVO_KUBE_CANCELS", "30"))
SEED = int(os.environ.get("SERVO_KUBE_CANCEL_SEED", str(random.SystemRandom().randrange(1 << 32))))
MAX_TRIALS = 3 * CANCELS
"""Trials whose cancel came too late do not count; this bounds them."""
PROGRESS_INTERVAL = "30ms"
"""A cancel is answered to the next progress post: this often, so that one pressed as the command
is sent meets the connector still reading and patching."""
REPLICAS_TIMEOUT = 60.0
"""Seconds for the real HPA controller (sync every 5 s) to bring the replicas within new bounds."""


@pytest.mark.timeout(900)
def test_cancels_at_random_moments_of_an_hpa_optimization(kube_cluster, kube_namespace, tmp_path) -> None:
    print(f"seed {SEED} (replay with SERVO_KUBE_CANCEL_SEED={SEED})")
    rng = random.Random(SEED)
    create_app(kube_cluster, kube_namespace)
    optimizer = CommandQueue.serve()
    config = servo_config(
        optimizer.server, connector(kube_cluster, kube_namespace), progress_interval=PROGRESS_INTERVAL
    )
    servo = ServoRun.start(tmp_path / "servo", config)
    optimizer.context = servo.log
    try:
        first = optimizer.run({"cmd": "DESCRIBE", "param": {}})
        assert first.status == "ok", f"{first.result}\n{servo.log()}"

        storm = run_cancel_storm(
            kube_cluster, kube_namespace, optimizer, servo, rng, SEED, CANCELS, MAX_TRIALS
        )
        print(storm.summary())
        assert len(storm.answered_to("progress")) >= CANCELS, storm.summary()
        phases = storm.phases()
        assert phases.get("rollout wait", 0) > 0, storm.summary()
        assert phases.get("measurement", 0) > 0, storm.summary()
        assert phases.get("patching", 0) + phases.get("patched", 0) > 0, storm.summary()

        last = random_values(rng)
        final = optimizer.run(adjust_command(last), COMMAND_TIMEOUT)
        assert final.status == "ok", f"{final.result}\n{servo.log()}"
        holds = cluster_settings(kube_cluster, kube_namespace)
        assert same_settings(holds, last), f"the last adjustment was {last}, the cluster holds {holds}"

        def replicas_within_bounds() -> bool:
            replicas = kube_cluster.get(deployment_path(kube_namespace))["spec"]["replicas"]
            return last["min_replicas"] <= replicas <= last["max_replicas"]

        wait_until(
            replicas_within_bounds,
            REPLICAS_TIMEOUT,
            interval=0.5,
            what=f"Deployment {NAME}'s replicas within the HPA's {last['min_replicas']}-{last['max_replicas']}",
        )
        hpa = kube_cluster.get(hpa_path(kube_namespace))
        replicas = kube_cluster.get(deployment_path(kube_namespace))["spec"]["replicas"]
        print(
            f"the end: {holds}; replicas {replicas} (HPA {hpa['spec']['minReplicas']}-{hpa['spec']['maxReplicas']})"
        )
        assert servo.alive(), servo.log()
    finally:
        code = servo.stop()
        optimizer.stop()
    assert code == 0, servo.log()
    history = optimizer.server.state()["history"]
    events = [entry["event"] for entry in history if entry.get("event")]
    assert events[0] == "HELLO" and events.count("HELLO") == 1, events[:5]
    assert events[-1] == "GOODBYE" and events.count("GOODBYE") == 1, events[-5:]
