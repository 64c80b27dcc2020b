"""``servo-actors kube cleanup``: remove the tuning pods a servo outside the cluster left behind.

A servo running in the cluster (deploy/kubernetes) owns its tuning pods through its Deployment,
so deleting the servo deletes them; one running elsewhere cannot, and a tuning pod stays until
someone removes it. This command reads the config, and for each ``kubernetes`` connector deletes
the tuning pods (label ``servo-actors.io/role: tuning``) of the Deployments it configures, waiting
until each is gone. ``--dry-run`` only lists them. Exit 1 when the cluster cannot be reached.
"""

from __future__ import annotations

import click

from servo_actors.cli.context import CliState, echo_json, json_option, pass_state
from servo_actors.errors import ConnectorError, UsageError

__all__ = [
    "KUBERNETES_TYPE",
    "cleanup_cmd",
    "kube_cmd",
]

KUBERNETES_TYPE = "kubernetes"


@click.group("kube")
def kube_cmd() -> None:
    """Kubernetes helpers for the kubernetes connector."""


@kube_cmd.command("cleanup")
@click.option("--connector", "only", default=None, help="Only this connector (by name).")
@click.option("--dry-run", is_flag=True, help="List the tuning pods, delete nothing.")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds to wait for each pod to be gone.")  # fmt: skip
@json_option
@pass_state
def cleanup_cmd(state: CliState, only: str | None, dry_run: bool, timeout: float, as_json: bool) -> None:
    """Delete leftover tuning pods (strategy: tuning) of the configured Deployments."""
    from servo_actors.connectors.kubernetes.client import KubeClient, KubeError
    from servo_actors.connectors.kubernetes.config import KubernetesConfig
    from servo_actors.connectors.kubernetes.kubeconfig import KubeConfigError, resolve_access
    from servo_actors.connectors.kubernetes.tuning_checks import cleanup

    specs = [
        s for s in state.config.connectors if s.type == KUBERNETES_TYPE and (only is None or s.name == only)
    ]
    if not specs:
        raise UsageError(
            f"no kubernetes connector named {only!r} in the config"
            if only
            else "no kubernetes connector in the config"
        )
    removed: dict[str, list[str]] = {}
    for spec in specs:
        try:
            config = KubernetesConfig.model_validate(spec.config)
        except ValueError as exc:  # pydantic's ValidationError (the loader has checked it already)
            raise UsageError(f"connector {spec.name!r}: {exc}") from None
        try:
            client = KubeClient(resolve_access(config.kubeconfig, config.context), config.request_timeout)
        except KubeConfigError as exc:
            raise ConnectorError(f"connector {spec.name!r}: {exc}") from None
        try:
            removed[spec.name] = cleanup(client, config, timeout, dry_run=dry_run)
        except KubeError as exc:
            raise ConnectorError(f"connector {spec.name!r}: {exc}") from None
        finally:
            client.close()
    if as_json:
        echo_json({"dry_run": dry_run, "pods": removed})
        return
    verb = "would delete" if dry_run else "deleted"
    for name, pods in removed.items():
        for pod in pods:
            click.echo(f"{name}: {verb} pod {pod}")
        if not pods:
            click.echo(f"{name}: no tuning pods")
