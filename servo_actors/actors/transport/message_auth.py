"""Authenticated actor messages: only processes that hold this servo's key can talk to its actors.

Thespian 4.0.1 unpickles whatever arrives on any actor's TCP port, so any local user (or a stale
message from another servo's dead actors, on a port ours reused) could run code as the servo.
``patch_transport`` changes Thespian's TCP framing, ``b"%d>" % len(body) + body``, so that the
body is ``tag + pickle`` where ``tag`` is an HMAC-SHA256 of the pickle under the message key.
A frame whose tag does not verify is refused before anything is unpickled: the connection is
closed, the refusal is logged with the peer's address (at most one line per
``REFUSAL_LOG_INTERVAL`` per process, with a count of the ones not logged) and the actor keeps
serving. Thespian's acknowledgements are pickles too and carry a tag like any message.

The key lives in memory only (never on disk, never in logs). By default it is made once per servo
process (``os.urandom``) before the first actor system is forked, and every actor process inherits
it through fork. A system that must talk to actor systems of other processes (other hosts in a
Thespian convention) installs a shared key from a file instead, before it starts::

    from servo_actors.actors.transport import message_auth
    message_auth.install_key(message_auth.key_from_file("/etc/servo/convention.key"))

Not covered: a peer that can read loopback traffic (root) could replay a frame it saw during the
same run; such a peer can read the key from the servo's memory anyway.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import pickle
import stat
import threading
import time
from pathlib import Path
from typing import Any

from servo_actors.errors import SupervisorError

__all__ = [
    "KEY_BYTES",
    "MAC_DOMAIN",
    "MAX_FRAME_BYTES",
    "REFUSAL_LOG_INTERVAL",
    "TAG_BYTES",
    "authenticated_frame",
    "ensure_key",
    "install_key",
    "key_from_file",
    "key_installed",
    "patch_transport",
    "reset_refusal_reports",
]

KEY_BYTES = 32
"""Length of a random per-run key, and the least a key from a file may have."""
TAG_BYTES = hashlib.sha256().digest_size
MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest frame accepted: a peer announcing more is refused before it makes us buffer it."""
REFUSAL_LOG_INTERVAL = 10.0
"""Seconds between two log lines about refused frames in one process (a flood cannot fill the disk)."""
MAC_DOMAIN = b"servo-actors message v1\0"
"""Prefix of every MAC input: a tag made for anything else with the same key never verifies here."""
_THESPLOG_FILE_MINIMUM = 10 * 1024
"""Thespian's thesplog writes its file only when its size cap is at least this (utilis.thesplog)."""
_HEADER_LIMIT = 40
"""Thespian's own bound: bytes without a '>' after which a frame has no readable length."""

_key: bytes | None = None
_mac_start: Any = None
_in_use = False
_patched = False
_refusals = {"last_logged": float("-inf"), "unlogged": 0}
_refusal_lock = threading.Lock()


def key_installed() -> bool:
    """Whether this process has its message key (random or installed) yet."""
    return _key is not None


def install_key(key: bytes) -> None:
    """Use ``key`` for every actor system this process starts (and that it forks).

    Call before the first actor system of the process starts: its processes keep the key they
    were forked with, so changing it afterwards would cut them off. SupervisorError then, and for
    a key shorter than ``KEY_BYTES``.
    """
    global _key, _mac_start
    if not isinstance(key, (bytes, bytearray)) or len(key) < KEY_BYTES:
        raise SupervisorError(f"a message key must be at least {KEY_BYTES} bytes")
    key = bytes(key)
    if _in_use and not hmac.compare_digest(key, _key or b""):
        raise SupervisorError(
            "the message key cannot change once an actor system of this process has started; "
            "install it before the first one starts"
        )
    _key = key
    _mac_start = hmac.new(key, MAC_DOMAIN, hashlib.sha256)


def ensure_key() -> None:
    """A random per-run key unless one is installed; from now on the key is fixed (see install_key)."""
    global _in_use
    if _key is None:
        install_key(os.urandom(KEY_BYTES))
    _in_use = True


