"""``servo-actors import-servox`` as a real process on servox's own configurations (data/README.md
names where each comes from); every output is checked by ``servo-actors validate``, also a process."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).parent / "data"
CONVERTIBLE = sorted(
    [
        *(DATA / "servox_repo").glob("*.yaml"),
        *(DATA / "generated").glob("*.yaml"),
        *(DATA / "schema").glob("*.yaml"),
    ]
)
CONVERTIBLE = [path for path in CONVERTIBLE if path.name != "multi-servo.yaml"]
PROCESS_TIMEOUT = 120.0
_SERVO_ENV = ("OPSANI_", "SERVO_")


def servo_actors(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(_SERVO_ENV)}
    return subprocess.run(
        [sys.executable, "-m", "servo_actors", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )


def convert(path: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The converted servo.yaml's text (written with -o) and the stderr lines; validate passed on it."""
    output = tmp_path / "servo.yaml"
    # In the servox file's folder, as servox ran: files it names (vegeta's targets) are relative to it.
    result = servo_actors("import-servox", str(path), "-o", str(output), cwd=path.parent)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    checked = servo_actors("-c", str(output), "validate", cwd=path.parent)
    assert checked.returncode == 0, checked.stderr + output.read_text()
    assert checked.stdout.startswith("OK: ")
    return output.read_text(encoding="utf-8"), result.stderr.splitlines()


