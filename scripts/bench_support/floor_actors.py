"""The actors of scripts/bench_transport_floor.py: the least a Thespian round trip of the servo's
shape can cost. A hub (the supervisor's place) takes one request, calls each of its leaves (the
connector hosts' place), and answers once every leaf has replied: 2N + 2 messages for N leaves,
as a no-op operation costs the servo. No rules, no bookkeeping: only the transport.

Message classes live here, not in ``__main__``: Thespian pickles them by module path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from thespian.actors import Actor, ActorExitRequest, ChildActorExited

__all__ = ["Call", "Done", "FloorHub", "FloorLeaf", "Reply", "Request", "Setup"]


@dataclass(frozen=True)
class Setup:
    leaves: int


@dataclass(frozen=True)
class Request:
    request_id: int


@dataclass(frozen=True)
class Call:
    request_id: int


@dataclass(frozen=True)
class Reply:
    request_id: int


@dataclass(frozen=True)
class Done:
    request_id: int
    pids: tuple[int, ...] = ()


class FloorLeaf(Actor):  # type: ignore[misc]  # Thespian is untyped
    def receiveMessage(self, message: Any, sender: Any) -> None:
        if isinstance(message, Call):
            self.send(sender, Reply(message.request_id))
        elif isinstance(message, Setup):
            self.send(sender, Done(-1, (os.getpid(),)))


class FloorHub(Actor):  # type: ignore[misc]  # Thespian is untyped
    def __init__(self) -> None:
        super().__init__()
        self._leaves: list[Any] = []
        self._asker: Any = None
        self._waiting = 0
        self._request = 0
        self._pids: list[int] = []

    def receiveMessage(self, message: Any, sender: Any) -> None:
        if isinstance(message, Setup):
            self._asker = sender
            self._leaves = [self.createActor(FloorLeaf) for _ in range(message.leaves)]
            self._waiting = len(self._leaves)
            self._pids = [os.getpid()]
            for leaf in self._leaves:
                self.send(leaf, message)
        elif isinstance(message, Done) and message.request_id == -1:
            self._pids.extend(message.pids)
            self._waiting -= 1
            if self._waiting == 0:
                self.send(self._asker, Done(-1, tuple(self._pids)))
        elif isinstance(message, Request):
            self._asker, self._request, self._waiting = sender, message.request_id, len(self._leaves)
            for leaf in self._leaves:
                self.send(leaf, Call(message.request_id))
        elif isinstance(message, Reply) and message.request_id == self._request:
            self._waiting -= 1
            if self._waiting == 0:
                self.send(self._asker, Done(self._request))
        elif isinstance(message, ActorExitRequest | ChildActorExited):
            pass
