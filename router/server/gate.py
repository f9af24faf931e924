"""Suspending the router from the control port, and noticing idle clients.

`SuspendGate` is one flag and an event. While it is closed, every
connection's blocks wait before they are read and before they are written
(`GatedTransport`), so the router takes no commands, stores nothing and
delivers nothing; the listener stops accepting too (`Router.suspend`).
The wrapper also stamps the time of each block received, which is all the
inactive-client check needs. Its cost when open is one attribute test and
one clock read per block.
"""

from __future__ import annotations

from typing import Protocol

import trio

from .transport import BlockTransport


class SuspendGate:
    __slots__ = ("suspended", "_resumed")

    def __init__(self) -> None:
        self.suspended = False
        self._resumed = trio.Event()
        self._resumed.set()

    def suspend(self) -> None:
        if not self.suspended:
            self.suspended = True
            self._resumed = trio.Event()

    def resume(self) -> None:
        self.suspended = False
        self._resumed.set()

    async def wait_resumed(self) -> None:
        await self._resumed.wait()


class GatedTransport:
    """A BlockTransport whose blocks wait at the gate; remembers when the client last
    sent one."""

    __slots__ = ("_inner", "_gate", "remote", "last_received")

    def __init__(self, inner: BlockTransport, gate: SuspendGate) -> None:
        self._inner = inner
        self._gate = gate
        self.remote = inner.remote
        self.last_received = trio.current_time()

    async def receive_block(self) -> bytes:
        block = await self._inner.receive_block()
        self.last_received = trio.current_time()
        if self._gate.suspended:
            await self._gate.wait_resumed()
        return block

    async def send_block(self, block: bytes) -> None:
        if self._gate.suspended:
            await self._gate.wait_resumed()
        await self._inner.send_block(block)


class Suspendable(Protocol):
    """A listener that can stop and restart accepting (the edge listener)."""

    def suspend(self) -> None: ...

    def resume(self) -> None: ...