def line_of(text: str, fragment: str) -> str:
    """The one line of ``text`` holding ``fragment``."""
    lines = [line for line in text.splitlines() if fragment in line and not line.startswith("#")]
    assert len(lines) == 1, (fragment, lines)
    return lines[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", CONVERTIBLE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_servox_configuration_converts_into_a_valid_servo_yaml(path: Path, tmp_path: Path) -> None:
    text, stderr = convert(path, tmp_path)
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[0].startswith(f"# Converted from the servox configuration {path}")
    # Everything not converted is both in the file and on stderr, one line each.
    listed = [line.removeprefix("#   - ") for line in header if line.startswith("#   - ")]
    assert [
        line.removeprefix("not converted: ") for line in stderr if line.startswith("not converted: ")
    ] == listed
    assert (tmp_path / "servo.yaml").stat().st_mode & 0o777 == stat.S_IRUSR | stat.S_IWUSR


@pytest.mark.timeout(120)
def test_helm_configmap_canary_and_servox_defaults(tmp_path: Path) -> None:
    text, stderr = convert(DATA / "servox_repo" / "helm-configmap.yaml", tmp_path)
    data = yaml.safe_load(text)
    assert data["optimizer"]["url"] == "https://optimize.example.com/rest/optimize/co/v1/optimizers/web-app"
    assert data["servo_uid"] == "servo-1"
    kube, wait = data["connectors"]
    assert (wait["name"], wait["type"]) == ("wait", "wait")
    deployment = kube["config"]["deployments"][0]
    assert deployment["strategy"] == "tuning"
    assert deployment["containers"][0]["memory"] == {
        "min": "128Mi",
        "max": "2560Mi",
        "step": "128Mi",
        "set": ["request", "limit"],
    }
    assert "'tuning'; here it is 'main-tuning'" in line_of(text, "strategy: tuning")
    assert "servox's exception (its default)" in line_of(text, "on_failure: ignore")


@pytest.mark.timeout(120)
def test_per_workload_settings_stay_on_the_workloads_and_names_are_kept(tmp_path: Path) -> None:
    text, stderr = convert(DATA / "schema" / "kubernetes-workloads.yaml", tmp_path)
    [kube] = yaml.safe_load(text)["connectors"]
    config = kube["config"]
    assert (config["namespace"], config["timeout"], config["settlement"], config["on_failure"]) == (
        "shop", "5m", "30s", "shutdown",
    )  # fmt: skip
    web, api = config["deployments"]
    [db] = config["statefulsets"]
    # A workload's own value where it differs from the connector's, nothing where it is the same.
    assert (web["namespace"], web["timeout"]) == ("shop-canary", "10m")
    assert not {"namespace", "timeout", "settlement", "on_failure"} & set(api)
    assert db["on_failure"] == "ignore" and "namespace" not in db
    assert "servox's ignore reported a failed adjustment as a success" in line_of(text, "on_failure: ignore")
    # static_environment_variables, get and permissions are carried over, not dropped.
    assert web["containers"][0]["static_environment_variables"] == {"TZ": "UTC"}
    assert web["containers"][0]["cpu"]["get"] == ["limit"]
    assert "get" not in api["containers"][0]["cpu"]
    assert config["permissions"][1] == {"group": "", "resources": ["configmaps"], "verbs": ["get"]}
    assert "beside the verbs the connector itself uses" in line_of(text, "permissions:")
    assert not any(word in line for line in stderr for word in ("static_environment", ".get", "permissions"))
    # servox's component names: a lone container keeps WORKLOAD/CONTAINER, two keep theirs.
    assert db["containers"][0]["alias"] == "db/postgres"
    assert "alias" not in api["containers"][0]
    env = web["containers"][0]["env"]
    assert env[0] == {"name": "GOGC", "type": "range", "min": 50, "max": 200, "step": 25, "default": 100}
    assert "GiB" in line_of(text, "min: 512Mi")


@pytest.mark.timeout(120)
def test_settings_prometheus_vegeta_wait_and_kube_metrics(tmp_path: Path) -> None:
    text, stderr = convert(DATA / "schema" / "everything-else.yaml", tmp_path)
    data = yaml.safe_load(text)
    assert data["settings"] == {
        "backoff": {"max_time": "5m"},
        "timeouts": {"connect": "30s", "read": "30s"},
        "ssl_verify": False,
    }
    assert data["optimizer"]["url"] == "https://optimizer.example.com/custom/shop"
    prometheus, load, hold, usage = data["connectors"]
    fast_fail = {k: v for k, v in prometheus["config"].items() if k.startswith("fast_fail")}
    assert fast_fail == {
        "fast_fail_period": "30s",
        "fast_fail_span": "2m",
        "fast_fail_skip": "1m",
        "fast_fail_treat_zero_as_missing": True,
    }
    assert "servox counted it from the warmup's" in line_of(text, "fast_fail_skip: 1m")
    assert not any("fast_fail" in line for line in stderr)
    assert prometheus["config"]["metrics"][1]["step"] == "1m"
    assert "servox's default step" in line_of(text, "step: 1m")
    assert load["type"] == "loadgen"
    assert {
        k: load["config"][k]
        for k in ("url", "method", "headers", "body", "rate", "concurrency", "max_concurrency")
    } == {
        "url": "http://shop.default.svc:8080/cart",
        "method": "POST",
        "headers": {"Content-Type": "application/json"},
        "body": '{"item": 42}',
        "rate": 10.0,
        "concurrency": 4,
        "max_concurrency": 256,
    }
    assert (load["config"]["insecure"], load["config"]["keepalive"]) == (True, False)
    assert "latency_p50" in line_of(text, "type: loadgen")
    assert "vegeta's 300: loadgen runs at most 256" in line_of(text, "max_concurrency: 256")
    assert hold == {"name": "hold", "type": "wait", "config": {}}
    assert usage == {
        "name": "usage",
        "type": "kube_metrics",
        "config": {"namespace": "shop", "name": "web", "kind": "Deployment", "container": "web"},
    }
    assert not any(line.startswith("not converted: usage") for line in stderr)
    for key in ("settings.proxies", "settings.backoff.__default__.max_tries", "metrics.streaming_interval"):
        assert any(line.startswith(f"not converted: {key}: ") for line in stderr), key


@pytest.mark.timeout(120)
def test_opsani_dev_becomes_kubernetes_and_prometheus(tmp_path: Path) -> None:
    text, stderr = convert(DATA / "schema" / "opsani-dev.yaml", tmp_path)
    kube, prometheus, usage = yaml.safe_load(text)["connectors"]
    assert (usage["name"], usage["type"]) == ("opsani_dev-kube_metrics", "kube_metrics")
    assert usage["config"] == {"namespace": "shop", "name": "web", "kind": "Deployment", "container": "main"}
    assert (kube["name"], prometheus["name"]) == ("opsani_dev", "opsani_dev-prometheus")
    deployment = kube["config"]["deployments"][0]
    assert (deployment["name"], deployment["strategy"], deployment["containers"][0]["alias"]) == (
        "web",
        "tuning",
        "main",
    )
    assert deployment["containers"][0]["cpu"]["step"] == "125m"
    assert kube["config"]["settlement"] == "1m" and kube["config"]["timeout"] == "10m"
    assert prometheus["config"]["base_url"] == "http://prometheus.shop:9090"
    assert "whatever prometheus_base_url said" in line_of(text, "base_url: http://prometheus.shop:9090")
    names = [m["name"] for m in prometheus["config"]["metrics"]]
    assert names[:2] == ["main_instance_count", "tuning_instance_count"] and len(names) == 13
    assert any(line.startswith("not converted: opsani_dev.service: ") and "8080" in line for line in stderr)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("appdynamics-optimizer.yaml", "optimizer.client_id"),
        ("readme-generate-aliases.yaml", "bar"),
        ("readme-multi-servo.yaml", "vegeta.duration"),
        ("vegeta-several-targets.yaml", "vegeta.target"),
    ],
)
def test_what_cannot_be_converted_exits_2_naming_the_servox_key(name: str, key: str, tmp_path: Path) -> None:
    path = DATA / "refused" / name
    result = servo_actors("import-servox", str(path), "-o", str(tmp_path / "servo.yaml"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {path}") and f": {key}: cannot convert: " in line
    assert not (tmp_path / "servo.yaml").exists()


@pytest.mark.timeout(300)
def test_a_multi_servo_assembly_becomes_a_servo_yaml_of_as_many_applications(tmp_path: Path) -> None:
    # README.md's multi-servo example: two documents, each its own optimizer and vegeta.
    text, _ = convert(DATA / "schema" / "multi-servo.yaml", tmp_path)
    documents = list(yaml.safe_load_all(text))
    assert [d["optimizer"]["id"] for d in documents] == ["newco.com/awesome-app1", "newco.com/awesome-app2"]
    assert [[c["type"] for c in d["connectors"]] for d in documents] == [["loadgen"], ["loadgen"]]
    # The servo runs them as two applications: `config` shows both, one JSON object each.
    shown = servo_actors("-c", str(tmp_path / "servo.yaml"), "config", "--format", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "newco.com/awesome-app1" in shown.stdout and "newco.com/awesome-app2" in shown.stdout


@pytest.mark.timeout(120)
def test_several_documents_of_one_application_are_refused_naming_them(tmp_path: Path) -> None:
    source = (DATA / "schema" / "multi-servo.yaml").read_text(encoding="utf-8")
    same = tmp_path / "same-app.yaml"
    same.write_text(source.replace("awesome-app2", "awesome-app1"), encoding="utf-8")
    result = servo_actors("import-servox", str(same), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert "documents do not go together" in result.stderr and "newco.com/awesome-app1" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.timeout(120)
def test_stdout_by_default_and_no_overwrite_without_force(tmp_path: Path) -> None:
    path = DATA / "generated" / "vegeta.yaml"
    printed = servo_actors("import-servox", str(path), cwd=tmp_path)
    assert printed.returncode == 0 and yaml.safe_load(printed.stdout)["connectors"][0]["type"] == "loadgen"
    existing = tmp_path / "servo.yaml"
    existing.write_text("keep: me\n", encoding="utf-8")
    refused = servo_actors("import-servox", str(path), "-o", str(existing), cwd=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert existing.read_text(encoding="utf-8") == "keep: me\n"
    forced = servo_actors("import-servox", str(path), "-o", str(existing), "--force", cwd=tmp_path)
    assert forced.returncode == 0 and "loadgen" in existing.read_text(encoding="utf-8")


@pytest.mark.timeout(120)
def test_a_value_servox_accepts_but_that_does_not_validate_here_exits_2(tmp_path: Path) -> None:
    source = tmp_path / "servox.yaml"
    source.write_text(
        (DATA / "generated" / "prometheus.yaml")
        .read_text(encoding="utf-8")
        .replace("name: throughput", "name: 'bad name'"),
        encoding="utf-8",
    )
    result = servo_actors("import-servox", str(source), cwd=tmp_path)
    assert result.returncode == 2
    assert "does not validate" in result.stderr and "connectors[0].config.metrics[0].name" in result.stderr


@pytest.mark.timeout(120)
def test_the_docs_page_shows_what_the_converter_writes(tmp_path: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "coming-from-servox.md").read_text(encoding="utf-8")

    def block(marker: str) -> str:
        after = page.split(f"<!-- {marker} -->\n```yaml\n", 1)[1]
        return after.split("```\n", 1)[0]

    example = (DATA / "schema" / "docs-example.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(block("servox-example-input")) == yaml.safe_load(example)
    (tmp_path / "servox.yaml").write_text(block("servox-example-input"), encoding="utf-8")
    result = servo_actors("import-servox", "servox.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == block("servox-example-output")


@pytest.mark.timeout(120)
def test_vegeta_targets_file_becomes_loadgens(tmp_path: Path) -> None:
    text, stderr = convert(DATA / "schema" / "vegeta-targets-file.yaml", tmp_path)
    (load,) = yaml.safe_load(text)["connectors"]
    assert load["config"]["targets_file"] == "vegeta-targets.txt" and "url" not in load["config"]
    assert "relative to the working directory" in line_of(text, "targets_file: vegeta-targets.txt")


@pytest.mark.timeout(120)
def test_a_checks_section_becomes_servo_yamls_with_a_comment_where_its_meaning_changed(
    tmp_path: Path,
) -> None:
    servox = tmp_path / "servox.yaml"
    servox.write_text(
        yaml.safe_dump(
            {
                "optimizer": {"id": "example.com/app", "token": "t"},
                "checks": {
                    "delay": "expo",
                    "halt_on": "common",
                    "quiet": True,
                    "name": ["ready"],
                    "connectors": ["wait", "prom"],
                    "remedy": True,
                    "progressive": True,
                },
                "connectors": {"prom": "prometheus"},
                "prom": {
                    "base_url": "http://127.0.0.1:9090",
                    "metrics": [{"name": "up", "query": "up", "unit": ""}],
                },
            }
        )
    )
    text, stderr = convert(servox, tmp_path)
    checks = yaml.safe_load(text)["checks"]
    assert checks == {
        "connectors": ["prom"],
        "name": ["ready"],
        "quiet": True,
        "delay": "expo",
        "halt_on": "common",
        "wait": "30m",
    }
    assert "servox's default, written out: here the default is one round" in line_of(text, "wait: 30m")
    assert "run --check runs every connector's checks" in line_of(text, "  connectors:  #")
    dropped = [
        line.removeprefix("not converted: ") for line in stderr if line.startswith("not converted: checks")
    ]
    assert [line.split(":")[0] for line in dropped] == [
        "checks.connectors",
        "checks.remedy",
        "checks.progressive",
    ]
    assert "wait" in dropped[0]  # servox's key names a connector the converted file does not have

    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"optimizer": {"id": "example.com/app", "token": "t"}, "wait": {}}))
    (tmp_path / "out").mkdir()
    text, _stderr = convert(plain, tmp_path / "out")
    assert "checks" not in yaml.safe_load(text)
    assert "# Note: servox's run --check waited up to 30m for the checks to pass; here one round" in text
