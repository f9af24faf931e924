"""The block transport interface: what the router's connection code needs of a
transport (`BlockStream`), and how a transport says the connection is over
(`TransportClosed`).

One binary WebSocket message is one 16384-byte block (docs/protocol.md#websocket); a
message of any other size, or a text message, ends the connection. The router
serves connections through this one interface: its own listener gives a
`websocket.WebSocketTransport` or a `native_tls.TlsBlockTransport` (SMP over TLS),
and `transports.py` has the other two. Library
exceptions become `TransportClosed` in the transport, once, so nothing above it
catches them.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

# Bytes asked of the socket per read: four blocks, so a 16 KB message takes one
# read, not four (trio-websocket's default is 4 KB). Not more: CPython allocates
# the whole size for every recv(), and at 128 KB and above glibc serves that with
# mmap/munmap, which measured 4-6x slower per message than 64 KB.
RECEIVE_BUFFER_SIZE = 64 * 1024
# Whole messages trio-websocket may hold before its reader stops reading.
MESSAGE_QUEUE_SIZE = 4

# What trio raises when the peer left or the stream was closed under the caller.
STREAM_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


def block_ready_check(transport: object) -> Callable[[], bool]:
    """The transport's `block_ready`, or one that always says no (a transport that
    cannot tell)."""
    check = getattr(transport, "block_ready", None)
    return check if callable(check) else _never


def _never() -> bool:
    return False


class SendsNow(Protocol):
    """A transport that can write from any task without waiting (see `BlockStream`)."""

    def can_send_now(self) -> bool: ...

    def send_blocks_now(self, blocks: list[bytes]) -> bool: ...


def sends_now(transport: object) -> SendsNow | None:
    """The transport, if it can write without waiting."""
    return transport if callable(getattr(transport, "send_blocks_now", None)) else None  # type: ignore[return-value]


class WritesSocketNow(ABC):
    """The writing half of `send_blocks_now` for a transport that drives its own
    socket and keeps, in `_unsent`, what the socket did not take of a write made
    now (its `_take_data` puts that first)."""

    __slots__ = ()
    _socket: socket.socket | None
    _writing: bool
    _unsent: bytes

    @abstractmethod
    def _take_data(self) -> bytes:
        """What is to be written next, in order (each transport's own framing)."""

    def _write_queued_now(self) -> bool:
        """Write what is queued as far as the socket takes it now: True if it took
        all (or a task that is writing will send it), else the rest is kept."""
        if self._writing:
            return True  # the task writing sends it before it returns
        assert self._socket is not None
        data = self._take_data()
        sent = send_available(self._socket, data)
        if sent < len(data):
            self._unsent = data[sent:]
            return False
        return True


def send_available(sock: socket.socket, data: bytes) -> int:
    """Write what the socket takes of `data` now, without waiting: how much it took."""
    try:
        return sock.send(data)
    except BlockingIOError:
        return 0
    except OSError as e:
        raise TransportClosed("peer closed the connection") from e


class TransportClosed(Exception):
    """The connection cannot go on: the peer left, broke the framing, or stalled."""


class BlockStream(Protocol):
    """What the router's connection code needs of a transport."""

    remote: str
    stalled: bool  # set when the peer stopped reading
    # The challenge of the WebSocket URL (docs/protocol.md#web-identity-proof), read at the
    # upgrade; None when the URL had none or the transport has no URL.
    web_challenge: bytes | None

    async def receive_block(self) -> bytes: ...

    async def send_block(self, block: bytes) -> None: ...

    async def send_blocks(self, blocks: list[bytes]) -> None:
        """Send blocks in order (in one write where the transport can)."""

    def established(self) -> None:
        """The SMP handshake is through (the listener stops counting it as pending)."""

    # A transport may also have `block_ready() -> bool`: whether a whole block is in
    # already, so that `receive_block` returns it without waiting (`answers_ready`);
    # and `can_send_now() -> bool` with `send_blocks_now(blocks) -> bool` (`SendsNow`):
    # when it can, write blocks from any task without waiting, True when the socket
    # took them all, False when the rest waits for the next `send_blocks` (of any
    # blocks, or none) to write it first.

    async def aclose(self, timeout: float) -> None: ...


class StalledPeer(TransportClosed):
    """The peer did not take what was written within the stalled-writer deadline."""


async def send_on_socket(
    sock: socket.socket | None, data: bytes, stalled_timeout: float,
    send_all: Callable[[bytes | memoryview], Awaitable[None]] | None = None,
) -> None:
    """Write `data` to a transport's plain socket: straight away when the socket takes
    it all (the usual case: no pass through the scheduler, no deadline), else the rest
    as the socket drains, within `stalled_timeout`. Without a socket (a stream that is
    not plain TCP) `send_all` writes it all, within the same deadline. Raises
    `TransportClosed`; `StalledPeer` when the deadline passed."""
    view: bytes | memoryview = data
    if sock is not None:
        sent = send_available(sock, data)
        if sent == len(data):
            return
        view = memoryview(data)[sent:]
    with trio.move_on_after(stalled_timeout) as scope:
        try:
            if sock is None:
                assert send_all is not None
                await send_all(view)
                return
            view = memoryview(view)
            while view:
                await trio.lowlevel.wait_writable(sock)
                try:
                    view = view[sock.send(view):]
                except BlockingIOError:
                    pass
        except (*STREAM_GONE, OSError) as e:
            raise TransportClosed("peer closed the connection") from e
    if scope.cancelled_caught:
        raise StalledPeer(f"peer did not read for {stalled_timeout} s")
