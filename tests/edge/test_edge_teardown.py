"""A connection that ends leaves nothing for the garbage collector on the router's
side: no reference cycle that only a full collection would free. A reconnection
storm of 20,000 clients used to leave 200,000 such objects (the framing's parser
and the error that stopped it, each holding the connection's protocol), and a
full collection over a large relay's heap is a pause of seconds."""

from __future__ import annotations

import gc
import struct
import types
from collections.abc import Awaitable, Callable

import trio
from edge_helpers import (
    OP_BINARY,
    assert_served,
    client_frame,
    connect_raw,
    listener,
    read_response_head,
    running_router,
    upgrade_request,
    upgraded,
)

from router.client import open_client
from router.protocol.block import encode_batches, pad_block
from router.protocol.codec import encode_command
from router.protocol.handshake import SMP_VERSION_MAX, ClientHello, encode_client_hello
from router.protocol.transmission import encode_transmission
from router.protocol.types import PING, Transmission

ROUNDS = 5


def _routers_own(obj: object) -> str | None:
    """What `obj` is if it belongs to the router's side of a connection."""
    if isinstance(obj, types.FrameType):
        path = obj.f_code.co_filename
        if "/router/server/" in path or "/websockets/" in path:
            return f"frame {obj.f_code.co_name} ({path.rsplit('/', 2)[-2]})"
        return None
    module = type(obj).__module__
    if module.startswith(("websockets", "router.server", "router.protocol")):
        return f"{module}.{type(obj).__name__}"
    return None


async def _dropped_after_upgrade(info) -> None:
    stream = await upgraded(info)
    await trio.aclose_forcefully(stream)


async def _read_frame_payload(stream: trio.SocketStream) -> bytes:
    """One unmasked frame from the router (its payload)."""
    data = b""

    async def need(n: int) -> bytes:
        nonlocal data
        while len(data) < n:
            chunk = await stream.receive_some(65536)
            assert chunk, "the router closed the connection"
            data += chunk
        taken, data = data[:n], data[n:]
        return taken

    length = (await need(2))[1] & 0x7F
    if length == 126:
        length = struct.unpack("!H", await need(2))[0]
    elif length == 127:
        length = struct.unpack("!Q", await need(8))[0]
    return await need(length)


async def _dropped_once_established(info) -> None:
    """Past the SMP handshake, with a PING answered: then the socket just closes."""
    stream = await upgraded(info)
    await _read_frame_payload(stream)  # the server hello
    hello = pad_block(encode_client_hello(ClientHello(SMP_VERSION_MAX, info.key_hash)))
    await stream.send_all(client_frame(OP_BINARY, hello))
    ping = encode_transmission(Transmission(b"", b"1", b"", encode_command(PING())))
    await stream.send_all(client_frame(OP_BINARY, encode_batches([ping])[0]))
    await _read_frame_payload(stream)  # the PONG
    await trio.aclose_forcefully(stream)


async def _dropped_before_the_request(info) -> None:
    stream = await connect_raw(info)
    await trio.aclose_forcefully(stream)


async def _dropped_during_the_request(info) -> None:
    stream = await connect_raw(info)
    await stream.send_all(upgrade_request()[:20])
    await trio.aclose_forcefully(stream)


async def _closed_by_a_client(info) -> None:
    async with open_client(info.address) as client:
        await client.create_queue(subscribe=True)


async def _leftovers(info, end_one: Callable[..., Awaitable[None]]) -> list[str]:
    edge = listener(info)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept, to be looked at
    try:
        for _ in range(ROUNDS):
            await end_one(info)
        with trio.fail_after(10):
            await edge.wait_connections_at_most(0)
        gc.collect()
        return [what for obj in gc.garbage if (what := _routers_own(obj)) is not None]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_connections_that_end_leave_no_cycle_on_the_routers_side():
    async with running_router() as info:
        await assert_served(info)  # the router's own objects of a first connection exist
        for end_one in (_dropped_once_established, _dropped_after_upgrade,
                        _dropped_before_the_request,
                        _dropped_during_the_request, _closed_by_a_client):
            assert await _leftovers(info, end_one) == [], end_one.__name__


async def test_refused_connections_leave_no_cycle_either():
    async with running_router(max_pending_per_address=1) as info:
        holder = await connect_raw(info)  # holds the one place of 127.0.0.1
        with trio.fail_after(10):
            while listener(info).pending < 1:
                await trio.sleep(0.01)

        async def refused(info) -> None:
            stream = await connect_raw(info)
            await stream.send_all(upgrade_request())
            assert b"503" in await read_response_head(stream)
            await stream.aclose()

        edge = listener(info)
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(ROUNDS):
                await refused(info)
            gc.collect()
            left = [what for obj in gc.garbage if (what := _routers_own(obj)) is not None]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
            await holder.aclose()
        assert left == []
        assert edge.refused >= ROUNDS
