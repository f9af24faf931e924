"""Suspending the router from the control port.

`SuspendGate` is one flag and an event. While it is closed, every
connection's blocks wait before they are read and before they are written
(`GatedTransport`), so the router takes no commands, stores nothing and
delivers nothing; the listener stops accepting too (`Router.suspend`).
While open, it costs one attribute test per block.
"""

from __future__ import annotations

from typing import Protocol

import trio

from .block_stream import BlockStream, block_ready_check, sends_now


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
    """A BlockStream whose blocks wait at the gate while the router is suspended."""

    __slots__ = ("inner", "_gate", "remote", "web_challenge")

    def __init__(self, inner: BlockStream, gate: SuspendGate) -> None:
        self.inner = inner
        self._gate = gate
        self.remote = inner.remote
        self.web_challenge = inner.web_challenge

    @property
    def stalled(self) -> bool:
        return self.inner.stalled

    async def receive_block(self) -> bytes:
        block = await self.inner.receive_block()
        if self._gate.suspended:
            await self._gate.wait_resumed()
        return block

    async def send_block(self, block: bytes) -> None:
        if self._gate.suspended:
            await self._gate.wait_resumed()
        await self.inner.send_block(block)

    async def send_blocks(self, blocks: list[bytes]) -> None:
        if self._gate.suspended:
            await self._gate.wait_resumed()
        await self.inner.send_blocks(blocks)

    def block_ready(self) -> bool:
        return not self._gate.suspended and block_ready_check(self.inner)()

    def can_send_now(self) -> bool:
        inner = sends_now(self.inner)
        return not self._gate.suspended and inner is not None and inner.can_send_now()

    def send_blocks_now(self, blocks: list[bytes]) -> bool:
        inner = sends_now(self.inner)
        assert inner is not None
        return inner.send_blocks_now(blocks)

    def established(self) -> None:
        self.inner.established()

    async def aclose(self, timeout: float) -> None:
        await self.inner.aclose(timeout)


class Suspendable(Protocol):
    """A listener that can stop and restart accepting (the edge listener)."""

    def suspend(self) -> None: ...

    def resume(self) -> None: ...
