"""The shell blocks of the README and the docs pages that run on one machine, run as written.

Every ``sh`` block of README.md and docs/**/*.md is either run here, run by another test, or named
in ``NOT_RUN_HERE`` with the reason, so a new block cannot go untested unnoticed. Blocks run inside a network namespace of their own
(only its loopback, up): the embedded optimizer's fixed port 8085 is free there whatever else runs
on this machine, and nothing leaves it.

- ``SCRIPT`` (docs/usage.md): the block is one shell script (it starts, cancels and stops things itself), run as a
  reader who followed the quick start would: in a folder with the repository's ``config`` and a
  ``.venv`` (this environment's), with no ``servo-actors`` on PATH until the block activates it.
- ``COMMAND_LIST`` (docs/usage.md): a list of commands on ``config/synthetic.yaml``; each line
  runs on its own from the repository's folder, and ``run`` (which runs until a signal) against
  the embedded optimizer with the shipped plan, stopped with SIGTERM once it has worked.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from marked_processes import MARKER_VAR, marked_pids

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
SCRIPT = ". .venv/bin/activate"
COMMAND_LIST = "servo-actors -c config/synthetic.yaml validate"
RUN_ELSEWHERE = {
    "PYTHONPATH=examples/connectors": "the connector guide's example: tests/docs/test_example_connector.py",
    "servo-actors -c config/combined.yaml validate": "tests/docs/test_doc_commands.py runs every validate",
    "servo-actors optimizer serve --plan config/plans/synthetic.yaml          #": "a synopsis of two "
    "servers that run until a signal; SCRIPT serves the first plan, tests/docs checks both files exist",
    "servo-actors optimizer serve --plan examples/connectors/plan.yaml": "runs until a signal, beside "
    "a servo in another shell; tests/docs/test_example_connector.py runs that servo's connector",
    ".venv/bin/mkdocs serve": "a web server until Ctrl-C; scripts/test builds the same site (--strict)",
    "servo-actors check                               #": "a synopsis on the reader's own servo.yaml; "
    "tests/cli_operations/test_cli_operations_check_wait.py and test_cli_operations_check_select.py run "
    "each of its options on real connectors",
}
NOT_RUN_HERE = {
    "python3 -m venv .venv": "installs from the package index (the network); the `servo-actors demo` "
    "it ends with is tests/runner/test_runner_demo.py",
    "scripts/test": "runs this test suite",
    "docker build": "needs an image registry and a Kubernetes cluster",
    "head -c 48 /dev/urandom": "two hosts (copies a key to another host)",
    "servo-actors agent --listen 10.0.0.7:1901": "two hosts (10.0.0.5 and 10.0.0.7)",
    "scripts/kube-demo --abort-every 4": "needs the local cluster (marker kube): tests/kube_demo runs "
    "the demo end to end",
    "scripts/kube-demo --app real": "needs the local cluster's real node and a quiet machine (markers "
    "kube, quiet): tests/kube_demo/test_kube_demo_real.py runs it with fewer steps and measures again",
    "scripts/kube-cluster up [--dir DIR]": "a synopsis (options in brackets); tests/kube_cluster runs "
    "each of its commands (marker kube: the cluster's binaries are built first)",
    "scripts/interop_servox.sh": "downloads servox from PyPI (docs/interop.md)",
    "OPSANI_OPTIMIZER=bench.test/servox": "runs servox, installed from PyPI (docs/interop.md)",
    "INTEROP_KEEP=1 scripts/interop_servox.sh": "downloads servox from PyPI (docs/interop.md)",
    "go -C kube/app build": "needs the Go toolchain; tests/kube_app runs the application as a process",
    **RUN_ELSEWHERE,
}
BLOCK_TIMEOUT = 120.0
"""Generous bound on one block or command: the script sleeps 12 s; a hang breaks it."""
POLLING_BOUND = 60.0
"""Generous bound until the servo of the command list has received a command."""
IP_TIMEOUT = 10.0
LEAK_GRACE = 10.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def shell_blocks() -> list[str]:
    """Every ``sh`` block of the documents, list items' indented ones included (dedented)."""
    blocks = []
    for document in DOCUMENTS:
        for indent, body in re.findall(r"^([ \t]*)```sh\n(.*?)^[ \t]*```", document.read_text(), re.M | re.S):
            blocks.append("".join(line.removeprefix(indent) for line in body.splitlines(keepends=True)))
    return blocks


def block(first_line: str) -> str:
    [found] = [text for text in shell_blocks() if text.lstrip().startswith(first_line)]
    return found


def test_every_shell_block_of_the_documents_is_run_here_or_says_why_not() -> None:
    blocks = shell_blocks()
    assert len(blocks) >= 2
    for text in blocks:
        first = text.strip().splitlines()[0]
        known = [SCRIPT, COMMAND_LIST, *NOT_RUN_HERE]
        assert any(first.startswith(start) for start in known), f"a shell block nobody runs: {first!r}"


