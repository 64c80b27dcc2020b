"""The project's images (scripts/build-image) and its application as plain processes.

- ``image_archives`` (session): ``scripts/build-image --json all`` into the user's cache (built
  once, reused after); ``{name: archive path}``. Without the Go toolchain the tests using it are
  skipped saying why, except under ``CI=true`` where that is a failure (as the kube tests).
- ``app_binary`` / ``pause_binary`` (session): the binaries taken out of those archives, so the
  tests run exactly what a pod would.
- ``start_app``: ``start_app({"WORK_MS": "20"})`` starts the app (tests/support/app_process.py)
  on a free loopback port and waits until it serves; every one is stopped after the test, and
  the test fails if one had to be killed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from app_process import AppProcess
from oci_layout import OciLayout
from project_images import go_or_skip, run_build_image


@pytest.fixture(scope="session")
def image_archives() -> dict[str, Path]:
    go_or_skip()
    done = run_build_image("--json", "all")
    assert done.returncode == 0, f"scripts/build-image failed (exit {done.returncode}):\n{done.stderr}"
    return {name: Path(entry["archive"]) for name, entry in json.loads(done.stdout).items()}


def extract_binary(archive: Path, target: Path) -> Path:
    files = OciLayout.read(archive).layer_files()
    (name, (_, content)), *_ = files.items()
    binary = target / name
    binary.write_bytes(content)
    binary.chmod(0o755)
    return binary


@pytest.fixture(scope="session")
def app_binary(image_archives: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_binary(image_archives["app"], tmp_path_factory.mktemp("app-image"))


@pytest.fixture(scope="session")
def pause_binary(image_archives: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_binary(image_archives["pause"], tmp_path_factory.mktemp("pause-image"))


@pytest.fixture
def start_app(app_binary: Path, tmp_path: Path) -> Iterator[Callable[..., AppProcess]]:
    started: list[AppProcess] = []

    def start(
        env: dict[str, str] | None = None, wait: bool = True, cgroups: Sequence[Path] = ()
    ) -> AppProcess:
        app = AppProcess(app_binary, tmp_path, env, cgroups)
        started.append(app)
        if wait:
            app.wait_serving()
        return app

    yield start
    lingering = [app.pid for app in started if app.process.poll() is None]
    for app in started:
        app.stop()
    assert not lingering or all(app.process.returncode == 0 for app in started), (
        f"apps {lingering} did not exit cleanly on SIGTERM"
    )
