"""``config``, ``validate``, ``schema`` and ``connectors``: commands about the configuration itself."""

from __future__ import annotations

import json

import click
import yaml

from servo_actors import __version__
from servo_actors.cli.context import CliState, app_option, echo_json, format_table, json_option, pass_state
from servo_actors.config import ServoConfig, effective_config, read_token
from servo_actors.config.configmap import DEFAULT_CONFIGMAP_NAME, configmap_manifest
from servo_actors.config.display import value_sources
from servo_actors.connectors.registry import (
    connector_type_infos,
    effective_settings,
    resolve_connector_type,
    validate_connector_config,
)
from servo_actors.errors import ConfigError, UsageError

__all__ = [
    "MULTI_DOCUMENT_NOTE",
    "config_cmd",
    "connectors_cmd",
    "schema_cmd",
    "validate_cmd",
]

MULTI_DOCUMENT_NOTE = (
    "The schema of one YAML document. servo.yaml may hold several documents of this shape (separated "
    "by ---), one per application: each then needs its own optimizer (ORG/APP unique across the "
    "documents); connector names are unique within a document; settings.metrics, supervisor.convention, "
    "supervisor.run_dir and supervisor.liveness belong to the whole servo and are the first document's."
)


@click.command("config")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["yaml", "json", "configmap"]),
    default="yaml",
    show_default=True,
    help="Output format; configmap: a Kubernetes ConfigMap manifest holding it, secrets left out.",
)
@click.option(
    "--configmap-name",
    default=DEFAULT_CONFIGMAP_NAME,
    show_default=True,
    help="The ConfigMap's name (with --format configmap).",
)
@click.option(
    "--sources",
    is_flag=True,
    help="Print each value with where it came from: the file, env NAME, PATH/.env NAME, or default.",
)
@app_option
@pass_state
def config_cmd(
    state: CliState, output_format: str, configmap_name: str, sources: bool, app_names: tuple[str, ...]
) -> None:
    """Print the effective configuration: the file after environment overrides, with defaults.

    Secrets are shown as **********; a token_file is shown as its path, never its content. As a
    ConfigMap, secrets are left out and a comment names the variable that gives each one back. A
    file of several applications prints one YAML document per application (JSON: a list of them);
    ``--sources`` and ``--format configmap`` take one (``--app``).
    """
    configs = state.select(app_names)
    documents = [effective_config(config, connector_settings=effective_settings) for config in configs]
    if (output_format == "configmap" or sources) and len(configs) > 1:
        raise UsageError(
            "--sources and --format configmap take one application: choose it with --app ORG/APP"
        )
    config, data = configs[0], documents[0]
    if output_format == "configmap":
        if sources:
            raise UsageError("--sources and --format configmap do not go together")
        click.echo(configmap_manifest(data, name=configmap_name, version=__version__), nl=False)
        return
    if sources:
        rows = value_sources(config, data)
        if output_format == "json":
            echo_json([{"key": key, "value": value, "source": source} for key, value, source in rows])
        else:
            table = [[key, json.dumps(value, ensure_ascii=False), source] for key, value, source in rows]
            click.echo(format_table(["KEY", "VALUE", "SOURCE"], table))
        return
    if output_format == "json":
        echo_json(documents[0] if len(documents) == 1 and not state.apps.several else documents)
    else:
        click.echo(
            yaml.safe_dump_all(documents, sort_keys=False, allow_unicode=True, default_flow_style=False),
            nl=False,
        )


@click.command("validate")
@pass_state
def validate_cmd(state: CliState) -> None:
    """Check the configuration: exit 0, or 2 with every problem found.

    Checks the YAML, every key and value, each connector's type (it must import) and its config,
    and that the optimizer's token file (if any) can be read. What a connector's config names
    outside the file and is not there (a missing kubeconfig) is a warning on stderr, in the words
    ``check`` uses: the file is still valid, exit 0.
    """
    apps = state.apps
    for config in apps:
        if config.optimizer is not None:
            read_token(config.optimizer)  # its error names the document it came from
    warnings = [(config, name, warning) for config in apps for name, warning in _warnings(config)]
    for config, name, warning in warnings:
        where = f"{config.app}: " if apps.several else ""
        click.echo(f"warning: {where}connector {name!r}: {warning} (check and run will fail on it)", err=True)
    counted = f", with {len(warnings)} warning{'' if len(warnings) == 1 else 's'}" if warnings else ""
    if not apps.several:
        click.echo(f"OK: {apps.source} is valid ({_summary(apps.first)}){counted}")
        return
    click.echo(f"OK: {apps.source} is valid: {len(apps)} applications{counted}")
    for config in apps:
        click.echo(f"  document {config.document}: {_summary(config)}")


def _warnings(config: ServoConfig) -> list[tuple[str, str]]:
    """Each connector's ``config_warnings``: what the file names but is not there."""
    found = []
    for spec in config.connectors:
        connector_class = resolve_connector_type(spec.type)
        settings = validate_connector_config(connector_class, spec.config)
        found += [(spec.name, warning) for warning in connector_class.config_warnings(settings)]
    return found


def _summary(config: ServoConfig) -> str:
    names = ", ".join(spec.name for spec in config.connectors)
    connectors = f"{len(config.connectors)} connector(s)" + (f": {names}" if names else "")
    optimizer = f"optimizer {config.optimizer.id}" if config.optimizer else "no optimizer"
    return f"{connectors}; {optimizer}"


@click.command("schema")
def schema_cmd() -> None:
    """Print the JSON schema of the configuration file (for editors and linters).

    It is the schema of one YAML document: a file of several applications holds several documents
    of this shape, each with its own optimizer.
    """
    schema = ServoConfig.model_json_schema()
    schema["$comment"] = MULTI_DOCUMENT_NOTE
    click.echo(json.dumps(schema, indent=2, ensure_ascii=False))


@click.command("connectors")
@json_option
def connectors_cmd(as_json: bool) -> None:
    """List the connector types a config may name: built in, and installed as entry points.

    Each is imported to check that it works. A type can also be given as package.module:Class.
    """
    rows = []
    for info in connector_type_infos():
        if info.shadowed:
            status = "ignored: a built-in type has this name"
        else:
            try:
                resolve_connector_type(info.name)
                status = "ok"
            except ConfigError as exc:
                status = f"error: {exc.detail}"
        rows.append({"name": info.name, "origin": info.origin, "import_path": info.target, "status": status})
    if as_json:
        echo_json(rows)
        return
    table = [[row["name"], row["origin"], row["import_path"], row["status"]] for row in rows]
    click.echo(format_table(["TYPE", "ORIGIN", "IMPORT PATH", "STATUS"], table))
