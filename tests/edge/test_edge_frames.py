"""Frame-level bounds, keepalive, idle clients and fairness, against the real router."""

from __future__ import annotations

import gc
import logging
import sys

import pytest
import trio
import trio_websocket
from edge_helpers import (
    OP_BINARY,
    OP_CONT,
    OP_PING,
    OP_PONG,
    assert_served,
    client_frame,
    listener,
    running_router,
    send_until_closed,
    upgraded,
    wait_closed_by_router,
)

from router.client import ConnectionClosed, open_client
from router.protocol.block import BLOCK_SIZE, pad_block
from router.protocol.handshake import ClientHello, encode_client_hello

ATTACK_BOUND = 10.0  # seconds an attack may take before the router must have ended it


async def flood_until_closed(stream: trio.SocketStream, first: bytes, frame: bytes) -> int:
    """Send `first`, then `frame` in batches until the router closes; frames sent."""
    await stream.send_all(first)
    with trio.fail_after(ATTACK_BOUND):
        batches = await send_until_closed(stream, frame * 1000, 10**6)
    return batches * 1000


@pytest.mark.parametrize("first, frame", [
    # a message that never ends: FIN=0, then empty continuation frames
    (client_frame(OP_BINARY, b"abcdef", fin=False), client_frame(OP_CONT, b"", fin=False)),
    # one block as 16,384 one-byte frames
    (client_frame(OP_BINARY, b"a", fin=False), client_frame(OP_CONT, b"a", fin=False)),
    # control frames instead of blocks
    (b"", client_frame(OP_PING, b"")),
    (b"", client_frame(OP_PONG, b"")),
], ids=["endless-message", "one-byte-frames", "pings", "pongs"])
async def test_a_fragmented_message_is_cut_off_at_the_frame_cap(first: bytes, frame: bytes):
    async with running_router(max_message_frames=16) as info:
        edge = listener(info)
        attackers = [await upgraded(info) for _ in range(3)]
        async with trio.open_nursery() as nursery:
            for stream in attackers:
                nursery.start_soon(flood_until_closed, stream, first, frame)
            await assert_served(info)  # during the attack
        # each attacker was closed long before 16,384 frames could be read
        with trio.fail_after(5):
            await edge.wait_connections_at_most(0)
        await assert_served(info)


async def test_a_message_that_takes_too_long_is_cut_off():
    async with running_router(message_timeout=1.0, max_message_frames=10_000) as info:
        stream = await upgraded(info)
        await stream.send_all(client_frame(OP_BINARY, b"a", fin=False))

        async def trickle() -> None:
            for _ in range(10_000):
                await stream.send_all(client_frame(OP_CONT, b"a", fin=False))
                await trio.sleep(0.05)

        with trio.fail_after(1.0 + 4):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                await wait_closed_by_router(stream)
                nursery.cancel_scope.cancel()
        await assert_served(info)


async def test_a_block_in_a_few_frames_is_accepted():
    async with running_router() as info:
        stream = await upgraded(info)
        received = b""  # the router's hello (read with what follows it)
        hello = pad_block(encode_client_hello(ClientHello(10, info.key_hash)))
        quarter = BLOCK_SIZE // 4
        frames = [client_frame(OP_BINARY, hello[:quarter], fin=False)]
        frames += [client_frame(OP_CONT, hello[i:i + quarter], fin=False)
                   for i in range(quarter, BLOCK_SIZE - quarter, quarter)]
        frames.append(client_frame(OP_CONT, hello[-quarter:]))
        await stream.send_all(b"".join(frames) + client_frame(OP_PING, b"!"))
        pong = b"\x8a\x01!"  # answered once the hello before it was taken
        with trio.fail_after(5):
            while pong not in received:
                data = await stream.receive_some(65536)
                assert data, "the router closed the connection"
                received += data
        assert info.router.statistics().connections == 1  # of any worker


async def test_one_flooding_connection_does_not_starve_another():
    async with running_router() as info, open_client(info.address) as flooder:

        async def ping_forever() -> None:
            while True:
                await flooder.ping()

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(ping_forever)
            await assert_served(info)
            await assert_served(info)
            nursery.cancel_scope.cancel()


async def test_a_websocket_ping_is_answered():
    async with running_router() as info, open_client(info.url, info.key_hash) as client:
        with trio.fail_after(5):
            await client.websocket_ping()


async def test_a_peer_answering_pings_stays_and_a_dead_one_is_dropped():
    async with running_router(keepalive_interval=0.2, keepalive_timeout=0.2) as info:
        edge = listener(info)
        async with trio_websocket.open_websocket_url(info.url, max_message_size=BLOCK_SIZE):
            dead = await upgraded(info)  # reads, but never answers a ping
            with trio.fail_after(0.4 + 4):
                await wait_closed_by_router(dead)
            await trio.sleep(1.0)  # five keepalive periods of a live but silent peer
            assert edge.open_connections == 1


async def test_an_idle_client_without_subscriptions_is_dropped():
    async with running_router(idle_timeout=0.5) as info:
        async with open_client(info.address) as subscribed, open_client(info.address) as idle:
            await subscribed.create_queue(subscribe=True)
            with trio.fail_after(0.5 + 4), pytest.raises(ConnectionClosed):
                await idle.next_event()
            await subscribed.ping()  # its subscription keeps it
        await assert_served(info)


def _large_buffers(roots: list[object], limit: int = 1024) -> list[int]:
    """Sizes of byte buffers of `limit` bytes or more reachable from `roots`, not
    counting what is reachable only through modules, classes or loggers."""
    seen: set[int] = set()
    stack = list(roots)
    found = []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | logging.Logger | type(sys)) or (
            isinstance(obj, dict) and "__builtins__" in obj  # a module's globals
        ):
            continue
        seen.add(id(obj))
        if isinstance(obj, bytes | bytearray):
            if sys.getsizeof(obj) >= limit:
                found.append(sys.getsizeof(obj))
            continue
        stack.extend(gc.get_referents(obj))
    return found


async def test_an_idle_connection_keeps_nothing_of_its_last_block():
    async with running_router() as info, open_client(info.url, info.key_hash) as client:
        queue = await client.create_queue(subscribe=True)
        await client.send(queue.sender_id, b"x" * 1000)
        await client.next_event()
        await client.ping()
        conn = info.router.connection_for_session(client.session_id)
        assert conn is not None
        # under the suspend gate (gate.py) and the block encryption (encrypted.py)
        encrypted = conn.transport.inner
        transport = encrypted.inner
        await trio.testing.wait_all_tasks_blocked()
        assert _large_buffers([encrypted, transport._protocol, transport._events]) == []
