"""Two "hosts" for the convention tests: two network namespaces joined by a veth pair.

Each namespace has its own loopback and one end of the pair, on a private test subnet
(``10.231.N.0/24``, N from the test process's PID, only ever inside the two namespaces), so the
leader and the member really have different addresses and a cut is a real one (``cut`` brings
the leader's end down). Created by ``TwoNamespaces.create`` and removed by ``remove`` (which also
removes the veth pair); ``unavailable()`` says why they cannot be made here (not root, no ``ip``,
or ``ip netns add`` refused).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

IP_TIMEOUT = 10.0
"""Seconds one ``ip`` command may take."""


def _ip(*args: str, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    command = ["ip", *args] if namespace is None else ["ip", "netns", "exec", namespace, "ip", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=IP_TIMEOUT, check=False)


def unavailable() -> str | None:
    """Why two namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"sa-probe-{os.getpid()}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"ip netns add is refused here: {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


@dataclass
class TwoNamespaces:
    leader_ns: str
    member_ns: str
    leader_ip: str
    member_ip: str
    leader_link: str
    member_link: str

    @classmethod
    def create(cls) -> TwoNamespaces:
        tag = os.getpid() % 100000
        subnet = 1 + os.getpid() % 250
        made = cls(
            leader_ns=f"sa-{tag}-lead",
            member_ns=f"sa-{tag}-memb",
            leader_ip=f"10.231.{subnet}.1",
            member_ip=f"10.231.{subnet}.2",
            leader_link=f"sal{tag}",
            member_link=f"sam{tag}",
        )
        try:
            made._build()
        except BaseException:
            made.remove()
            raise
        return made

    def _run(self, *args: str, namespace: str | None = None) -> None:
        done = _ip(*args, namespace=namespace)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")

    def _build(self) -> None:
        self._run("netns", "add", self.leader_ns)
        self._run("netns", "add", self.member_ns)
        self._run("link", "add", self.leader_link, "type", "veth", "peer", "name", self.member_link)
        for link, namespace, address in (
            (self.leader_link, self.leader_ns, self.leader_ip),
            (self.member_link, self.member_ns, self.member_ip),
        ):
            self._run("link", "set", link, "netns", namespace)
            self._run("addr", "add", f"{address}/24", "dev", link, namespace=namespace)
            self._run("link", "set", link, "up", namespace=namespace)
            self._run("link", "set", "lo", "up", namespace=namespace)

    def exec_prefix(self, namespace: str) -> list[str]:
        """Prefix of a command that must run in ``namespace``."""
        return ["ip", "netns", "exec", namespace]

    def cut(self) -> None:
        """The network between the two is gone (the leader's end of the pair is down)."""
        self._run("link", "set", self.leader_link, "down", namespace=self.leader_ns)

    def restore(self) -> None:
        self._run("link", "set", self.leader_link, "up", namespace=self.leader_ns)

    def remove(self) -> None:
        """Delete both namespaces (and so the pair); what does not exist is fine."""
        for namespace in (self.leader_ns, self.member_ns):
            _ip("netns", "del", namespace)
        _ip("link", "del", self.leader_link)
