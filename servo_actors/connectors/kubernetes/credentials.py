"""Credentials on the wire: the TLS context and the ``Authorization`` header of every request.

Certificate and key *data* from a kubeconfig are handed to OpenSSL through anonymous in-memory
files (``memfd``), so a connector killed at any moment leaves no key material on disk.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import requests

from servo_actors.connectors.kubernetes.kubeconfig import ClusterAccess, ExecPlugin, KubeConfigError

__all__ = [
    "EXEC_TIMEOUT",
    "EXPIRY_MARGIN",
    "KubeAuth",
    "TOKEN_FILE_REREAD",
    "run_exec_plugin",
    "ssl_context",
]

EXEC_TIMEOUT = 30.0
"""The longest a credential plugin may run."""
TOKEN_FILE_REREAD = 60.0
"""Seconds between reads of a token file (the kubelet rotates service-account tokens)."""
EXPIRY_MARGIN = 30.0
"""A plugin's token is renewed this many seconds before it expires."""


def ssl_context(access: ClusterAccess) -> ssl.SSLContext:
    """The TLS context for an https server: its CA, the client certificate, or no verification."""
    if access.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        try:
            context = ssl.create_default_context(
                cafile=access.ca_file, cadata=access.ca_data.decode() if access.ca_data else None
            )
        except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
            raise KubeConfigError(f"{access.source}: cannot load the certificate authority: {exc}") from None
    cert = access.client_cert_file or access.client_cert_data
    key = access.client_key_file or access.client_key_data
    if cert and key:
        try:
            with _as_file(cert) as cert_path, _as_file(key) as key_path:
                context.load_cert_chain(cert_path, key_path)
        except (OSError, ssl.SSLError) as exc:
            raise KubeConfigError(f"{access.source}: cannot load the client certificate: {exc}") from None
    elif cert or key:
        raise KubeConfigError(f"{access.source}: a client certificate needs both a certificate and a key")
    return context


class _as_file:
    """A path OpenSSL can open: the file itself, or a memfd holding the data."""

    def __init__(self, value: str | bytes) -> None:
        self.value = value
        self.fd: int | None = None

    def __enter__(self) -> str:
        if isinstance(self.value, str):
            return self.value
        self.fd = os.memfd_create("kube-credential", os.MFD_CLOEXEC)
        os.write(self.fd, self.value)
        return f"/proc/self/fd/{self.fd}"

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


class KubeAuth(requests.auth.AuthBase):
    """Sets ``Authorization`` from a token, a token file, a credential plugin or a password.

    ``renew()`` drops a cached token so the next request fetches a fresh one (after a 401).
    """

    def __init__(self, access: ClusterAccess, clock: Callable[[], float] = time.monotonic) -> None:
        self.access = access
        self._clock = clock
        self._cached: str | None = None
        self._good_until = 0.0

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        header = self.header()
        if header:
            request.headers["Authorization"] = header
        return request

    def header(self) -> str | None:
        access = self.access
        if access.token:
            return f"Bearer {access.token}"
        if access.token_file or access.exec_plugin:
            if self._cached is None or self._clock() >= self._good_until:
                self._cached, self._good_until = self._fetch()
            return f"Bearer {self._cached}"
        if access.username is not None:
            pair = f"{access.username}:{access.password or ''}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None

    def renew(self) -> None:
        self._cached = None

    def _fetch(self) -> tuple[str, float]:
        if self.access.token_file:
            try:
                token = Path(self.access.token_file).read_text().strip()
            except OSError as exc:
                raise KubeConfigError(f"token file {self.access.token_file}: {exc.strerror}") from None
            return token, self._clock() + TOKEN_FILE_REREAD
        assert self.access.exec_plugin is not None
        token, expires = run_exec_plugin(self.access.exec_plugin)
        lifetime = float("inf") if expires is None else expires - time.time() - EXPIRY_MARGIN
        return token, self._clock() + max(0.0, lifetime)


def run_exec_plugin(plugin: ExecPlugin) -> tuple[str, float | None]:
    """Run a credential plugin; its token and when it expires (epoch seconds, or None)."""
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    command = plugin.command
    if os.sep in command and not os.path.isabs(command):
        command = os.path.join(plugin.base_dir, command)
    what = f"credential plugin {plugin.command!r}"
    try:
        done = subprocess.run(
            [command, *plugin.args], env=env, capture_output=True, timeout=EXEC_TIMEOUT,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except FileNotFoundError:
        raise KubeConfigError(f"{what} not found") from None
    except subprocess.TimeoutExpired:
        raise KubeConfigError(f"{what} did not finish within {EXEC_TIMEOUT:g} s") from None
    except OSError as exc:
        raise KubeConfigError(f"{what} cannot run: {exc.strerror}") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise KubeConfigError(f"{what} exited with {done.returncode}: {detail[0]}")
    try:
        status = json.loads(done.stdout)["status"]
        token = status["token"]
    except (ValueError, KeyError, TypeError):
        raise KubeConfigError(f"{what} did not print an ExecCredential with status.token") from None
    expiry = status.get("expirationTimestamp")
    if not expiry:
        return token, None
    try:
        return token, datetime.fromisoformat(expiry.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise KubeConfigError(f"{what}: expirationTimestamp {expiry!r} is not a time") from None
