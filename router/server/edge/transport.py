"""SMP blocks over WebSockets, and the router side of the handshake.

One binary WebSocket message is one 16384-byte block (docs/protocol.md#websocket); a
message of any other size, or a text message, ends the connection. The router
serves connections through one interface, `BlockStream`: the router's own listener
gives a `router.server.edge.listener.WebSocketTransport`, `BlockTransport` here wraps a
trio-websocket connection a host program accepted itself (`handle_websocket`), and
`memory_block_pair` gives two connected in-memory ends (as trio's
`memory_stream_pair`), for serving a client in the same process without a socket.
Library exceptions become `TransportClosed` in the transport, once, so nothing
above it catches them.

Handshake (docs/protocol.md#handshake): the router sends its hello first (versions
9..10, a fresh random 32-byte session id, its identity certificate and a
signed key), then waits a bounded time for the client hello. A version outside the range, a key hash
other than the router's, or a service proof (this router's hello extension,
docs/protocol.md#service-extension) that does not verify closes the connection without an error
block. A valid proof is kept for the service commands.
"""

from __future__ import annotations

import logging
import math
import secrets
from dataclasses import dataclass
from typing import Protocol

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from router.protocol.block import BLOCK_SIZE, pad_block, unpad_block
from router.protocol.crypto import verify_service_proof
from router.protocol.handshake import (
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    ClientHello,
    ServerHello,
    ServiceProof,
    decode_client_hello,
    encode_server_hello,
)
from router.protocol.types import ProtocolError

log = logging.getLogger(__name__)

SESSION_ID_SIZE = 32
# Bytes asked of the socket per read: four blocks, so a 16 KB message takes one
# read, not four (trio-websocket's default is 4 KB). Not more: CPython allocates
# the whole size for every recv(), and at 128 KB and above glibc serves that with
# mmap/munmap, which measured 4-6x slower per message than 64 KB.
RECEIVE_BUFFER_SIZE = 64 * 1024
# Whole messages trio-websocket may hold before its reader stops reading.
MESSAGE_QUEUE_SIZE = 4

_STREAM_ERRORS = (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError)


class TransportClosed(Exception):
    """The connection cannot go on: the peer left, broke the framing, or stalled."""


@dataclass(frozen=True, slots=True)
class Handshake:
    version: int
    session_id: bytes
    client_key: bytes | None  # the client's X25519 SPKI, unused at v9/v10
    service: ServiceProof | None  # the service extension's proof, checked by the router


class BlockStream(Protocol):
    """What the router's connection code needs of a transport."""

    remote: str
    stalled: bool  # set when the peer stopped reading

    async def receive_block(self) -> bytes: ...

    async def send_block(self, block: bytes) -> None: ...

    async def send_blocks(self, blocks: list[bytes]) -> None:
        """Send blocks in order (in one write where the transport can)."""

    def established(self) -> None:
        """The SMP handshake is through (the listener stops counting it as pending)."""

    async def aclose(self, timeout: float) -> None: ...


class BlockTransport:
    """Blocks in and out of a trio-websocket connection a host program accepted."""

    __slots__ = ("_ws", "_stalled_timeout", "remote", "stalled")

    def __init__(self, ws: WebSocketConnection, *, stalled_timeout: float) -> None:
        self._ws = ws
        self._stalled_timeout = stalled_timeout
        self.remote = _describe(ws)
        self.stalled = False  # set when the peer stopped reading

    def established(self) -> None:
        pass  # the host program's listener keeps its own counts

    async def receive_block(self) -> bytes:
        try:
            message = await self._ws.get_message()
        except _STREAM_ERRORS as e:
            raise TransportClosed("peer closed the connection") from e
        if isinstance(message, str):
            raise TransportClosed("text message instead of a block")
        if len(message) != BLOCK_SIZE:
            raise TransportClosed(f"message of {len(message)} bytes instead of a block")
        return message

    async def send_block(self, block: bytes) -> None:
        """Send one block; a peer that does not take it within the deadline is dropped."""
        with trio.move_on_after(self._stalled_timeout) as scope:
            try:
                await self._ws.send_message(block)
            except _STREAM_ERRORS as e:
                raise TransportClosed("peer closed the connection") from e
        if scope.cancelled_caught:
            self.stalled = True
            raise TransportClosed(f"peer did not read for {self._stalled_timeout} s")

    async def send_blocks(self, blocks: list[bytes]) -> None:
        for block in blocks:
            await self.send_block(block)

    async def aclose(self, timeout: float) -> None:
        """Close politely within `timeout`; a zero timeout just drops the TCP stream."""
        with trio.move_on_after(timeout):
            try:
                await self._ws.aclose()
            except _STREAM_ERRORS:
                pass


