"""An ASGI WebSocket as the router's block transport.

ASGI servers (Hypercorn, Uvicorn) and the frameworks on them (Starlette,
FastAPI, Quart) hand an application each WebSocket as a `scope` and two
callables, `receive` and `send` (the ASGI specification, "WebSocket"). This
module turns that connection into a `BlockStream`, so the router serves it
with the same connection code as its own listener's (the handshake, the
commands, the deliveries): it only translates ASGI events into blocks and back.

One `websocket.receive` with `bytes` is one block; text, or bytes of another
size, end the connection, as on the router's own listener. The server's read
queue and writes hold back a peer that sends faster than the router reads, or
reads slower than the router writes; a write that does not complete within the
stalled-writer timeout drops the peer.

The router runs on Trio, so the server must run the application on Trio too:
Hypercorn with its Trio worker.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import trio

from router.protocol.block import BLOCK_SIZE
from router.protocol.handshake import web_challenge

from .block_stream import STREAM_GONE, BlockStream, TransportClosed
from .transports import SendsWithinDeadline

# ASGI's parts, as loosely typed as the specification defines them.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

NORMAL_CLOSURE = 1000


def asgi_remote(scope: Scope) -> str:
    """`host:port` of the peer as the server saw it, or "?"."""
    client = scope.get("client")
    if not client:
        return "?"
    host, port = client[0], client[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


class ASGIBlockTransport(SendsWithinDeadline):
    """Blocks in and out of an accepted ASGI WebSocket connection.

    Writes go through one writer task (`run_writer`) and an unbuffered channel:
    a block is handed over once the previous one is written. Some servers write
    to the socket in a scope that cannot be cancelled (Hypercorn does), so the
    stalled-writer deadline (SendsWithinDeadline, as for the other transports)
    is kept on the hand-over, where it can be: a peer that stops reading is
    dropped by the router one block later, and the writer task ends when the
    server's write returns (when the peer reads, or its connection ends).
    """

    __slots__ = ("_receive", "_asgi_send", "_stalled_timeout", "_gone", "_to_writer",
                 "_writer_in", "remote", "stalled", "web_challenge")

    def __init__(
        self, receive: Receive, send: Send, remote: str, *, stalled_timeout: float = math.inf,
        web_challenge: bytes | None = None,
    ) -> None:
        self._receive = receive
        self._asgi_send = send
        self._stalled_timeout = stalled_timeout
        self._gone = False  # the peer disconnected, or the writer ended: nothing more to read
        self._to_writer, self._writer_in = trio.open_memory_channel[Message](0)
        self.remote = remote
        self.stalled = False
        self.web_challenge = web_challenge

    def established(self) -> None:
        pass  # the ASGI server keeps its own counts

    async def run_writer(self) -> None:
        """Write what `send_block` and `aclose` hand over, in order, until closed."""
        async with self._writer_in:
            async for message in self._writer_in:
                try:
                    await self._asgi_send(message)
                except OSError:  # what servers raise once the connection is gone (ASGI spec)
                    self._gone = True
                    return

    def _send(self, block: bytes) -> Awaitable[None]:
        """The hand-over to the writer; a writer that ended makes it fail (STREAM_GONE)."""
        return self._to_writer.send({"type": "websocket.send", "bytes": block})

    async def receive_block(self) -> bytes:
        if self._gone:
            raise TransportClosed("peer closed the connection")
        message = await self._receive()
        kind = message.get("type")
        if kind == "websocket.disconnect":
            self._gone = True
            raise TransportClosed(f"peer closed the connection ({message.get('code')})")
        if kind != "websocket.receive":
            raise TransportClosed(f"unexpected ASGI event {kind!r}")
        data = message.get("bytes")
        if data is None:
            raise TransportClosed("text message instead of a block")
        if len(data) != BLOCK_SIZE:
            raise TransportClosed(f"message of {len(data)} bytes instead of a block")
        return bytes(data)

    async def aclose(self, timeout: float) -> None:
        """Close the WebSocket (code 1000) within `timeout`, and end the writer;
        with no timeout, or a peer gone or stalled, only end the writer."""
        if not (self._gone or self.stalled) and timeout > 0:
            with trio.move_on_after(timeout):
                try:
                    await self._to_writer.send({"type": "websocket.close",
                                                "code": NORMAL_CLOSURE})
                except STREAM_GONE:
                    pass
        self._gone = True
        self._to_writer.close()


async def serve_asgi_websocket(
    serve_transport: Callable[[BlockStream], Awaitable[None]],
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    stalled_timeout: float = math.inf,
) -> None:
    """Accept the WebSocket of `scope` and hand it to `serve_transport` (the
    router's) until the client leaves. A client that leaves before the
    `websocket.connect` event is not accepted."""
    first = await receive()
    if first.get("type") != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    query = scope.get("query_string", b"")
    transport = ASGIBlockTransport(receive, send, asgi_remote(scope),
                                   stalled_timeout=stalled_timeout,
                                   web_challenge=web_challenge(b"?" + query))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(transport.run_writer)
        try:
            await serve_transport(transport)
        finally:
            await transport.aclose(0)  # the writer ends (the router closed it already)
