"""A scripted SMP peer for client tests: the router's half of the wire, nothing more.

It serves WebSockets on 127.0.0.1 port 0, sends a server hello, reads the
client hello, and hands the connection to a test's script, which reads the
client's blocks and answers with whatever it likes (out of order, pushes,
errors, garbage). It knows nothing of queues: the script does.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio
import trio_websocket

from router.client import RecipientQueue, format_address
from router.protocol import (
    BLOCK_SIZE,
    ClientHello,
    ServerHello,
    Transmission,
    crypto,
    decode_batch,
    decode_client_hello,
    decode_command,
    decode_transmission,
    encode_batches,
    encode_response_transmission,
    encode_server_hello,
    pad_block,
    unpad_block,
)
from router.protocol.types import MSG, Command, Response

IDENTITY_CERT = b"fake identity certificate"
KEY_HASH = hashlib.sha256(IDENTITY_CERT).digest()


@dataclass
class PeerConnection:
    """The peer's view of one client connection after the handshake."""

    ws: trio_websocket.WebSocketConnection
    hello: ClientHello
    session_id: bytes
    blocks_received: int = 0

    async def receive(self) -> list[Transmission]:
        """The transmissions of the client's next block."""
        block = await self.ws.get_message()
        self.blocks_received += 1
        return [decode_transmission(t) for t in decode_batch(block)]

    async def receive_commands(self, count: int) -> list[tuple[Transmission, Command]]:
        """At least `count` transmissions (over as many blocks as they take), decoded."""
        out: list[tuple[Transmission, Command]] = []
        while len(out) < count:
            out += [(t, decode_command(t.command)) for t in await self.receive()]
        return out

    async def send(self, answers: Sequence[tuple[bytes, bytes, Response]]) -> None:
        """(corrId, entityId, response) triples, packed in order into blocks."""
        data = [encode_response_transmission(c, e, r) for c, e, r in answers]
        for block in encode_batches(data):
            await self.ws.send_message(block)

    async def send_transmissions(self, transmissions: Sequence[bytes]) -> None:
        for block in encode_batches(transmissions):
            await self.ws.send_message(block)


Script = Callable[[PeerConnection], Awaitable[None]]


@dataclass
class FakePeer:
    port: int = 0
    key_hash: bytes = KEY_HASH
    hellos: list[ClientHello] = field(default_factory=list)
    # Set when a connection handler has finished (the script returned or failed).
    finished: trio.Event = field(default_factory=trio.Event)
    closed_before_hello: bool = False

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """The peer speaks WebSocket: its URL with the key hash as the user part."""
        key_hash = format_address(self.key_hash, "h", 1).split("@")[0].removeprefix("smp://")
        return f"ws://{key_hash}@127.0.0.1:{self.port}"


@asynccontextmanager
async def fake_peer(
    script: Script,
    *,
    versions: tuple[int, int] = (9, 10),
    cert_chain: tuple[bytes, ...] = (),
    check_key_hash: bool = True,
) -> AsyncIterator[FakePeer]:
    """Serve `script` to every client that connects; stopped on exit."""
    peer = FakePeer()

    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        try:
            conn = await _handshake(peer, ws, versions, cert_chain, check_key_hash)
            if conn is not None:
                await script(conn)
        except trio_websocket.ConnectionClosed:
            pass  # the client went away; the test checks what it needs
        finally:
            peer.finished.set()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            lambda task_status: trio_websocket.serve_websocket(
                handler, "127.0.0.1", 0, None,
                max_message_size=4 * BLOCK_SIZE, task_status=task_status,
            )
        )
        peer.port = server.port
        yield peer
        nursery.cancel_scope.cancel()


async def _handshake(
    peer: FakePeer,
    ws: trio_websocket.WebSocketConnection,
    versions: tuple[int, int],
    cert_chain: tuple[bytes, ...],
    check_key_hash: bool,
) -> PeerConnection | None:
    session_id = os.urandom(32)
    signed_key = b"signed key" if cert_chain else None
    hello = ServerHello(versions[0], versions[1], session_id, cert_chain, signed_key)
    await ws.send_message(pad_block(encode_server_hello(hello)))
    try:
        reply = decode_client_hello(unpad_block(await ws.get_message()))
    except trio_websocket.ConnectionClosed:
        peer.closed_before_hello = True
        return None
    peer.hellos.append(reply)
    if check_key_hash and reply.key_hash != peer.key_hash:
        # what the router does: close, no error block (docs/protocol.md#handshake-client-hello)
        await ws.aclose()
        return None
    return PeerConnection(ws, reply, session_id)


def fake_queue() -> RecipientQueue:
    """Queue credentials as if NEW had run; the peer seals MSGs with `box_key` itself
    (the key is the same from either side of the DH)."""
    seed, spki = crypto.new_ed25519()
    dh_priv, _ = crypto.new_x25519()
    _, srv_dh = crypto.new_x25519()
    box = crypto.box_key(dh_priv, srv_dh)
    return RecipientQueue(os.urandom(24), os.urandom(24), seed, spki, dh_priv, srv_dh, box, True)


def sealed(queue: RecipientQueue, body: bytes, ts: int = 1_700_000_000, quota: bool = False) -> MSG:
    """A MSG for `queue` as the router would seal it (docs/protocol.md#encryption)."""
    msg_id = os.urandom(24)
    return MSG(msg_id, crypto.encrypt_msg_body(queue.box_key, msg_id, ts, b"F", body, quota))
