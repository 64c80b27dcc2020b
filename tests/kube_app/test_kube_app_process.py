"""The test application (kube/app) as a plain process: /work costs real CPU, readiness follows
READY, /metrics has the latency histogram by path and code and the Go runtime's settings,
ALLOC_MB and POST /alloc hold real memory, SIGTERM drains in-flight requests and exits 0, and a bad
setting exits 2 naming it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import pytest
import requests
from app_process import AppProcess
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

pytestmark = pytest.mark.timeout(600)  # the session's first build of the images may download modules

StartApp = Callable[..., AppProcess]
MIB = 1 << 20
TICK = 1 / 100
"""/proc's CPU times count in clock ticks (USER_HZ, 100 on Linux)."""
IN_FLIGHT_TIMEOUT = 30.0
EXIT_TIMEOUT = 30.0
UNREADY_TIMEOUT = 30.0


def samples(app: AppProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of /metrics by (name, labels)."""
    response = app.get("/metrics")
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def sample(app: AppProcess, name: str, **labels: str) -> float | None:
    return samples(app).get((name, frozenset(labels.items())))


def test_work_costs_at_least_work_ms_of_cpu_each(start_app: StartApp) -> None:
    app = start_app({"WORK_MS": "20"})
    requests_sent = 25
    before = app.cpu_seconds()
    for _ in range(requests_sent):
        response = app.get("/work")
        assert response.status_code == 200
    used = app.cpu_seconds() - before
    # The process's own CPU clock, not the wall clock: 25 x 20 ms = 0.5 s at least (less one tick of
    # rounding at each end of the measurement).
    assert used >= requests_sent * 0.020 - 2 * TICK, f"{requests_sent} requests used {used:.3f} s of CPU"


def test_work_takes_a_per_request_cost_and_refuses_a_bad_one(start_app: StartApp) -> None:
    app = start_app({"WORK_MS": "0"})
    before = app.cpu_seconds()
    assert app.get("/work", params={"ms": "300"}).status_code == 200
    assert app.cpu_seconds() - before >= 0.300 - 2 * TICK
    refused = app.get("/work", params={"ms": "soon"})
    assert refused.status_code == 400 and 'ms="soon"' in refused.text
    assert app.post("/work").status_code == 405


def test_readiness_follows_ready(start_app: StartApp) -> None:
    unready = start_app({"READY": "false"})
    assert unready.get("/readyz").status_code == 503
    assert unready.get("/healthz").status_code == 200
    ready = start_app({})
    assert ready.get("/readyz").status_code == 200
    assert ready.get("/nowhere").status_code == 404


def test_unready_after_fails_readiness_once_it_has_passed(start_app: StartApp) -> None:
    later = start_app({"UNREADY_AFTER": "1h"})
    assert later.get("/readyz").status_code == 200
    soon = start_app({"UNREADY_AFTER": "300ms"})
    failed = wait_until(
        lambda: (answer := soon.get("/readyz")).status_code == 503 and answer.text,
        UNREADY_TIMEOUT,
        what="/readyz failing after UNREADY_AFTER",
    )
    assert "UNREADY_AFTER=300ms has passed" in failed
    assert soon.get("/healthz").status_code == 200, "alive, only not ready"


def test_exit_after_exits_1_on_its_own(start_app: StartApp) -> None:
    app = start_app({"EXIT_AFTER": "300ms"}, wait=False)
    assert app.wait(EXIT_TIMEOUT) == 1
    lines = app.log_lines()
    assert len(lines) == 2 and "msg=started" in lines[0]
    assert "EXIT_AFTER=300ms" in lines[1], lines


def test_metrics_have_the_latency_histogram_requests_by_code_and_the_runtime(start_app: StartApp) -> None:
    app = start_app({"WORK_MS": "1", "GOGC": "150", "GOMEMLIMIT": "300MiB"})
    for _ in range(3):
        app.get("/work")
    app.get("/nowhere")
    app.post("/work")
    found = samples(app)

    work = {"path": "/work", "code": "200"}
    assert found[("http_request_duration_seconds_count", frozenset(work.items()))] == 3
    assert found[("http_requests_total", frozenset(work.items()))] == 3
    assert found[("http_requests_total", frozenset({"path": "/work", "code": "405"}.items()))] == 1
    assert found[("http_requests_total", frozenset({"path": "other", "code": "404"}.items()))] == 1
    bounds = sorted(
        float(dict(labels)["le"])
        for name, labels in found
        if name == "http_request_duration_seconds_bucket"
        and {"path": "/work", "code": "200"}.items() <= dict(labels).items()
    )
    # Fine enough for a p99 anywhere from a few ms to seconds: no bucket wider than 25 %.
    inside = [bound for bound in bounds if 0.005 <= bound <= 2.0]
    assert len(inside) >= 20 and all(b / a <= 1.25 for a, b in zip(inside, inside[1:], strict=False))
    assert bounds[0] <= 0.005 and 2.0 <= bounds[-2], bounds

    assert found[("go_gc_gogc_percent", frozenset())] == 150
    assert found[("go_gc_gomemlimit_bytes", frozenset())] == 300 * MIB
    assert ("go_sched_gomaxprocs_threads", frozenset()) in found
    assert ("process_cpu_seconds_total", frozenset()) in found
    start_line = app.log_lines()[0]
    assert "msg=started" in start_line and "gogc=150" in start_line
    assert f"gomemlimit={300 * MIB}" in start_line


def test_alloc_mb_and_post_alloc_hold_real_memory(start_app: StartApp) -> None:
    app = start_app({"ALLOC_MB": "64"})
    assert app.rss_bytes() >= 64 * MIB
    assert sample(app, "app_ballast_bytes") == 64 * MIB
    before = app.rss_bytes()
    grown = app.post("/alloc", params={"mb": "32"})
    assert grown.status_code == 200 and grown.json() == {"held_mb": 96}
    assert app.rss_bytes() - before >= 31 * MIB
    assert app.post("/alloc", params={"mb": "-1"}).status_code == 400
    assert app.get("/alloc", params={"mb": "1"}).status_code == 405


def test_sigterm_finishes_the_request_in_flight_then_exits_0(start_app: StartApp) -> None:
    app = start_app({"SHUTDOWN_TIMEOUT": "60s"})
    answers: list[requests.Response] = []
    client = threading.Thread(target=lambda: answers.append(app.get("/work", params={"ms": "500"})))
    client.start()
    try:
        wait_until(
            lambda: sample(app, "http_requests_in_flight", path="/work") == 1,
            IN_FLIGHT_TIMEOUT,
            what="the /work request in flight",
        )
        app.signal(signal.SIGTERM)
        assert app.wait(EXIT_TIMEOUT) == 0
    finally:
        client.join(EXIT_TIMEOUT)
    assert [answer.status_code for answer in answers] == [200]
    lines = app.log_lines()
    assert len(lines) == 2, lines
    assert "msg=started" in lines[0]
    assert "msg=stopped" in lines[1] and "signal=SIGTERM" in lines[1] and "graceful=true" in lines[1]


def test_shutdown_is_bounded_by_shutdown_timeout(start_app: StartApp) -> None:
    app = start_app({"SHUTDOWN_TIMEOUT": "200ms"})
    failures: list[Exception] = []

    def long_request() -> None:
        try:
            app.get("/work", params={"ms": "20000"})
        except requests.RequestException as exc:
            failures.append(exc)

    client = threading.Thread(target=long_request)
    client.start()
    try:
        wait_until(
            lambda: sample(app, "http_requests_in_flight", path="/work") == 1,
            IN_FLIGHT_TIMEOUT,
            what="the /work request in flight",
        )
        app.signal(signal.SIGINT)
        assert app.wait(EXIT_TIMEOUT) == 0
    finally:
        client.join(EXIT_TIMEOUT)
    assert len(failures) == 1, "the cut request's client sees its connection closed"
    assert "graceful=false" in app.log_lines()[-1] and "signal=SIGINT" in app.log_lines()[-1]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("WORK_MS", "fast"),
        ("WORK_MS", "-1"),
        ("ALLOC_MB", "1.5"),
        ("PORT", "http"),
        ("SHUTDOWN_TIMEOUT", "10"),
        ("UNREADY_AFTER", "-1s"),
        ("EXIT_AFTER", "soon"),
    ],
)
def test_a_bad_setting_exits_2_naming_it(start_app: StartApp, variable: str, value: str) -> None:
    app = start_app({variable: value}, wait=False)
    assert app.wait(EXIT_TIMEOUT) == 2
    [line] = app.log_lines()
    assert "invalid configuration" in line and f'{variable}=\\"{value}\\"' in line, line