class Namespace:
    """A network namespace with only its loopback, up; commands run in it by ``ip netns exec``."""

    def __init__(self) -> None:
        self.name = f"sa-readme-{os.getpid()}"
        self.marker = uuid.uuid4().hex
        self.env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            MARKER_VAR: self.marker,
            "PYTHONUNBUFFERED": "1",
        }
        for name in ("SERVO_CONFIG", "OPSANI_OPTIMIZER", "OPSANI_URL", "OPSANI_BASE_URL", "OPSANI_TOKEN"):
            self.env.pop(name, None)

    def create(self) -> None:
        self._ip("netns", "add", self.name)
        self._ip("netns", "exec", self.name, "ip", "link", "set", "lo", "up")

    def remove(self) -> None:
        subprocess.run(
            ["ip", "netns", "del", self.name], capture_output=True, timeout=IP_TIMEOUT, check=False
        )

    def _ip(self, *args: str) -> None:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def command(self, shell_text: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, "bash", "-e", "-c", shell_text]

    def run(
        self, shell_text: str, cwd: Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(shell_text),
            capture_output=True,
            text=True,
            cwd=cwd,
            env=self.env if env is None else env,
            timeout=BLOCK_TIMEOUT,
        )

    def start(self, shell_text: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
        with open(log, "w") as output:
            return subprocess.Popen(
                self.command(f"exec {shell_text}"),
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=self.env,
            )


def why_no_namespace() -> str | None:
    if os.geteuid() != 0:
        return "a network namespace needs root (ip netns add)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    return None


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    why = why_no_namespace()
    if why is not None:
        pytest.skip(f"the documents' blocks run in a network namespace of their own: {why}")
    made = Namespace()
    made.create()
    try:
        yield made
    finally:
        deadline = time.monotonic() + LEAK_GRACE
        while (left := marked_pids(made.marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        made.remove()
        assert not left, f"processes of the documents' commands survived them: {left}"


def quick_start_folder(tmp_path: Path) -> Path:
    """A folder as the quick start leaves the repository's: ``config`` and ``.venv`` (this
    environment's virtualenv, which has ``servo-actors``)."""
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix) or not (venv / "bin" / "activate").exists():
        pytest.skip(f"docs/usage.md's block activates .venv: these tests do not run in a virtualenv ({venv})")
    folder = tmp_path / "repository"
    folder.mkdir()
    (folder / "config").symlink_to(REPO / "config")
    (folder / ".venv").symlink_to(venv)
    return folder


def without_servo_actors_on_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the virtualenv's bin folder off PATH, as a shell that has not activated it."""
    bin_dir = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir)
    path = os.pathsep.join(p for p in path.split(os.pathsep) if p != str(Path(sys.executable).parent))
    assert shutil.which("servo-actors", path=path) is None, f"servo-actors is on PATH anyway: {path}"
    return {**{k: v for k, v in env.items() if k != "VIRTUAL_ENV"}, "PATH": path}


@pytest.mark.root
def test_against_the_embedded_optimizer_on_one_machine_as_written(
    namespace: Namespace, tmp_path: Path
) -> None:
    folder = quick_start_folder(tmp_path)
    done = namespace.run(block(SCRIPT), folder, env=without_servo_actors_on_path(namespace.env))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "embedded optimizer for example.com/web: http://127.0.0.1:8085" in out
    assert "command DESCRIBE" in out and "result of MEASURE" in out, out  # the servo worked
    # The cancel took effect before the kill: the servo posted the command's result as cancelled,
    # or (the cancel came after its last progress post) its result was answered cancel.
    assert "will be answered cancel at its next post" in out, out
    assert re.search(
        r"(MEASURE|ADJUST|DESCRIBE) c\d+(: the servo posted cancelled \(cancelled\)| had finished when the "
        r"cancel reached it: its result \w+ \([\w-]+\) was answered cancel)",
        out,
    ), out
    # SIGTERM: the servo says GOODBYE in its log, not only to the optimizer.
    assert "GOODBYE (reason SIGTERM) posted to http://127.0.0.1:8085/" in out, out
    assert "stopped (SIGTERM)" in out and "Traceback" not in out


@pytest.mark.root
def test_the_command_list_of_running_a_servo_as_written(namespace: Namespace, tmp_path: Path) -> None:
    commands = [line.split("#", 1)[0].strip() for line in block(COMMAND_LIST).strip().splitlines()]
    assert commands[-1] == "servo-actors -c config/synthetic.yaml run"
    for command in commands[:-1]:
        done = namespace.run(command, REPO)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr
    plan = REPO / "config" / "plans" / "synthetic.yaml"
    optimizer = namespace.start(
        f"servo-actors optimizer serve --plan {plan}", tmp_path, tmp_path / "optimizer.log"
    )
    servo = namespace.start(commands[-1], REPO, tmp_path / "servo.log")
    try:
        deadline = time.monotonic() + POLLING_BOUND
        while "command MEASURE" not in (tmp_path / "servo.log").read_text():
            assert servo.poll() is None, (tmp_path / "servo.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "servo.log").read_text()
            time.sleep(0.1)
        servo.send_signal(signal.SIGTERM)  # to `ip netns exec`, which exec'd the servo
        assert servo.wait(BLOCK_TIMEOUT) == 0, (tmp_path / "servo.log").read_text()
    finally:
        for process in (servo, optimizer):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(BLOCK_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    assert "Traceback" not in (tmp_path / "servo.log").read_text()
