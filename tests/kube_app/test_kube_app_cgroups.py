"""The application under cgroup (v1) limits, as the kubelet sets them: a CFS CPU quota throttles
/work and its latency rises past what the quota allows; a memory limit below ALLOC_MB is a real OOM
kill at start, and one above it is not."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from app_process import AppProcess
from cgroup_v1 import CgroupV1, available
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.root, pytest.mark.timeout(600)]

MIB = 1 << 20
CFS_PERIOD_US = 100_000
CFS_QUOTA_US = 10_000
"""0.1 CPU: at most 10 ms of CPU in every 100 ms period."""
WORK_MS = 30
REQUESTS = 5
OOM_EXIT_TIMEOUT = 30.0


def work_latencies(app: AppProcess) -> dict[float, float]:
    """The /work 200 histogram: cumulative count by upper bound."""
    buckets = {}
    for family in text_string_to_metric_families(app.get("/metrics").text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_bucket")
                and labels.get("path") == "/work"
                and labels.get("code") == "200"
            ):
                buckets[float(labels["le"])] = sample.value
    return buckets


@pytest.mark.skipif(available("cpu") is not None, reason=str(available("cpu")))
def test_a_cfs_quota_throttles_work_and_raises_its_latency(start_app: Callable[..., AppProcess]) -> None:
    with CgroupV1.made("cpu") as cpu:
        cpu.write("cpu.cfs_period_us", str(CFS_PERIOD_US))
        cpu.write("cpu.cfs_quota_us", str(CFS_QUOTA_US))
        if (cpu.path / "cpu.cfs_burst_us").exists():
            cpu.write("cpu.cfs_burst_us", "0")  # no quota saved up from idle periods
        app = start_app({"WORK_MS": str(WORK_MS)}, cgroups=[cpu.path])
        throttled_before = cpu.stat("cpu.stat")["nr_throttled"]
        for _ in range(REQUESTS):
            assert app.get("/work").status_code == 200
        stat = cpu.stat("cpu.stat")
        assert stat["nr_throttled"] > throttled_before and stat["throttled_time"] > 0
        # 30 ms of CPU at 10 ms per 100 ms period spans at least two period boundaries: no
        # request can finish within 150 ms, however fast the machine.
        buckets = work_latencies(app)
        assert buckets[float("inf")] == REQUESTS
        below = max(bound for bound in buckets if bound < 0.150)
        assert buckets[below] == 0, f"a throttled /work finished under {below} s: {buckets}"
        app.signal(signal.SIGTERM)
        assert app.wait() == 0


def limited_memory(memory: CgroupV1, limit_bytes: int) -> None:
    memory.write("memory.limit_in_bytes", str(limit_bytes))
    if (memory.path / "memory.memsw.limit_in_bytes").exists():
        memory.write("memory.memsw.limit_in_bytes", str(limit_bytes))  # no escape into swap
    memory.write("memory.swappiness", "0")


@pytest.mark.skipif(available("memory") is not None, reason=str(available("memory")))
def test_a_memory_limit_below_alloc_mb_is_an_oom_kill(start_app: Callable[..., AppProcess]) -> None:
    with CgroupV1.made("memory") as memory:
        limited_memory(memory, 48 * MIB)
        app = start_app({"ALLOC_MB": "96"}, wait=False, cgroups=[memory.path])
        assert app.wait(OOM_EXIT_TIMEOUT) == -signal.SIGKILL
        assert memory.stat("memory.oom_control")["oom_kill"] >= 1
        assert memory.stat("memory.oom_control")["under_oom"] == 0


@pytest.mark.skipif(available("memory") is not None, reason=str(available("memory")))
def test_a_memory_limit_above_alloc_mb_holds(start_app: Callable[..., AppProcess]) -> None:
    with CgroupV1.made("memory") as memory:
        limited_memory(memory, 96 * MIB)
        app = start_app({"ALLOC_MB": "48"}, cgroups=[memory.path])
        assert int(memory.read("memory.usage_in_bytes")) >= 48 * MIB
        assert app.get("/readyz").status_code == 200
        app.signal(signal.SIGTERM)
        assert app.wait() == 0
        assert memory.stat("memory.oom_control")["oom_kill"] == 0
