"""Where the cluster is and who we are to it: a kubeconfig context or the in-cluster service account.

The order, as kubectl has it: the ``kubeconfig`` file of the config, else ``$KUBECONFIG`` (a
``:``-separated list, merged, the first file that sets a key winning), else the pod's service
account when running in a cluster, else ``~/.kube/config``. File paths inside a kubeconfig are
relative to the file that names them.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from servo_actors.errors import ConnectorError

__all__ = [
    "ClusterAccess",
    "ExecPlugin",
    "KubeConfigError",
    "SERVICE_ACCOUNT_DIR",
    "from_kubeconfig",
    "in_cluster",
    "resolve_access",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(ConnectorError):
    """The kubeconfig cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class ExecPlugin:
    """A credential plugin (``users[].user.exec``) run to get a token or a client certificate."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    base_dir: str = "."


@dataclass(frozen=True)
class ClusterAccess:
    """Everything needed to talk to one API server. ``repr`` never shows a credential."""

    server: str
    source: str
    """For messages: ``kubeconfig /path (context NAME)`` or ``in-cluster service account``."""
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    client_cert_data: bytes | None = field(default=None, repr=False)
    client_key_data: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    exec_plugin: ExecPlugin | None = None


def resolve_access(
    kubeconfig: str | None, context: str | None, env: Mapping[str, str] | None = None
) -> ClusterAccess:
    """The access the connector uses, found in the documented order. Raises KubeConfigError."""
    env = os.environ if env is None else env
    if kubeconfig:
        return from_kubeconfig([Path(kubeconfig).expanduser()], context)
    if env.get("KUBECONFIG"):
        paths = [Path(p).expanduser() for p in env["KUBECONFIG"].split(os.pathsep) if p]
        return from_kubeconfig(paths, context)
    if env.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT_DIR / "token").exists():
        if context:
            raise KubeConfigError(f"context {context!r} is set, but there is no kubeconfig (in-cluster)")
        return in_cluster(env)
    default = Path(env.get("HOME", "~")).expanduser() / ".kube" / "config"
    if not default.exists():
        raise KubeConfigError(
            f"no kubeconfig: set config.kubeconfig or $KUBECONFIG, run in a cluster, or create {default}"
        )
    return from_kubeconfig([default], context)


def in_cluster(env: Mapping[str, str], account_dir: Path = SERVICE_ACCOUNT_DIR) -> ClusterAccess:
    """The pod's service account; its token file is read again as the kubelet rotates it."""
    host, port = env["KUBERNETES_SERVICE_HOST"], env.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    ca = account_dir / "ca.crt"
    return ClusterAccess(
        server=f"https://{host}:{port}",
        source="in-cluster service account",
        ca_file=str(ca) if ca.exists() else None,
        token_file=str(account_dir / "token"),
    )


def from_kubeconfig(paths: list[Path], context: str | None) -> ClusterAccess:
    """The access of ``context`` (else the current context) in the merged files ``paths``."""
    merged: dict[str, dict[str, tuple[dict[str, Any], Path]]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    read_any = False
    for path in paths:
        data = _read(path)
        if data is None:
            continue
        read_any = True
        current = current or data.get("current-context") or None
        for section in merged:
            for entry in data.get(section) or []:
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    merged[section].setdefault(entry["name"], (entry, path))
    where = ", ".join(map(str, paths))
    if not read_any:
        raise KubeConfigError(f"kubeconfig {where} does not exist")
    name = context or current
    if not name:
        raise KubeConfigError(f"kubeconfig {where}: no current-context, and config.context is not set")
    if name not in merged["contexts"]:
        known = ", ".join(sorted(merged["contexts"])) or "none"
        raise KubeConfigError(f"kubeconfig {where}: no context {name!r} (contexts: {known})")
    ctx_entry, ctx_path = merged["contexts"][name]
    ctx = ctx_entry.get("context") or {}
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if cluster_name not in merged["clusters"]:
        raise KubeConfigError(
            f"kubeconfig {ctx_path}: context {name!r} names cluster {cluster_name!r}, not defined"
        )
    cluster_entry, cluster_path = merged["clusters"][cluster_name]
    cluster = cluster_entry.get("cluster") or {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"kubeconfig {cluster_path}: cluster {cluster_name!r} has no http(s) server")
    user: dict[str, Any] = {}
    user_path = ctx_path
    if user_name:
        if user_name not in merged["users"]:
            raise KubeConfigError(
                f"kubeconfig {ctx_path}: context {name!r} names user {user_name!r}, not defined"
            )
        user_entry, user_path = merged["users"][user_name]
        user = user_entry.get("user") or {}
    if user.get("auth-provider"):
        raise KubeConfigError(
            f"kubeconfig {user_path}: user {user_name!r} uses an auth-provider, which is not supported; "
            "use an exec credential plugin (kubectl's current way) instead"
        )
    where_user = f"kubeconfig {user_path}: user {user_name!r}"
    return ClusterAccess(
        server=server.rstrip("/"),
        source=f"kubeconfig {ctx_path} (context {name})",
        ca_file=_file(cluster.get("certificate-authority"), cluster_path),
        ca_data=_data(
            cluster.get("certificate-authority-data"), f"kubeconfig {cluster_path}: cluster {cluster_name!r}"
        ),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name"),
        client_cert_file=_file(user.get("client-certificate"), user_path),
        client_key_file=_file(user.get("client-key"), user_path),
        client_cert_data=_data(user.get("client-certificate-data"), where_user),
        client_key_data=_data(user.get("client-key-data"), where_user),
        token=user.get("token"),
        token_file=_file(user.get("tokenFile"), user_path),
        username=user.get("username"),
        password=user.get("password"),
        exec_plugin=_exec(user.get("exec"), user_path, where_user),
    )


def _read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KubeConfigError(f"kubeconfig {path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"kubeconfig {path}: not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig (expected a mapping)")
    return data


def _file(value: Any, relative_to: Path) -> str | None:
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else relative_to.parent / path)


def _data(value: Any, where: str) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        raise KubeConfigError(f"{where}: a *-data field is not base64") from None


def _exec(value: Any, path: Path, where: str) -> ExecPlugin | None:
    if not value:
        return None
    if not isinstance(value, dict) or not value.get("command"):
        raise KubeConfigError(f"{where}: exec needs a command")
    env = tuple(
        (str(e["name"]), str(e.get("value", ""))) for e in value.get("env") or [] if isinstance(e, dict)
    )
    return ExecPlugin(
        command=str(value["command"]),
        args=tuple(str(a) for a in value.get("args") or []),
        env=env,
        api_version=str(value.get("apiVersion") or ExecPlugin.api_version),
        base_dir=str(path.parent),
    )
