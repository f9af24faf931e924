"""The suspend gate wraps every connection's transport: it must offer all of it."""

from __future__ import annotations

import inspect

import trio
import trio.testing

from router.server.edge.block_stream import BlockStream
from router.server.edge.gate import GatedTransport, SuspendGate


def test_the_gated_transport_has_every_member_of_the_block_stream_interface():
    members = {name for name, _ in inspect.getmembers(BlockStream)
               if not name.startswith("_")} | set(BlockStream.__annotations__)
    assert members and all(hasattr(GatedTransport, name) for name in members), members


class _Blocks:
    remote, stalled, web_challenge = "peer", False, None

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def receive_block(self) -> bytes:
        return b"block"

    async def send_block(self, block: bytes) -> None:
        self.sent.append(block)

    async def send_blocks(self, blocks: list[bytes]) -> None:
        self.sent.extend(blocks)


async def test_blocks_wait_while_suspended_and_flow_after_resume():
    gate, inner = SuspendGate(), _Blocks()
    transport = GatedTransport(inner, gate)  # type: ignore[arg-type]
    gate.suspend()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.send_blocks, [b"a", b"b"])
        nursery.start_soon(transport.receive_block)
        await trio.testing.wait_all_tasks_blocked()
        assert inner.sent == []
        gate.resume()
    assert inner.sent == [b"a", b"b"] and not gate.suspended
