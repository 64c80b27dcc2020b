"""Start-up self-check: the Thespian internals this servo patches or reads are all still there.

The runtime patches and reads parts of Thespian 4.0.1 that are not its public API (system.py,
message_auth.py, thespian_patches.py). With another version, or an installation someone patched, a missing attribute
would not fail loudly: a patch would not take (messages unauthenticated, sockets on 0.0.0.0), or a
lookup would quietly return nothing (child PIDs unknown). ``check_thespian`` runs before the
first actor system starts and raises a SupervisorError naming everything that is not as expected.

An entry's ``uses`` lists names its code must still use: an attribute it stores, or a module
global it reads at call time (which is what makes replacing that global work).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from dataclasses import dataclass
from typing import Any

from servo_actors.errors import SupervisorError

__all__ = [
    "INTERNALS",
    "Internal",
    "THESPIAN_VERSION",
    "check_thespian",
    "installed_version",
    "thespian_problems",
]

THESPIAN_VERSION = "4.0.1"
"""The one Thespian version whose internals this servo was written and measured against."""

_TCP = "thespian.system.transport.TCPTransport"
_BUFFER = "thespian.system.transport.streamBuffer"
_MULTIPROC = "thespian.system.multiprocCommon"
_CONVENTION = "thespian.system.admin.convention"


@dataclass(frozen=True)
class Internal:
    """``module``.``path`` must exist; if ``uses`` is given, its code must use those names."""

    module: str
    path: str
    uses: tuple[str, ...] = ()
    why: str = ""


INTERNALS: tuple[Internal, ...] = (
    # system.patch_thespian
    Internal("thespian.system.transport.IPBase", "IPActorAddress.bindArgs", why="loopback-only binds"),
    Internal(
        "thespian.system.transport.IPBase", "IPActorAddress.__init__", ("bindname",), "loopback-only binds"
    ),
    Internal(_MULTIPROC, "MultiProcReplicator._checkChildLiveness", why="child exit codes"),
    Internal(_MULTIPROC, "MultiProcReplicator._childExited", ("_checkChildLiveness",), "child exit codes"),
    Internal("thespian.system.transport", "DEFAULT_MAX_TRANSMIT_PERIOD", why="the transmit timeout"),
    Internal(
        "thespian.system.transport",
        "TransmitIntent.__init__",
        ("DEFAULT_MAX_TRANSMIT_PERIOD",),
        "the transmit timeout",
    ),
    Internal(_TCP, "LISTEN_DEPTH", why="the listen queue"),
    Internal(_TCP, "TCPTransport.__init__", ("LISTEN_DEPTH",), "the listen queue"),
    # thespian_patches
    Internal(
        _TCP,
        "TCPTransport.interrupt_wait",
        ("_checkChildren", "_shutdownSignalled"),
        "one wake-up per child check",
    ),
    Internal(
        "thespian.system.transport", "ReceiveEnvelope.identify", why="log lines formatted only when logged"
    ),
    Internal(
        "thespian.system.transport",
        "ReceiveEnvelope.__str__",
        ("identify",),
        "log lines formatted only when logged",
    ),
    Internal(
        "thespian.system.transport", "TransmitIntent.identify", why="log lines formatted only when logged"
    ),
    # message_auth.patch_transport
    Internal(_TCP, "ReceiveBuffer", why="message authentication"),
    Internal(_TCP, "toSendBuffer", why="message authentication"),
    Internal(_TCP, "ackMsg", why="message authentication"),
    Internal(_TCP, "ackDataErrMsg", why="message authentication"),
    Internal(_TCP, "TCPTransport.serializer", ("toSendBuffer",), "message authentication"),
    Internal(
        _TCP,
        "TCPTransport._addedDataToIncoming",
        ("ackMsg", "ackDataErrMsg", "data"),
        "message authentication",
    ),
    Internal(
        _TCP,
        "TCPTransport._check_XMIT_4_done",
        ("ackbuf", "completed", "ReceiveBuffer"),
        "message authentication",
    ),
    Internal(_TCP, "TCPTransport._next_XMIT_3", ("ReceiveBuffer", "ackbuf"), "message authentication"),
    Internal(_TCP, "TCPIncoming_Common.__init__", ("ReceiveBuffer", "_rData"), "message authentication"),
    Internal(_TCP, "TCPIncoming_Common.data", ("_rData", "completed"), "message authentication"),
    Internal(_TCP, "TCPIncoming_Common.socket", why="message authentication"),
    Internal(
        _BUFFER, "ReceiveBuffer.__init__", ("_buf", "_blen", "_size", "_extra"), "message authentication"
    ),
    Internal(_BUFFER, "ReceiveBuffer.addMore", why="message authentication"),
    Internal(_BUFFER, "ReceiveBuffer.isDone", ("_size", "_blen"), "message authentication"),
    Internal(_BUFFER, "ReceiveBuffer.remainingAmount", why="message authentication"),
    Internal(
        _BUFFER, "ReceiveBuffer.completed", ("_deserialize", "_buf", "_extra"), "message authentication"
    ),
    Internal(_BUFFER, "ackPacket", why="message authentication"),
    Internal(_BUFFER, "ackDataErrPacket", why="message authentication"),
    # system.child_pid, forget_child, tracked_child_addresses
    Internal("thespian.system.actorManager", "ActorManager._createInstance", ("_myRef",), "child PIDs"),
    Internal(_MULTIPROC, "MultiProcReplicator._startChildActor", ("_child_procs", "ChildInfo"), "child PIDs"),
    Internal(_MULTIPROC, "ChildInfo.__init__", ("childAddr", "childProc"), "child PIDs"),
    Internal(
        "thespian.system.systemCommon",
        "systemCommonBase.__init__",
        ("_addrManager", "_children"),
        "child bookkeeping",
    ),
    Internal(
        "thespian.system.addressManager", "ActorAddressManager.__init__", ("_managed",), "child bookkeeping"
    ),
    Internal(
        "thespian.system.addressManager",
        "ActorLocalAddress.__init__",
        ("addressInstanceNum",),
        "child bookkeeping",
    ),
    # system.ActorSystemHandle
    Internal(
        "thespian.actors", "ActorSystem._startupActorSys", ("_systemBase",), "closing this process's endpoint"
    ),
    Internal(
        "thespian.system.systemBase", "systemBase.__init__", ("transport",), "closing this process's endpoint"
    ),
    Internal("thespian.system.utilis", "_thesplog_file", why="the run directory's thespian.log"),
    Internal("thespian.system.utilis", "_thesplog_old_file", why="the run directory's thespian.log"),
    Internal("thespian.system.utilis", "thesplog", why="logging refused messages"),
    # convention (remote_hosts.py, member.py): member announcements, rejoining, forgetting the lost
    Internal("thespian.actors", "ActorSystemConventionUpdate.remoteAdminAddress", why="member announcements"),
    Internal("thespian.actors", "ActorSystemConventionUpdate.remoteCapabilities", why="member announcements"),
    Internal("thespian.actors", "ActorSystemConventionUpdate.remoteAdded", why="member announcements"),
    Internal(
        _CONVENTION,
        "LocalConventionState.got_convention_register",
        ("ActorSystemConventionUpdate",),
        "member announcements",
    ),
    Internal(
        _CONVENTION,
        "LocalConventionState.capabilities_have_changed",
        ("setup_convention",),
        "rejoining a convention",
    ),
    Internal(
        _CONVENTION,
        "LocalConventionState.setup_convention",
        ("ConventionRegister",),
        "rejoining a convention",
    ),
    Internal(
        _CONVENTION,
        "LocalConventionState.got_convention_deregister",
        ("_remote_system_cleanup",),
        "forgetting lost members",
    ),
    Internal("thespian.actors", "Actor.deRegisterRemoteSystem", why="forgetting lost members"),
    Internal("thespian.actors", "Actor.notifyOnSystemRegistrationChanges", why="member announcements"),
    Internal("thespian.actors", "Actor.updateCapability", why="rejoining a convention"),
    Internal("thespian.system.utilis", "_thesplog_control_settings", why="logging refused messages"),
)


def _code_names(found: Any) -> set[str] | None:
    if isinstance(found, property):
        found = found.fget
    found = inspect.unwrap(found)  # our patches wrap with functools.wraps: check what they wrap
    code = getattr(found, "__code__", None)
    return set(code.co_names) if code is not None else None


def _problem(internal: Internal) -> str | None:
    name = f"{internal.module}.{internal.path}"
    try:
        found: Any = importlib.import_module(internal.module)
    except ImportError as exc:
        return f"module {internal.module} cannot be imported ({exc})"
    for part in internal.path.split("."):
        # Through the class dict when there is one: a property must be seen as a property.
        attrs = getattr(found, "__dict__", {}) if isinstance(found, type) else {}
        if part in attrs:
            found = attrs[part]
        elif hasattr(found, part):
            found = getattr(found, part)
        else:
            return f"{name} is missing"
        if isinstance(found, (staticmethod, classmethod)):
            found = found.__func__
    if internal.uses:
        names = _code_names(found)
        lacking = [use for use in internal.uses if names is None or use not in names]
        if lacking:
            return f"{name} no longer uses {', '.join(lacking)}"
    return None


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("thespian")
    except importlib.metadata.PackageNotFoundError:
        return None


def thespian_problems() -> list[str]:
    """What is not as this servo expects, one sentence each (empty when all is well)."""
    problems = []
    version = installed_version()
    if version != THESPIAN_VERSION:
        problems.append(
            f"thespian {version} is installed, not {THESPIAN_VERSION}"
            if version
            else "thespian is not installed"
        )
    for internal in INTERNALS:
        problem = _problem(internal)
        if problem is not None:
            problems.append(f"{problem} (needed for {internal.why})" if internal.why else problem)
    return problems


def check_thespian() -> None:
    """SupervisorError listing every problem ``thespian_problems`` finds; nothing when all is well."""
    problems = thespian_problems()
    if problems:
        raise SupervisorError(
            f"Thespian is not as servo-actors needs it (thespian=={THESPIAN_VERSION}): " + "; ".join(problems)
        )