class MemoryBlockTransport:
    """One end of `memory_block_pair`: blocks go to the other end through a bounded
    in-memory channel, so a reader that stops reading holds its peer's writes back
    as a socket would."""

    __slots__ = ("_out", "_in", "_stalled_timeout", "remote", "stalled")

    def __init__(
        self,
        out: trio.MemorySendChannel[bytes],
        into: trio.MemoryReceiveChannel[bytes],
        remote: str,
        stalled_timeout: float,
    ) -> None:
        self._out = out
        self._in = into
        self._stalled_timeout = stalled_timeout
        self.remote = remote
        self.stalled = False

    def established(self) -> None:
        pass  # no listener counts in-memory connections

    async def receive_block(self) -> bytes:
        try:
            block = await self._in.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError) as e:
            raise TransportClosed("peer closed the connection") from e
        if len(block) != BLOCK_SIZE:
            raise TransportClosed(f"message of {len(block)} bytes instead of a block")
        return block

    async def send_block(self, block: bytes) -> None:
        """Send one block; a peer that does not take it within the deadline is dropped."""
        with trio.move_on_after(self._stalled_timeout) as scope:
            try:
                await self._out.send(block)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
                raise TransportClosed("peer closed the connection") from e
        if scope.cancelled_caught:
            self.stalled = True
            raise TransportClosed(f"peer did not read for {self._stalled_timeout} s")

    async def send_blocks(self, blocks: list[bytes]) -> None:
        for block in blocks:
            await self.send_block(block)

    async def aclose(self, timeout: float = 0) -> None:
        """Close both directions at once: the peer's reads end, its writes fail."""
        self._out.close()
        self._in.close()
        await trio.lowlevel.checkpoint()


def memory_block_pair(
    *, capacity: int = MESSAGE_QUEUE_SIZE, stalled_timeout: float = math.inf
) -> tuple[MemoryBlockTransport, MemoryBlockTransport]:
    """Two connected transports (client end, router end) holding up to `capacity`
    blocks in flight each way."""
    to_router, router_in = trio.open_memory_channel[bytes](capacity)
    to_client, client_in = trio.open_memory_channel[bytes](capacity)
    client = MemoryBlockTransport(to_router, client_in, "memory:router", stalled_timeout)
    router = MemoryBlockTransport(to_client, router_in, "memory:client", stalled_timeout)
    return client, router


def _describe(ws: WebSocketConnection) -> str:
    try:
        return str(ws.remote)
    except Exception:  # a gateway's connection may not be socket-based
        return "?"


async def server_handshake(
    transport: BlockStream,
    key_hash: bytes,
    timeout: float,
    certificates: tuple[tuple[bytes, ...], bytes] | None = None,
) -> Handshake:
    """Run the router side of the handshake; TransportClosed if the client fails it.

    `certificates` (chain, signed key) go into the server hello, so the client
    can check the router's identity before it answers.
    """
    session_id = secrets.token_bytes(SESSION_ID_SIZE)
    chain, signed_key = certificates if certificates is not None else ((), None)
    hello = ServerHello(SMP_VERSION_MIN, SMP_VERSION_MAX, session_id, chain, signed_key)
    await transport.send_block(pad_block(encode_server_hello(hello)))
    with trio.move_on_after(timeout) as scope:
        block = await transport.receive_block()
    if scope.cancelled_caught:
        raise TransportClosed("no client hello in time")
    client = _parse_client_hello(block)
    if not SMP_VERSION_MIN <= client.version <= SMP_VERSION_MAX:
        raise TransportClosed(f"client asked for version {client.version}")
    if client.key_hash != key_hash:
        raise TransportClosed("client hello names another router identity")
    service = client.service
    if service is not None and not verify_service_proof(service, session_id, key_hash):
        raise TransportClosed("client hello carries a service proof that does not verify")
    return Handshake(client.version, session_id, client.client_key, client.service)


def _parse_client_hello(block: bytes) -> ClientHello:
    try:
        return decode_client_hello(unpad_block(block))
    except ProtocolError as e:
        raise TransportClosed(f"bad client hello: {e}") from e
