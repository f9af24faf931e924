"""The block transports besides the router's own listener (`websocket.py`).

`BlockTransport` wraps a trio-websocket connection a host program accepted
itself (`handle_websocket`), and `memory_block_pair` gives two connected
in-memory ends (as trio's `memory_stream_pair`), for serving a client in the
same process without a socket.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from router.protocol.block import BLOCK_SIZE
from router.protocol.handshake import web_challenge

from .block_stream import MESSAGE_QUEUE_SIZE, STREAM_GONE, TransportClosed

_STREAM_ERRORS = (ConnectionClosed, *STREAM_GONE)


class SendsWithinDeadline(ABC):
    """Sending for the transports here and the ASGI one (asgi.py): a peer that
    does not take a block within `_stalled_timeout` seconds is marked `stalled`
    and dropped."""

    __slots__ = ()
    _SEND_ERRORS: tuple[type[BaseException], ...] = STREAM_GONE
    _stalled_timeout: float
    stalled: bool

    @abstractmethod
    def _send(self, block: bytes) -> Awaitable[None]:
        """Send one block on the underlying connection (each transport's own)."""

    async def send_block(self, block: bytes) -> None:
        """Send one block; a peer that does not take it within the deadline is dropped."""
        with trio.move_on_after(self._stalled_timeout) as scope:
            try:
                await self._send(block)
            except self._SEND_ERRORS as e:
                raise TransportClosed("peer closed the connection") from e
        if scope.cancelled_caught:
            self.stalled = True
            raise TransportClosed(f"peer did not read for {self._stalled_timeout} s")

    async def send_blocks(self, blocks: list[bytes]) -> None:
        for block in blocks:
            await self.send_block(block)


class BlockTransport(SendsWithinDeadline):
    """Blocks in and out of a trio-websocket connection a host program accepted."""

    __slots__ = ("_ws", "_stalled_timeout", "remote", "stalled", "web_challenge")
    _SEND_ERRORS = _STREAM_ERRORS

    def __init__(self, ws: WebSocketConnection, *, stalled_timeout: float) -> None:
        self._ws = ws
        self._stalled_timeout = stalled_timeout
        self.remote = _describe(ws)
        self.stalled = False  # set when the peer stopped reading
        self.web_challenge = web_challenge(_path(ws).encode("latin-1", "replace"))

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

    def _send(self, block: bytes) -> Awaitable[None]:
        return self._ws.send_message(block)

    async def aclose(self, timeout: float) -> None:
        """Close politely within `timeout`; a zero timeout just drops the TCP stream."""
        with trio.move_on_after(timeout):
            try:
                await self._ws.aclose()
            except _STREAM_ERRORS:
                pass


class MemoryBlockTransport(SendsWithinDeadline):
    """One end of `memory_block_pair`: blocks go to the other end through a bounded
    in-memory channel, so a reader that stops reading holds its peer's writes back
    as a socket would."""

    __slots__ = (
        "_out", "_in", "_stalled_timeout", "remote", "stalled", "web_challenge", "peer_chain",
    )

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
        self.web_challenge: bytes | None = None
        # The client certificate chain a TLS edge would have verified: in-memory
        # connections have none unless a test hands the router's end one, to run a
        # service session (docs/protocol.md#client-service) without TLS.
        self.peer_chain: tuple[bytes, ...] = ()

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

    def _send(self, block: bytes) -> Awaitable[None]:
        return self._out.send(block)

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


def _path(ws: WebSocketConnection) -> str:
    try:
        return ws.path or ""
    except Exception:  # a host program's connection object may not know its request
        return ""


def _describe(ws: WebSocketConnection) -> str:
    try:
        return str(ws.remote)
    except Exception:  # a gateway's connection may not be socket-based
        return "?"
