"""``config --format configmap``: a valid ConfigMap manifest whose servo.yaml loads back, secrets left out."""

from __future__ import annotations

import kubernetes_validate
import yaml

from servo_actors import __version__
from servo_actors.config import effective_config, load_config
from servo_actors.connectors.registry import connector_settings_problems, effective_settings

CONFIG = """\
optimizer:
  id: example.com/app
  token: tok-secret-0042
connectors:
  - name: load
    type: loadgen
    config:
      url: http://127.0.0.1:8080/
      headers: {Authorization: Bearer hdr-secret-77, Accept: text/plain}
"""


def test_the_manifest_is_a_valid_configmap_that_loads_back_without_secrets(
    run_cli, write_config, tmp_path
) -> None:
    path = write_config(CONFIG)
    result = run_cli(["-c", str(path), "config", "--format", "configmap"])
    assert result.exit_code == 0, result.stderr
    assert "tok-secret-0042" not in result.output and "hdr-secret-77" not in result.output
    assert "**********" not in result.output
    manifest = yaml.safe_load(result.output)
    kubernetes_validate.validate(manifest, kubernetes_validate.utils.latest_version(), strict=True)
    assert manifest["metadata"]["name"] == "servo-config"
    assert manifest["metadata"]["labels"] == {
        "app.kubernetes.io/name": "servo",
        "app.kubernetes.io/version": __version__,
    }
    assert yaml.safe_load(manifest["metadata"]["annotations"]["servo-actors.io/connectors"]) == [
        {"name": "load", "type": "loadgen"}
    ]
    text = manifest["data"]["servo.yaml"]
    assert "# optimizer.token: from a Secret, as the variable OPSANI_TOKEN" in text
    assert (
        "# connectors[0].config.headers.Authorization: from a Secret, as the variable SERVO_LOAD_HEADERS__AUTHORIZATION"
        in text
    )

    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (mounted / "servo.yaml").write_text(text, encoding="utf-8")
    secrets = {"OPSANI_TOKEN": "tok-secret-0042", "SERVO_LOAD_HEADERS__AUTHORIZATION": "Bearer hdr-secret-77"}
    again = load_config(mounted / "servo.yaml", env=secrets, connector_check=connector_settings_problems)
    original = load_config(path, env={}, connector_check=connector_settings_problems)
    assert again.optimizer is not None and again.optimizer.token is not None
    assert again.optimizer.token.get_secret_value() == "tok-secret-0042"
    shown_again, shown = (
        effective_config(again, connector_settings=effective_settings),
        effective_config(original, connector_settings=effective_settings),
    )
    assert shown_again["connectors"][0]["config"]["headers"] == {
        "Accept": "text/plain",
        "authorization": "**********",
    }
    shown_again["connectors"][0]["config"]["headers"] = shown["connectors"][0]["config"]["headers"] = None
    assert shown_again == shown


def test_a_name_of_ones_own_and_no_sources_with_it(run_cli, write_config) -> None:
    path = write_config(CONFIG)
    result = run_cli(["-c", str(path), "config", "--format", "configmap", "--configmap-name", "shop-servo"])
    assert yaml.safe_load(result.output)["metadata"]["name"] == "shop-servo"
    refused = run_cli(["-c", str(path), "config", "--format", "configmap", "--sources"])
    assert refused.exit_code == 2 and "do not go together" in refused.stderr
