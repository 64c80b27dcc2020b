"""``import-servox``: convert a servox configuration into servo-actors' servo.yaml."""

from __future__ import annotations

from pathlib import Path

import click

from servo_actors.cli.output_file import write_file
from servo_actors.errors import ConfigError

__all__ = ["import_servox_cmd"]

OUTPUT_MODE = 0o600
"""The written file may hold the optimizer's token: readable by its owner only."""


@click.command("import-servox")
@click.argument("servox_file", metavar="SERVOX.yaml", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write servo.yaml here (mode 0600) instead of printing it.",
)
@click.option("--force", is_flag=True, help="Replace the output file if it exists.")
def import_servox_cmd(servox_file: Path, output: Path | None, force: bool) -> None:
    """Convert a servox configuration (servo.yaml of servox 25.x) into this project's form.

    Maps optimizer, settings and the kubernetes, prometheus, vegeta (as loadgen), wait,
    kube_metrics and opsani_dev connectors. A comment ends each line whose meaning differs from
    servox's; what has no equivalent is listed in the output's header and on stderr. Exits 2,
    naming the servox key, when the input cannot be converted or the result does not validate.
    """
    from servo_actors.servox_import.document import convert_file
    from servo_actors.servox_import.validation import check_applications, check_converted
    from servo_actors.servox_import.yaml_writer import write_yaml

    conversions = convert_file(servox_file)
    # A multi-servo assembly becomes a servo.yaml of as many documents, one application each.
    texts = [write_yaml(conversion) for conversion in conversions]
    for conversion, text in zip(conversions, texts, strict=True):
        check_converted(text, source=conversion.source)
    text = "---\n".join(texts) if len(texts) > 1 else texts[0]
    if len(texts) > 1:
        check_applications(text, source=str(servox_file))
    for conversion in conversions:
        where = f"{conversion.source}: " if len(conversions) > 1 else ""
        for item in conversion.not_converted:
            click.echo(f"not converted: {where}{item}", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    if output.exists() and not force:
        raise ConfigError("exists: give --force to replace it", source=str(output))
    write_file(output, text, OUTPUT_MODE)
    connectors = sum(len(conversion.data.get("connectors", [])) for conversion in conversions)
    applications = f"{len(conversions)} applications, " if len(conversions) > 1 else ""
    click.echo(f"wrote {output} ({applications}{connectors} connector(s))", err=True)
