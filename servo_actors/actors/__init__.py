"""Connectors as supervised actors: each in its own process, killed and respawned fresh on
cancel, deadline or crash (architecture.md). ``ServoRuntime`` is the whole public surface the
runner and the CLI need; the rest is the machinery behind it, in four subpackages:

- ``rules``: the supervision rules, pure (state machines on events and a clock passed in), and
  the plain data they exchange;
- ``linux``: process control (process trees, cgroups, kills, the lifeline, the watchdog, /proc);
- ``transport``: the Thespian transport (the actor system, message authentication, patches);
- ``convention``: hosts of a convention (connectors placed on other machines).

On top of them: ``runtime`` (the servo's side), ``operation_path`` (the one way an operation is
performed), ``supervisor`` and ``host`` (the actors) and ``declared_times``.

The modules' old paths (``servo_actors.actors.processes`` and so on, before the split) still
import, as the same module objects, for one release (README, migration notes): ``_OLD_PATHS``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

from servo_actors.actors.rules.results import ConnectorOutcome, OperationResult
from servo_actors.actors.runtime import CancelRequest, Operation, ServoRuntime

__all__ = ["CancelRequest", "ConnectorOutcome", "Operation", "OperationResult", "ServoRuntime"]

_OLD_PATHS = {
    **{
        name: f"rules.{name}"
        for name in (
            "supervision",
            "supervision_events",
            "supervision_operation",
            "restart_policy",
            "restart_ledger",
            "results",
            "messages",
            "member_messages",
            "placement",
        )
    },
    **{name: f"linux.{name}" for name in ("processes", "cgroups", "descendants", "lifeline", "watchdog")},
    **{
        name: f"transport.{name}"
        for name in ("system", "message_auth", "thespian_patches", "thespian_internals", "plain_data")
    },
    **{name: f"convention.{name}" for name in ("member", "remote_hosts", "agent")},
}
"""Module of ``servo_actors.actors`` before the split -> where it is now (under this package).
``convention`` needs no entry: the package re-exports its old module's names."""


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``servo_actors.actors.<old>`` as the moved module itself, with a DeprecationWarning."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in _OLD_PATHS:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        moved = f"{__name__}.{_OLD_PATHS[spec.name.rpartition('.')[2]]}"
        warnings.warn(f"{spec.name} moved to {moved}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(moved)

    def exec_module(self, module: ModuleType) -> None:
        return None  # the moved module, already run


if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
    sys.meta_path.append(_OldPaths())
