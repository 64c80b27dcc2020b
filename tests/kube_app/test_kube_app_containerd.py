"""containerd imports the archives of scripts/build-image as the real node does
(`ctr -n k8s.io images import ARCHIVE`): each image under its reference, with the manifest digest
the archive names, complete and unpacked into overlayfs.

containerd and ctr come from the local cluster's build (scripts/kube-cluster build, which builds
them for the real node), or from the folder in $SERVO_TEST_CONTAINERD_BIN; without them the test is
skipped saying so. It runs its own containerd as root on a private socket and root folder (no CRI
plugin), stopped by PID afterwards."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import kube_local
import pytest
from project_images import run_build_image
from waiting import wait_until

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (containerd's overlayfs snapshots)"),
    pytest.mark.timeout(600),
]

CONTAINERD_READY_TIMEOUT = 60.0
CTR_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0
KILL_TIMEOUT = 5.0
CHECK_TIMEOUT = 600.0
NAMESPACE = "k8s.io"
DISABLED_PLUGINS = [
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.images",
    "io.containerd.cri.v1.runtime",
]
"""Only the content store, the image service and the snapshotter are needed to import."""


def containerd_bin() -> Path | None:
    chosen = os.environ.get("SERVO_TEST_CONTAINERD_BIN")
    if chosen:
        return Path(chosen)
    if kube_local.go_missing() is not None:
        return None
    checked = kube_local.run_script(["build", "--check"], CHECK_TIMEOUT)
    if checked.returncode != 0:
        return None
    return Path(checked.stdout.strip().splitlines()[-1])


@pytest.fixture
def containerd() -> Iterator[tuple[Path, str]]:
    """``(the ctr binary, the socket)`` of a containerd of our own."""
    found = containerd_bin()
    if found is None or not (found / "containerd").is_file() or not (found / "ctr").is_file():
        pytest.skip(
            "containerd and ctr are not built (scripts/kube-cluster build, or set SERVO_TEST_CONTAINERD_BIN)"
        )
    home = Path(tempfile.mkdtemp(prefix="sa-ctrd-"))  # short: a unix socket path has 107 bytes at most
    socket = home / "c.sock"
    config = home / "config.toml"
    config.write_text(
        "version = 3\n"
        f'root = "{home / "root"}"\n'
        f'state = "{home / "state"}"\n'
        f"disabled_plugins = {json.dumps(DISABLED_PLUGINS)}\n"
        f'[grpc]\n  address = "{socket}"\n'
        f'[ttrpc]\n  address = "{socket}.ttrpc"\n'
    )
    log = (home / "containerd.log").open("wb")
    process = subprocess.Popen(
        [str(found / "containerd"), "--config", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    ctr = found / "ctr"
    try:

        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(
                    f"containerd exited with {process.returncode}: {(home / 'containerd.log').read_text()}"
                )
            return socket.exists() and run_ctr(ctr, str(socket), "version").returncode == 0

        wait_until(answers, CONTAINERD_READY_TIMEOUT, interval=0.2, what="containerd answering")
        yield ctr, str(socket)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(KILL_TIMEOUT)
        log.close()
        mounted = [line for line in Path("/proc/mounts").read_text().splitlines() if str(home) in line]
        assert not mounted, f"containerd left mounts behind: {mounted}"
        shutil.rmtree(home)


def run_ctr(ctr: Path, socket: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ctr), "--address", socket, "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=CTR_TIMEOUT,
    )


def test_ctr_imports_each_archive_under_its_reference(containerd: tuple[Path, str]) -> None:
    ctr, socket = containerd
    built = run_build_image("--json", "all")
    assert built.returncode == 0, built.stderr
    images = json.loads(built.stdout)
    for entry in images.values():
        imported = run_ctr(ctr, socket, "images", "import", entry["archive"])
        assert imported.returncode == 0, imported.stderr

    listed = run_ctr(ctr, socket, "images", "ls")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    for entry in images.values():
        assert entry["ref"] in rows, listed.stdout
        assert entry["manifest_digest"] in rows[entry["ref"]], listed.stdout

    checked = run_ctr(ctr, socket, "images", "check")
    assert checked.returncode == 0, checked.stderr
    for line in checked.stdout.splitlines()[1:]:
        fields = line.split()
        assert fields[0] in {entry["ref"] for entry in images.values()}
        assert "complete" in fields and fields[-1] == "true", f"not complete and unpacked: {line}"
