"""Finding the cluster and the credentials (kubeconfig.py, credentials.py); the exec plugin is a real process."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
import requests
import yaml

from servo_actors.connectors.kubernetes.credentials import KubeAuth, run_exec_plugin
from servo_actors.connectors.kubernetes.kubeconfig import (
    KubeConfigError,
    from_kubeconfig,
    in_cluster,
    resolve_access,
)


def _kubeconfig(
    path: Path, server: str = "http://127.0.0.1:1", user: dict | None = None, context: str = "one", **extra
) -> Path:
    data = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": server, **extra}}],
        "users": [{"name": "u", "user": user or {"token": "s3cret-token"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_order_config_then_env_then_home(tmp_path: Path) -> None:
    explicit = _kubeconfig(tmp_path / "explicit", "http://127.0.0.1:1")
    from_env = _kubeconfig(tmp_path / "env", "http://127.0.0.1:2")
    home = tmp_path / "home"
    _kubeconfig((home / ".kube").mkdir(parents=True) or home / ".kube" / "config", "http://127.0.0.1:3")
    env = {"KUBECONFIG": str(from_env), "HOME": str(home)}
    assert resolve_access(str(explicit), None, env).server == "http://127.0.0.1:1"
    assert resolve_access(None, None, env).server == "http://127.0.0.1:2"
    assert resolve_access(None, None, {"HOME": str(home)}).server == "http://127.0.0.1:3"
    with pytest.raises(KubeConfigError, match="no kubeconfig"):
        resolve_access(None, None, {"HOME": str(tmp_path / "nobody")})


def test_kubeconfig_list_is_merged_first_wins(tmp_path: Path) -> None:
    first = _kubeconfig(tmp_path / "a", "http://127.0.0.1:1", context="one")
    second = _kubeconfig(tmp_path / "b", "http://127.0.0.1:2", context="two")
    access = resolve_access(None, "two", {"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"})
    assert access.server == "http://127.0.0.1:1"  # cluster "c" of the first file wins
    assert "context two" in access.source


def test_relative_paths_and_data_fields(tmp_path: Path) -> None:
    user = {"client-certificate": "certs/me.crt", "client-key-data": base64.b64encode(b"KEY").decode()}
    path = _kubeconfig(
        tmp_path / "cfg", "https://k.example:6443", user=user, **{"certificate-authority": "ca.crt"}
    )
    access = from_kubeconfig([path], None)
    assert access.ca_file == str(tmp_path / "ca.crt")
    assert access.client_cert_file == str(tmp_path / "certs" / "me.crt")
    assert access.client_key_data == b"KEY"
    assert "KEY" not in repr(access)


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda d: d.update({"current-context": "nope"}), "no context 'nope' \\(contexts: one\\)"),
        (lambda d: d["contexts"][0]["context"].update({"cluster": "x"}), "names cluster 'x', not defined"),
        (lambda d: d["clusters"][0]["cluster"].update({"server": "ftp://x"}), "no http\\(s\\) server"),
        (lambda d: d["users"][0].update({"user": {"auth-provider": {"name": "gcp"}}}), "auth-provider"),
        (lambda d: d["users"][0].update({"user": {"client-key-data": "%%%"}}), "not base64"),
        (lambda d: d.update({"current-context": None}), "no current-context"),
    ],
)
def test_broken_kubeconfigs_are_named(tmp_path: Path, mutate, problem) -> None:
    path = _kubeconfig(tmp_path / "cfg")
    data = yaml.safe_load(path.read_text())
    mutate(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(KubeConfigError, match=problem):
        from_kubeconfig([path], None)


def test_not_yaml_and_missing(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_text("{: nope")
    with pytest.raises(KubeConfigError, match=f"kubeconfig {bad}: not YAML"):
        from_kubeconfig([bad], None)
    with pytest.raises(KubeConfigError, match="does not exist"):
        from_kubeconfig([tmp_path / "missing"], None)


def test_in_cluster_reads_the_token_file_again(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_text("")
    access = in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert access.server == "https://10.0.0.1:443"
    now = [0.0]
    auth = KubeAuth(access, clock=lambda: now[0])
    assert auth.header() == "Bearer first"
    (tmp_path / "token").write_text("rotated")
    assert auth.header() == "Bearer first"
    now[0] = 3600.0
    assert auth.header() == "Bearer rotated"


def _plugin(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "plugin.sh"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_exec_plugin_token_and_expiry(tmp_path: Path) -> None:
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": "from-plugin", "expirationTimestamp": "2099-01-01T00:00:00Z"}}  # fmt: skip
    _plugin(
        tmp_path,
        f"echo \"$KUBERNETES_EXEC_INFO\" > {tmp_path}/info\ncat <<'EOF'\n{json.dumps(credential)}\nEOF\n",
    )
    path = _kubeconfig(tmp_path / "cfg", user={"exec": {"command": "./plugin.sh", "apiVersion": "client.authentication.k8s.io/v1",
                                                        "env": [{"name": "X", "value": "1"}]}})  # fmt: skip
    access = from_kubeconfig([path], None)
    token, expires = run_exec_plugin(access.exec_plugin)
    assert token == "from-plugin" and expires > 4e9
    assert json.loads((tmp_path / "info").read_text())["kind"] == "ExecCredential"
    request = requests.Request("GET", "http://127.0.0.1/").prepare()
    assert KubeAuth(access)(request).headers["Authorization"] == "Bearer from-plugin"


def test_exec_plugin_failures_are_named(tmp_path: Path) -> None:
    failing = _plugin(tmp_path, "echo 'login expired' >&2\nexit 3\n")
    path = _kubeconfig(tmp_path / "cfg", user={"exec": {"command": str(failing)}})
    with pytest.raises(KubeConfigError, match="exited with 3: login expired"):
        run_exec_plugin(from_kubeconfig([path], None).exec_plugin)
    path = _kubeconfig(tmp_path / "cfg", user={"exec": {"command": str(tmp_path / "absent")}})
    with pytest.raises(KubeConfigError, match="not found"):
        run_exec_plugin(from_kubeconfig([path], None).exec_plugin)


def test_the_token_never_shows_in_repr(tmp_path: Path) -> None:
    access = from_kubeconfig([_kubeconfig(tmp_path / "cfg")], None)
    assert access.token == "s3cret-token"
    assert "s3cret" not in repr(access)
    assert os.environ.get("KUBERNETES_EXEC_INFO") is None
