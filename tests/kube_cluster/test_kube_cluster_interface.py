"""scripts/kube-cluster's interface: status, up (last line, reuse), down (nothing left), loopback only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import kube_local
import pytest
from kube_local import LocalCluster
from waiting import wait_until

pytestmark = pytest.mark.kube

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "metrics-server")
REAL_NODE_COMPONENTS = ("containerd-real-node-0", "kubelet-real-node-0")
"""The session cluster's real node (tests/conftest.py)."""
LOOPBACK_V4 = "0100007F"
"""127.0.0.1 as /proc/net/tcp writes it (little-endian hex)."""


def proc_net_v4(address: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it."""
    return socket.inet_aton(address)[::-1].hex().upper()


TCP_LISTEN = "0A"
KILLED_GONE_TIMEOUT = 10.0
"""Seconds for a SIGKILLed component to be reaped (by init: `up` has exited)."""
OWNER_GONE_TIMEOUT = 120.0
"""Seconds from the owner's death until the cluster is gone (the watcher looks every 2 s; the
components get 15 s each after SIGTERM, and usually need well under 1 s)."""


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def bound_sockets(pid: int) -> list[tuple[str, str]]:
    """``(table, local address)`` of every socket of ``pid`` that could accept from elsewhere:
    TCP sockets in LISTEN, unconnected UDP sockets."""
    inodes = socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if table.startswith("tcp"):
                accepting = state == TCP_LISTEN
            else:
                accepting = int(remote.rsplit(":", 1)[1], 16) == 0
            if inode in inodes and accepting:
                found.append((table, local))
    return found


def test_status_has_one_running_line_per_component(kube_cluster: LocalCluster) -> None:
    done = kube_cluster.status()
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == [*COMPONENTS, *REAL_NODE_COMPONENTS]
    assert all(line.split()[1] == "running" for line in lines), lines


def test_server_reports_the_pinned_version(kube_cluster: LocalCluster) -> None:
    pinned = dict(
        line.split("=", 1) for line in (kube_local.ROOT / "kube" / "versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    assert kube_cluster.get("/version")["gitVersion"] == pinned["KUBERNETES_VERSION"]


def test_the_nodes_are_ready_with_their_capacity(kube_cluster: LocalCluster) -> None:
    nodes = kube_cluster.get("/api/v1/nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["kwok-node-0", "kwok-node-1", "real-node-0"]
    nodes = nodes[:2]  # the real node's capacity is the host's: tests/kube_real_node
    for node in nodes:
        assert node["status"]["capacity"] == {"cpu": "4", "memory": "16Gi", "pods": "110"}
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "True"


def test_nothing_listens_off_loopback(kube_cluster: LocalCluster) -> None:
    # kubelet also on its pod bridge's address (the project's own bridge: kubelet refuses a loopback
    # node IP, and the API server and metrics-server reach it there).
    bridges = {f"kubelet-{n['name']}": n["gateway"] for n in kube_cluster.state()["real_nodes"]}
    for name, pid in kube_cluster.pids().items():
        sockets = bound_sockets(pid)
        assert any(table == "tcp" for table, _ in sockets), f"{name} listens on no TCP port"
        allowed = {LOOPBACK_V4} | ({proc_net_v4(bridges[name])} if name in bridges else set())
        elsewhere = [s for s in sockets if s[0] != "tcp" or s[1].split(":")[0] not in allowed]
        assert not elsewhere, f"{name} (pid {pid}) has sockets off 127.0.0.1: {elsewhere}"


def test_up_reuses_a_running_cluster_and_down_leaves_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    first = LocalCluster.up(directory, nodes=1, owner_pid=os.getpid())
    try:
        assert first.kubeconfig == directory / "kubeconfig" and first.kubeconfig.is_file()
        pids = first.pids()
        assert sorted(pids) == sorted(COMPONENTS)
        first_watcher = first.state()["watcher"]["pid"]
        nodes = first.get("/api/v1/nodes")["items"]
        assert [n["metadata"]["name"] for n in nodes] == ["kwok-node-0"]

        again = kube_local.run_script(
            ["up", "--dir", str(directory), "--nodes", "1", "--real-nodes", "0"], kube_local.UP_TIMEOUT
        )
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().splitlines()[-1] == str(first.kubeconfig)
        assert "reusing" in again.stderr
        assert first.pids() == pids

        other_size = kube_local.run_script(
            ["up", "--dir", str(directory), "--nodes", "3", "--real-nodes", "0"], kube_local.UP_TIMEOUT
        )
        assert other_size.returncode == 1
        assert other_size.stderr.count("\n") == 1 and "down" in other_size.stderr, other_size.stderr

        os.kill(pids["kwok"], signal.SIGKILL)  # a broken cluster: status says so, `up` starts it anew
        wait_until(lambda: not alive(pids["kwok"]), KILLED_GONE_TIMEOUT, 0.05, "kwok gone")
        broken = first.status()
        assert broken.returncode == 1
        assert [line.split()[:2] for line in broken.stdout.splitlines() if line.startswith("kwok")] == [
            ["kwok", "stopped"]
        ]
        restarted = LocalCluster.up(directory, nodes=1)
        assert restarted.kubeconfig == first.kubeconfig
        assert not set(restarted.pids().values()) & set(pids.values())
        assert not [name for name, pid in pids.items() if alive(pid)] and not alive(first_watcher)
        pids = restarted.pids()
        watcher = first.state()["watcher"]
    finally:
        done = first.down()
    assert done.returncode == 0, done.stderr
    assert not [name for name, pid in pids.items() if alive(pid)]
    assert watcher is None  # the second `up` was given no owner, and the first watcher was stopped
    assert not directory.exists()
    status = kube_local.run_script(["status", "--dir", str(directory)], kube_local.DOWN_TIMEOUT)
    assert status.returncode == 1 and status.stdout == ""
    assert first.down().returncode == 0  # nothing runs: still exit 0


def test_the_owner_watcher_takes_the_cluster_down_when_its_owner_exits(tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "3600"])
    directory = tmp_path / "owned"
    try:
        cluster = LocalCluster.up(directory, nodes=1, owner_pid=owner.pid)
        pids = cluster.pids()
    finally:
        owner.kill()
        owner.wait(timeout=10)
    deadline = time.monotonic() + OWNER_GONE_TIMEOUT
    while (directory.exists() or any(alive(pid) for pid in pids.values())) and time.monotonic() < deadline:
        time.sleep(0.2)
    leftover = [name for name, pid in pids.items() if alive(pid)]
    if leftover or directory.exists():
        cluster.down()
    assert not leftover and not directory.exists()
