"""Shared by every test folder.

- ``no_actor_system_survives`` (autouse): fails any test after which a process of an actor system
  it started in-process is still alive (they are killed first, so one leak does not cascade).
  Tests that start servo processes check those by an environment marker (tests/runner).
- ``run_cli``: the real CLI in-process, stdout and stderr apart.
- ``test_plugins``: the test-only connector package in tests/config/plugins, importable for one test.
- ``tests/support`` holds helpers any test may import (``import browser``).
- ``kube_cluster`` (session) and ``kube_namespace``: the real local Kubernetes cluster for tests
  marked ``kube`` (tests/support/kube_local.py). Without the Go toolchain those tests are
  deselected with one line saying why, except under ``CI=true`` where they fail.
- Hypothesis runs without its wall-clock checks (no per-example deadline, no "too slow" health
  check): these machines are shared, and a property must fail on its assertions, never on how
  long a busy machine took to run an example.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, settings

from servo_actors.actors.linux import processes
from servo_actors.actors.transport import system
from servo_actors.cli import cli

SUPPORT = str(Path(__file__).parent / "support")
PLUGINS = Path(__file__).parent / "config" / "plugins"
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)

import kube_local  # noqa: E402  (tests/support, just put on the path)

settings.register_profile("servo-actors", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("servo-actors")

SURVIVOR_GRACE = 3.0
"""Seconds a stopped system's processes get to disappear before the test is failed."""


@pytest.fixture(autouse=True)
def no_actor_system_survives() -> Iterator[None]:
    before = set(system.sessions_started())
    yield
    started = [sid for sid in system.sessions_started() if sid not in before]
    deadline = time.monotonic() + SURVIVOR_GRACE
    survivors: dict[int, list[int]] = {}
    for sid in started:
        while (alive := processes.session_members(sid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive:
            survivors[sid] = alive
            processes.kill_session(sid)
    if survivors:
        pytest.fail(f"actor-system processes survived the test (session: pids): {survivors}")


def make_runner() -> CliRunner:
    """A CliRunner keeping stdout and stderr apart (click 8.1 needs asking; 8.2+ always does)."""
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


@pytest.fixture
def run_cli() -> Callable[..., Result]:
    """``run_cli(args, env=None)``: the real CLI in-process; exceptions are not swallowed."""

    def run(args: Sequence[str], env: dict[str, str | None] | None = None) -> Result:
        return make_runner().invoke(cli, list(args), env=env, catch_exceptions=False)

    return run


@pytest.fixture
def test_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``sa_test_connectors`` importable (and its entry points installed) for this test only."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    importlib.invalidate_caches()
    yield PLUGINS
    for name in [name for name in sys.modules if name.startswith("sa_test_connectors")]:
        del sys.modules[name]


# --- the real local Kubernetes cluster (marker ``kube``) -------------------------------------

KUBE_NOT_RUN = pytest.StashKey[tuple[int, str]]()
REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
KUBE_LAST_USER = pytest.StashKey[str]()
KUBE_RUNNING = pytest.StashKey[kube_local.LocalCluster]()


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


SECOND_LANE = ("actors", "convention")
"""Folders of tests not marked kube that scripts/test runs in the kube tests' lane (marker
``second_lane``), so that its two lanes on two cores take about as long (a full run's per-folder
times: the others' lane 17.5 min and the kube lane 11 min before; these two folders are 2.5 min)."""


def pytest_itemcollected(item: pytest.Item) -> None:
    tests = Path(__file__).parent
    folder = item.path.relative_to(tests).parts[0] if item.path.is_relative_to(tests) else ""
    if folder in SECOND_LANE and not item.get_closest_marker("kube"):
        item.add_marker("second_lane")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kube_items = [item for item in items if item.get_closest_marker("kube")]
    if not kube_items:
        return
    reason = kube_local.go_missing()
    if reason is not None and not _in_ci():
        # Deselected rather than skipped: one line at the end says why, not one per test.
        config.hook.pytest_deselected(items=kube_items)
        items[:] = [item for item in items if not item.get_closest_marker("kube")]
        config.stash[KUBE_NOT_RUN] = (len(kube_items), reason)
        return
    for item in kube_items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(kube_local.TEST_TIMEOUT))


def pytest_collection_finish(session: pytest.Session) -> None:
    users = [item.nodeid for item in session.items if "kube_cluster" in getattr(item, "fixturenames", ())]
    if users:
        session.config.stash[KUBE_LAST_USER] = users[-1]
    # The cluster's binaries are built here, outside any test's timeout: quick when cached
    # (scripts/test builds them first), 20-40 minutes cold.
    if session.config.option.collectonly or kube_local.go_missing() is not None:
        return
    if any(item.get_closest_marker("kube") for item in session.items) and not kube_local.built():
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                "kube: building the local cluster's binaries first (cold: 20-40 min on 2 cores)"
            )
        kube_local.build()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    # After the last test that uses it, the cluster goes (about 600 MB and 4 % of a core idle),
    # rather than at the end of the session; the fixture's own `down` then finds nothing to stop.
    cluster = item.config.stash.get(KUBE_RUNNING, None)
    if cluster is not None and item.nodeid == item.config.stash.get(KUBE_LAST_USER, None):
        done = cluster.down()
        assert done.returncode == 0, f"scripts/kube-cluster down failed: {done.stderr}"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if KUBE_NOT_RUN in config.stash:
        count, reason = config.stash[KUBE_NOT_RUN]
        terminalreporter.write_line(f"kube: {count} test(s) not run: {reason}; install Go to run them")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    item.stash.setdefault(REPORTS, {})[report.when] = report


def _failed(node: pytest.Item) -> bool:
    return any(report.failed for report in node.stash.get(REPORTS, {}).values())


@pytest.fixture(scope="session")
def kube_cluster(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[kube_local.LocalCluster]:
    """The session's real cluster (2 simulated nodes and one real node, kubelet and containerd:
    tests/kube_real_node); taken down at the end, or when pytest dies."""
    reason = kube_local.go_missing()
    if reason is not None:
        if _in_ci():
            pytest.fail(f"CI=true and {reason}: the real-cluster (kube) tests must run in CI")
        pytest.skip(f"kube: {reason}")
    cluster = kube_local.LocalCluster.up(
        tmp_path_factory.mktemp("kube-cluster"), owner_pid=os.getpid(),
        hpa_downscale_stabilization=kube_local.HPA_DOWNSCALE_STABILIZATION, real_nodes=1,
    )  # fmt: skip
    pytestconfig.stash[KUBE_RUNNING] = cluster
    try:
        yield cluster
    finally:
        del pytestconfig.stash[KUBE_RUNNING]
        done = cluster.down()
        assert done.returncode == 0, f"scripts/kube-cluster down failed: {done.stderr}"


@pytest.fixture(autouse=True)
def kube_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a failed test that used the cluster: the last lines of every component's log."""
    yield
    if "kube_cluster" in request.fixturenames and _failed(request.node):
        print(request.getfixturevalue("kube_cluster").log_tails())


@pytest.fixture
def kube_namespace(request: pytest.FixtureRequest, kube_cluster: kube_local.LocalCluster) -> Iterator[str]:
    """A fresh namespace for one test (deleted after it; its objects and events printed if it failed)."""
    name = kube_cluster.new_namespace(request.node.name)
    yield name
    if _failed(request.node):
        print(kube_cluster.kubectl("get", "all,events", "-o", "wide", "-n", name, check=False).stdout)
    kube_cluster.delete_namespace(name)
