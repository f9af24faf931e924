"""Helpers for the listener's tests: a real router on 127.0.0.1, a well-behaved
client, and a raw attacker that speaks HTTP and WebSocket framing by hand."""

from __future__ import annotations

import base64
import os
import struct
from contextlib import AbstractAsyncContextManager

import loopback_router
import trio

from router.client import SMPClient, open_client
from router.server import RouterInfo
from router.server.edge.listener import EdgeListener

OP_CONT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x2, 0x8, 0x9, 0xA
SERVED_WITHIN = 10.0  # seconds a well-behaved client may need on a loaded 2-core machine


def running_router(**settings: object) -> AbstractAsyncContextManager[RouterInfo]:
    """The tests' router (loopback_router.py); at several workers, the supervisor's
    shape: one listening socket and the router's caps on connections kept for every
    worker (worker_count.py `RouterListener` is then its `listener`)."""
    return loopback_router.running_router(shared_listener=True, **settings)


def listener(info: RouterInfo) -> EdgeListener:
    assert info.listener is not None
    return info.listener


async def exchange(client: SMPClient) -> None:
    """PING gets PONG, and a SEND to a subscribed queue comes back as MSG."""
    await client.ping()
    queue = await client.create_queue(subscribe=True)
    await client.send(queue.sender_id, b"hello")
    event = await client.next_event()
    assert event.body == b"hello"  # type: ignore[union-attr]
    await client.ack(queue, event.msg_id)  # type: ignore[union-attr]


async def assert_served(info: RouterInfo) -> None:
    """A new well-behaved client connects and gets PING->PONG and SEND->MSG."""
    with trio.fail_after(SERVED_WITHIN):
        async with open_client(info.address) as client:
            await exchange(client)


async def connect_raw(info: RouterInfo, source: str | None = None) -> trio.SocketStream:
    """A TCP connection to the router, from `source` (another loopback address) if given."""
    if source is None:
        return await trio.open_tcp_stream("127.0.0.1", info.port)
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", info.port))
    return trio.SocketStream(sock)


def upgrade_request(path: str = "/") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


async def read_response_head(stream: trio.SocketStream) -> bytes:
    """The HTTP response head (b"" if the router closed first)."""
    head = b""
    while b"\r\n\r\n" not in head:
        try:
            data = await stream.receive_some(4096)
        except trio.BrokenResourceError:
            return head
        if not data:
            return head
        head += data
    return head.split(b"\r\n\r\n", 1)[0]


async def upgraded(info: RouterInfo, source: str | None = None) -> trio.SocketStream:
    """A raw connection past the WebSocket upgrade (the SMP handshake not begun)."""
    stream = await connect_raw(info, source)
    await stream.send_all(upgrade_request())
    head = await read_response_head(stream)
    assert head.startswith(b"HTTP/1.1 101"), head
    return stream


async def read_all(stream: trio.SocketStream) -> bytes:
    """Everything the router sends until it closes the connection."""
    data = b""
    while True:
        try:
            chunk = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return data
        if not chunk:
            return data
        data += chunk


def client_frame(opcode: int, payload: bytes = b"", fin: bool = True) -> bytes:
    """A masked client frame; the zero mask leaves the payload as it is."""
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", first, 0x80 | n)
    elif n < 65536:
        header = struct.pack("!BBH", first, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", first, 0x80 | 127, n)
    return header + b"\0\0\0\0" + payload


async def wait_closed_by_router(stream: trio.SocketStream) -> None:
    """Read (and drop) whatever the router sends until it closes the connection."""
    while True:
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:
            return
        if not data:
            return


async def send_until_closed(stream: trio.SocketStream, data: bytes, times: int) -> int:
    """Send `data` up to `times` times; how many went out before the router closed."""
    for i in range(times):
        try:
            await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return i
    return times
