"""A write made now (`send_blocks_now`, edge/block_stream.py): from any task and
without waiting, the socket takes what it can; the rest stays with the transport
and the next write sends it first, so the peer gets every byte in order.

Over a socket pair whose buffers are made small, so that the socket fills."""

from __future__ import annotations

import socket

import trio
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

from router.server.edge.listener import DEFAULT_LIMITS
from router.server.edge.websocket import WebSocketTransport

BLOCK_SIZE = 16384


def _frame(block: bytes) -> bytes:
    """A server's binary frame (unmasked) of one block."""
    return b"\x82\x7e" + len(block).to_bytes(2, "big") + block


def _transport_and_peer() -> tuple[WebSocketTransport, trio.SocketStream]:
    """An open WebSocket transport on one end of a socket pair with small buffers."""
    a, b = trio.socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    protocol = ServerProtocol()
    protocol.state = OPEN
    transport = WebSocketTransport(trio.SocketStream(a), protocol, "peer", DEFAULT_LIMITS)
    return transport, trio.SocketStream(b)


async def _read(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(65536)
        assert chunk, "closed early"
        data += chunk
    return bytes(data)


async def test_what_the_socket_does_not_take_now_goes_first_with_the_next_write():
    transport, peer = _transport_and_peer()
    blocks = [bytes([i]) * BLOCK_SIZE for i in range(12)]

    assert transport.can_send_now()
    written = [transport.send_blocks_now([block]) for block in blocks[:8]]
    assert False in written, "the socket never filled: buffers too large for this test"
    later = blocks[8:]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            received: list[bytes] = []

            async def read_all() -> None:
                received.append(await _read(peer, sum(len(_frame(x)) for x in blocks)))

            nursery.start_soon(read_all)
            await transport.send_blocks(later)  # the rest of the writes made now first
    assert received == [b"".join(_frame(x) for x in blocks)]


async def test_a_write_made_now_while_another_task_writes_is_sent_by_that_task():
    transport, peer = _transport_and_peer()
    first, second = b"\x01" * BLOCK_SIZE, b"\x02" * BLOCK_SIZE
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            writing = trio.Event()

            async def write_first() -> None:
                writing.set()
                await transport.send_blocks([first] * 4)  # more than the socket takes

            nursery.start_soon(write_first)
            await writing.wait()  # the writer now waits for the peer to read
            assert transport.send_blocks_now([second]) is True  # queued for the writer
            data = await _read(peer, 4 * len(_frame(first)) + len(_frame(second)))
    assert data == _frame(first) * 4 + _frame(second)
