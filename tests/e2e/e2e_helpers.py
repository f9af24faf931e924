"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio_websocket

from router.client import RecipientQueue, SMPClient
from router.protocol import crypto
from router.protocol.block import BLOCK_SIZE, BatchPacker, pad_block, unpad_block
from router.protocol.handshake import ClientHello, decode_server_hello, encode_client_hello
from router.protocol.transmission import encode_transmission
from router.protocol.types import IDS, NEW, OK, SEND, Transmission
from router.server import RouterInfo
from router.server.core.connection import Connection


async def create_queues(
    client: SMPClient, n: int, *, subscribe: bool = False, snd_secure: bool = False
) -> list[RecipientQueue]:
    """`n` queues made with NEW commands packed into few blocks."""
    keys = [(crypto.new_ed25519(), crypto.new_x25519()) for _ in range(n)]
    requests = [
        (b"", NEW(auth_key, dh_key, None, subscribe, snd_secure), seed)
        for (seed, auth_key), (_, dh_key) in keys
    ]
    queues = []
    for ((seed, auth_key), (dh_priv, _)), resp in zip(
        keys, await client.commands(requests), strict=True
    ):
        assert isinstance(resp, IDS), resp
        box = crypto.box_key(dh_priv, resp.srv_dh_key)
        q = RecipientQueue(
            resp.rcv_id, resp.snd_id, seed, auth_key, dh_priv, resp.srv_dh_key, box, snd_secure
        )
        client.add_queue(q)
        queues.append(q)
    return queues


async def send_many(client: SMPClient, messages: Sequence[tuple[bytes, bytes]]) -> None:
    """Unsigned SENDs `(sender_id, body)` packed into few blocks; every one must be OK."""
    responses = await client.commands([(sid, SEND(b"F", body), None) for sid, body in messages])
    assert all(isinstance(r, OK) for r in responses), {type(r) for r in responses}


async def assert_no_more_events(client: SMPClient) -> None:
    """Whatever the router pushed before answering PING has arrived by then."""
    await client.ping()
    assert client.next_event_nowait() is None


def router_connection(info: RouterInfo, client: SMPClient) -> Connection:
    conn = info.router.connection_for_session(client.session_id)
    assert conn is not None
    return conn


def raw_block(*transmissions: Transmission) -> bytes:
    packer = BatchPacker()
    for t in transmissions:
        assert packer.add(encode_transmission(t))
    return packer.take_block()


@asynccontextmanager
async def raw_connection(
    info: RouterInfo, *, version: int = 10, key_hash: bytes | None = None, hello: bool = True,
    message_queue_size: int = 16,
) -> AsyncIterator[tuple[trio_websocket.WebSocketConnection, bytes]]:
    """A bare WebSocket to the router, past the handshake unless `hello` is False.

    Yields the connection and the session id from the server hello; for tests
    that need to misbehave in ways the client library will not.
    """
    async with trio_websocket.open_websocket_url(
        info.url, message_queue_size=message_queue_size, max_message_size=BLOCK_SIZE
    ) as ws:
        server_hello = decode_server_hello(unpad_block(await ws.get_message()))
        if hello:
            client_hello = ClientHello(version, info.key_hash if key_hash is None else key_hash)
            await ws.send_message(pad_block(encode_client_hello(client_hello)))
        yield ws, server_hello.session_id


async def wait_closed(ws: trio_websocket.WebSocketConnection) -> None:
    """Read until the router closes the connection."""
    with contextlib.suppress(trio_websocket.ConnectionClosed):
        while True:
            await ws.get_message()
