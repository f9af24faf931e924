"""The in-memory block transport pair: what the router's connection code needs of a
transport, with no socket."""

from __future__ import annotations

import pytest

from router.protocol.block import BLOCK_SIZE, pad_block
from router.server.edge.block_stream import BlockStream, TransportClosed
from router.server.edge.transports import memory_block_pair


def block(text: bytes) -> bytes:
    return pad_block(text)


async def test_blocks_cross_both_ways_in_order():
    client, router = memory_block_pair()
    await client.send_blocks([block(b"one"), block(b"two")])
    assert [await router.receive_block() for _ in range(2)] == [block(b"one"), block(b"two")]
    await router.send_block(block(b"back"))
    assert await client.receive_block() == block(b"back")


async def test_an_end_is_a_block_stream():
    _, router = memory_block_pair()
    stream: BlockStream = router  # the type checker holds it to the interface
    assert stream.remote and not stream.stalled
    stream.established()


async def test_a_message_that_is_not_one_block_ends_the_connection():
    client, router = memory_block_pair()
    await client.send_block(b"x" * (BLOCK_SIZE - 1))
    with pytest.raises(TransportClosed):
        await router.receive_block()


async def test_closing_one_end_ends_the_others_reads_and_fails_its_writes():
    client, router = memory_block_pair()
    await client.aclose()
    with pytest.raises(TransportClosed):
        await router.receive_block()
    with pytest.raises(TransportClosed):
        await router.send_block(block(b"late"))


async def test_a_peer_that_does_not_read_is_dropped_as_stalled(autojump_clock):
    client, router = memory_block_pair(capacity=1, stalled_timeout=5)
    await router.send_block(block(b"fits"))
    with pytest.raises(TransportClosed, match="did not read"):
        await router.send_block(block(b"waits"))
    assert router.stalled and not client.stalled