def key_from_file(path: str | os.PathLike[str]) -> bytes:
    """The shared key in ``path`` (its bytes, surrounding whitespace removed).

    SupervisorError naming the file when it cannot be read, is readable or writable by other
    users than its owner, or holds fewer than ``KEY_BYTES`` bytes. The key itself is never shown.
    """
    where = Path(path)
    try:
        info = where.stat()
        # Checked before reading: a FIFO would block the read, and a key others can read is no key.
        if not stat.S_ISREG(info.st_mode):
            raise SupervisorError(f"secret file {where}: not a regular file")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SupervisorError(
                f"secret file {where}: other users may access it (mode {stat.S_IMODE(info.st_mode):04o}); "
                "chmod 600 it"
            )
        raw = where.read_bytes().strip()
    except OSError as exc:
        raise SupervisorError(f"secret file {where}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) < KEY_BYTES:
        raise SupervisorError(
            f"secret file {where}: holds {len(raw)} bytes; a key needs at least {KEY_BYTES}"
        )
    return raw


def _tag(payload: bytes | memoryview) -> bytes:
    mac = _mac_start.copy()
    mac.update(payload)
    return mac.digest()


def authenticated_frame(message: Any, serialize: Any = pickle.dumps) -> bytes:
    """Thespian's frame of ``message`` with the tag in front of the pickle (replaces toSendBuffer)."""
    payload = serialize(message)
    return b"".join((b"%d>" % (TAG_BYTES + len(payload)), _tag(payload), payload))


def _authentic(body: bytes | bytearray) -> bool:
    if _mac_start is None or len(body) < TAG_BYTES:
        return False
    view = memoryview(body)
    return hmac.compare_digest(view[:TAG_BYTES], _tag(view[TAG_BYTES:]))


def _report_refusal(peer: str, reason: str) -> None:
    with _refusal_lock:
        now = time.monotonic()
        if now - _refusals["last_logged"] < REFUSAL_LOG_INTERVAL:
            _refusals["unlogged"] += 1
            return
        unlogged, _refusals["unlogged"], _refusals["last_logged"] = _refusals["unlogged"], 0, now
    more = f"; {unlogged} more refused since the last report" if unlogged else ""
    text = f"refused a message from {peer}: {reason} (not from this servo's processes){more}"
    import thespian.system.utilis as utilis

    if utilis._thesplog_control_settings[2] >= _THESPLOG_FILE_MINIMUM:
        # One line appended to the run's thespian.log (size-capped by Thespian): Python logging in
        # an actor process would travel through the very transport that is refusing.
        utilis.thesplog("%s", text, level=logging.WARNING)
    else:
        # Thespian's logger process turns thesplog off; it is the logging sink itself, so Python
        # logging there writes straight to the run's connectors.log. Looked up now: that process
        # replaced the logging manager after it was forked.
        logging.getLogger(__name__).warning("%s", text)


def reset_refusal_reports() -> None:
    """The next refusal is logged at once (a new actor system logs to a new run directory)."""
    _refusals.update(last_logged=float("-inf"), unlogged=0)


def _fresh_refusal_count() -> None:
    # A forked process logs its own first refusal, whatever its parent logged recently; the lock
    # may have been held by another thread of the parent at the fork.
    global _refusal_lock
    _refusal_lock = threading.Lock()
    reset_refusal_reports()


os.register_at_fork(after_in_child=_fresh_refusal_count)


def _peer_of(sock: Any) -> str:
    try:
        host, port, *_ = sock.getpeername()
    except (OSError, AttributeError, TypeError, ValueError):
        return "an unknown peer"
    return f"{host}:{port}"


def _receive_buffer_class() -> type[Any]:
    from thespian.system.transport.streamBuffer import ReceiveBuffer

    class AuthenticatedReceiveBuffer(ReceiveBuffer):
        """Thespian's receive buffer that verifies the tag before it unpickles anything."""

        _buf: bytes | bytearray  # Thespian's; turned into a bytearray once the frame's size is known

        def __init__(self, serializer: Any = None) -> None:
            # Whatever deserializer Thespian passes, only pickle.loads runs, and only after the check.
            super().__init__(pickle.loads)
            self.refusal: str | None = None
            self.peer: str | None = None
            self._verified = False
            self._message: tuple[Any] | None = None

        def addMore(self, buf: Any) -> None:  # noqa: N802 (Thespian's name)
            if self.refusal is not None:
                return
            try:
                super().addMore(buf)
            except ValueError:
                self._refuse("no readable frame length")
                return
            if self._size is not None and type(self._buf) is bytes:
                # Thespian appends each read with bytes +=, a copy of all so far: quadratic in the
                # frame's size (a result of a million points arrives in a hundred reads or more).
                self._buf = bytearray(self._buf)
            if self._size is None and len(self._buf) > _HEADER_LIMIT:
                # Thespian would keep buffering such a stream for ever.
                self._refuse(f"no frame length in the first {_HEADER_LIMIT} bytes")
            elif self._size is not None and not TAG_BYTES <= self._size <= MAX_FRAME_BYTES:
                self._refuse(f"a frame of {self._size} bytes")

        def _refuse(self, reason: str) -> None:
            self.refusal, self._buf, self._extra = reason, b"", b""

        def isDone(self) -> bool:  # noqa: N802
            return self.refusal is not None or super().isDone()

        def remainingAmount(self) -> int:  # noqa: N802
            return 1 if self.refusal is not None else super().remainingAmount()

        def verdict(self) -> str | None:
            """None once a complete frame verified; the reason it is refused otherwise."""
            if self.refusal is None and not self._verified and super().isDone():
                if self._size is None:
                    self._refuse(f"no frame length in the first {_HEADER_LIMIT} bytes")
                elif _authentic(self._buf):
                    self._verified = True
                else:
                    self._refuse("its authentication tag does not verify")
            return self.refusal

        def completed(self) -> Any:
            if not self.isDone():
                return None
            if self.verdict() is not None:
                _report_refusal(self.peer or "an unknown peer", self.refusal or "")
                return None
            if self._message is None:
                # Once: a message that arrives where an acknowledgement was awaited is asked for
                # twice by Thespian (is it an ack? then as an incoming message), and unpickling a
                # large result takes a good part of a second.
                self._message = (pickle.loads(memoryview(self._buf)[TAG_BYTES:]),)
            return self._message[0], self._extra

    return AuthenticatedReceiveBuffer


def patch_transport() -> None:
    """Authenticate every frame of Thespian's TCP transport in this process and those it forks.

    Needs the key (``ensure_key`` first). Idempotent. Every path that unpickles goes through a
    ``ReceiveBuffer`` made by the TCPTransport module (incoming messages, acknowledgements, a
    message arriving on a socket that waits for an acknowledgement), so replacing that class there
    covers them all; the incoming path is also wrapped so a refusal closes the connection quietly
    instead of going through Thespian's error path (a traceback in the log per refused frame).
    """
    global _patched
    if _patched:
        return
    if _mac_start is None:
        raise SupervisorError(
            "no message key: ensure_key() or install_key() before starting the actor system"
        )
    import thespian.system.transport.TCPTransport as tcp
    from thespian.system.transport.streamBuffer import ackDataErrPacket, ackPacket

    buffer_class = _receive_buffer_class()
    tcp.ReceiveBuffer = buffer_class
    tcp.toSendBuffer = authenticated_frame
    tcp.ackMsg = authenticated_frame(ackPacket)
    tcp.ackDataErrMsg = authenticated_frame(ackDataErrPacket)

    transport = tcp.TCPTransport
    incoming = transport._addedDataToIncoming
    awaiting_ack = transport._check_XMIT_4_done

    @functools.wraps(incoming)
    def refuse_unauthenticated(self: Any, inc: Any, *args: Any, **kwargs: Any) -> Any:
        received = getattr(inc, "_rData", None)
        if isinstance(received, buffer_class) and received.isDone():
            reason = received.verdict()
            if reason is not None:
                _report_refusal(_peer_of(inc.socket), reason)
                inc.close()
                return None
        return incoming(self, inc, *args, **kwargs)

    @functools.wraps(awaiting_ack)
    def name_the_acknowledger(self: Any, intent: Any, received: Any) -> Any:
        # An acknowledgement that does not verify makes Thespian retry the send (its "corrupted
        # ACK" path); the buffer logs the refusal with the address the message was going to.
        ack_buffer = getattr(intent, "ackbuf", None)
        if isinstance(ack_buffer, buffer_class) and ack_buffer.peer is None:
            ack_buffer.peer = str(getattr(intent, "targetAddr", "") or "") or None
        return awaiting_ack(self, intent, received)

    transport._addedDataToIncoming = refuse_unauthenticated
    transport._check_XMIT_4_done = name_the_acknowledger
    _patched = True
