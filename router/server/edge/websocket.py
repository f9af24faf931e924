"""One upgraded connection's blocks in and out: `WebSocketTransport`.

The framing is `websockets`' sans-I/O protocol, driven from the connection's
own tasks: no reader task of a library, nothing buffered between reads. A
message (one block) may take at most `max_message_frames` frames and
`message_timeout` seconds from its first frame to its last (`EdgeLimits`); a
silent peer is pinged, and dropped if the ping goes unanswered.

Keepalive is one sweep for all of a listener's connections (`Keepalive`), not
a timer per connection: a connection waiting for data only notes since when
(`_waiting_since`); every eighth of the shorter of `keepalive_interval` and
`keepalive_timeout` the sweep pings those silent for `keepalive_interval` (in
a short task of its own, so a peer slow to take the ping holds up no other)
and drops those whose ping went unanswered for `keepalive_timeout`, by waking
the waiting read with `trio.lowlevel.notify_closing` (`_abort`). An idle
connection thus keeps no cancel scope and no deadline.

Over plain TCP the socket is read and written directly, without trio's
stream wrapper: a read is one pass of the scheduler (the wake-up when the
socket became readable, or one pass when data was there already), and a
write that the socket takes at once costs none; only a write the peer is
slow to take waits (for `stalled_timeout` at most). Over TLS the
`trio.SSLStream` does the I/O.
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import trio
from websockets.frames import Frame, Opcode
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

from router.protocol.block import BLOCK_SIZE

from ..settings.edge_limits import EdgeLimits
from .arrivals import arrivals
from .block_stream import (
    RECEIVE_BUFFER_SIZE,
    STREAM_GONE,
    StalledPeer,
    TransportClosed,
    WritesSocketNow,
    send_on_socket,
)

# websockets logs every opened and closed connection at INFO: too much for a
# router with thousands of clients. Its warnings and errors still get through.
_framing_log = logging.getLogger(__name__ + ".framing")
_framing_log.setLevel(logging.WARNING)

# A read is parsed in pieces of about one block's frame: tiny frames cost at most
# a piece's parsing before MAX_FRAMES_PER_READ ends the connection; a read holding
# whole blocks has at most a few frames (RECEIVE_BUFFER_SIZE is four blocks).
FEED_SIZE = BLOCK_SIZE + 16
MAX_FRAMES_PER_READ = 64
KEEPALIVE_SWEEPS = 8  # sweeps per the shorter of keepalive_interval and keepalive_timeout
# What a read waits under while no message is in progress: no deadline at all.
_NO_DEADLINE = nullcontext()


class Keepalive:
    """The keepalive of every WebSocket connection of one listener: one periodic sweep.

    A peer is pinged once it has been silent for `keepalive_interval` while its
    connection waited to read, and dropped if nothing at all comes from it within
    `keepalive_timeout` of the ping; a sweep comes every `KEEPALIVE_SWEEPS`th of the
    shorter of the two, so either may be overrun by that much at most.
    """

    __slots__ = ("interval", "timeout", "_transports", "_nursery")

    def __init__(self, limits: EdgeLimits) -> None:
        self.interval = limits.keepalive_interval
        self.timeout = limits.keepalive_timeout
        self._transports: set[WebSocketTransport] = set()
        self._nursery: trio.Nursery | None = None

    def add(self, transport: WebSocketTransport) -> None:
        """Keep `transport` alive until `discard` (the listener's, when it closes)."""
        self._transports.add(transport)

    def discard(self, transport: object) -> None:
        self._transports.discard(transport)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._transports)

    async def run(self) -> None:
        """Sweep until cancelled; the pings are sent from tasks of its own nursery."""
        period = min(self.interval, self.timeout) / KEEPALIVE_SWEEPS
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                await trio.sleep(period)
                self.sweep(trio.current_time())

    def sweep(self, now: float) -> None:
        assert self._nursery is not None
        silent_since = now - self.interval
        pinged_before = now - self.timeout
        unanswered = []
        for transport in self._transports:
            if transport._waiting_since > silent_since:
                continue  # heard from lately, or not waiting to read at all
            if transport._pinged_at == math.inf:
                transport._pinged_at = now
                self._nursery.start_soon(transport._keepalive_ping)
            elif transport._pinged_at <= pinged_before:
                unanswered.append(transport)
        for transport in unanswered:
            self._transports.discard(transport)
            transport._abort(f"no answer to a ping in {self.timeout} s")


class WebSocketTransport(WritesSocketNow):
    """Blocks in and out of one upgraded connection (the router's block transport).

    `receive_block` runs in the connection's receive task and does the reading
    and the per-message bounds itself (the pings are the `Keepalive` sweep's); `send_blocks` runs in
    whichever of the connection's tasks writes. One task writes at a time: what
    another queues meanwhile in the protocol (a pong, a ping, the close frame)
    is sent by the writing task before it returns (`_write_pending`).
    """

    __slots__ = (
        "_stream", "_socket", "_protocol", "_limits", "_events", "_writing", "_unsent",
        "_on_established", "_control_frames", "remote", "stalled", "web_challenge",
        "_waiting_since", "_pinged_at", "_aborted", "_arrivals",
    )

    def __init__(
        self,
        stream: trio.abc.Stream,
        protocol: ServerProtocol,
        remote: str,
        limits: EdgeLimits,
        on_established: Callable[[], None] | None = None,
        web_challenge: bytes | None = None,
    ) -> None:
        self._stream = stream
        self._protocol = protocol
        self._limits = limits
        self._socket = _plain_socket(stream)  # None over TLS
        self._events: list[object] = []  # frames read but not yet taken
        self._writing = False  # a task is in `_write_pending`
        self._unsent = b""  # what the socket did not take of a `send_blocks_now`
        self._on_established = on_established
        self._control_frames = 0  # pings, pongs since the last block
        self.remote = remote
        self.stalled = False
        self.web_challenge = web_challenge
        # Keepalive (the listener's sweep, which holds the transport; the transport
        # does not hold it): since when a read waits (inf: none waits), when the peer
        # was pinged in that wait (inf: not yet), why the sweep dropped it.
        self._waiting_since = math.inf
        self._pinged_at = math.inf
        self._aborted = ""
        self._arrivals = arrivals()

    def established(self) -> None:
        """The SMP handshake is done: the connection no longer counts as pending."""
        if self._on_established is not None:
            self._on_established()
            self._on_established = None

    async def receive_block(self) -> bytes:
        parts: list[bytes] = []
        frames = 0
        message_deadline = math.inf
        while True:
            while self._events:
                frame = self._events.pop(0)
                if not isinstance(frame, Frame):
                    continue
                opcode = frame.opcode
                if opcode is Opcode.BINARY or opcode is Opcode.CONT:
                    frames += 1
                    if frames == 1:
                        message_deadline = trio.current_time() + self._limits.message_timeout
                    parts.append(frame.data)
                    frame.data = b""  # the parser's last frame must not keep the block alive
                    if frame.fin:
                        self._control_frames = 0
                        if not self._events:
                            self._events = []  # drop the list's spare capacity too
                        return _one_block(parts)
                    if frames >= self._limits.max_message_frames:
                        await self._fail(1009, "too many frames in one message")
                elif opcode is Opcode.TEXT:
                    await self._fail(1003, "text message instead of a block")
                elif opcode is Opcode.CLOSE:
                    await self._flush()
                    raise TransportClosed("peer closed the connection")
                else:  # a ping (the protocol queued its pong) or a pong
                    self._control_frames += 1
                    if self._control_frames > self._limits.max_message_frames:
                        await self._fail(1008, "too many control frames between two blocks")
                    if opcode is Opcode.PING:
                        await self._flush()
            await self._read(message_deadline)

    async def _read(self, message_deadline: float) -> None:
        """Read once and parse. While it waits, the keepalive sweep may ping the peer
        and drop it (`Keepalive`); only a message in progress has a deadline here.

        The socket is read here, not in a helper: an idle connection waits in this
        frame, and every coroutine frame it waits in is memory it keeps."""
        if self._aborted:
            raise TransportClosed(self._aborted)
        sock = self._socket
        waited = False
        data = None
        self._waiting_since = trio.current_time()
        self._pinged_at = math.inf
        try:
            with (_NO_DEADLINE if message_deadline == math.inf
                  else trio.move_on_at(message_deadline)):
                if sock is None:
                    data = await self._stream.receive_some(RECEIVE_BUFFER_SIZE)
                else:
                    while (data := _recv_nowait(sock)) is None:
                        # Not inside an `except`: the caught error, its traceback and
                        # their frames would stay alive as long as the wait.
                        await trio.lowlevel.wait_readable(sock)
                        waited = True
                        # A place in this pass's arrivals before the read; a peer
                        # that has gone waits behind connected clients' blocks
                        # (arrivals.py).
                        await self._arrivals.admit_read(sock)
        except STREAM_GONE as e:
            raise TransportClosed(self._aborted or "peer closed the connection") from e
        finally:
            self._waiting_since = math.inf
        if data is None:
            await self._fail(1008, f"message not complete in {self._limits.message_timeout} s")
        if sock is not None and not waited:
            # Read without waiting: still one pass of the scheduler and a place in the
            # arrivals per read, so that clients that keep their sockets full do not
            # hold up the others.
            await self._arrivals.admit_after_pass()
        protocol = self._protocol
        if not data:
            protocol.receive_eof()
            raise TransportClosed("peer closed the connection")
        await self._parse(data)

    async def _parse(self, data: bytes) -> None:
        """Feed what was read to the protocol a block's worth at a time, so that a read
        full of tiny frames costs at most that much parsing before the cap ends it."""
        protocol = self._protocol
        view = memoryview(data)
        events = self._events
        for start in range(0, len(view), FEED_SIZE):
            protocol.receive_data(view[start:start + FEED_SIZE])  # type: ignore[arg-type]
            events.extend(protocol.events_received())
            if protocol.parser_exc is not None:
                await self._flush()
                raise TransportClosed(f"bad framing: {protocol.parser_exc}")
            if len(events) > MAX_FRAMES_PER_READ:
                await self._fail(1008, "too many frames at once")

    async def _keepalive_ping(self) -> None:
        """Ping the peer (a task of the keepalive sweep's); a peer that does not take it
        within `stalled_timeout`, or is gone, is dropped."""
        try:
            if self._protocol.state is OPEN:
                self._protocol.send_ping(b"")
                await self._write_pending()
        except TransportClosed as e:
            self._abort(str(e))

    def _abort(self, reason: str) -> None:
        """Drop the connection: its waiting read ends with `reason` (TransportClosed);
        a read not waiting now finds `reason` before it waits again."""
        if self._aborted:
            return
        self._aborted = reason
        stream = self._stream
        sock = self._socket
        if sock is None and isinstance(stream, trio.SSLStream):
            sock = getattr(stream.transport_stream, "socket", None)
        if sock is not None and sock.fileno() >= 0:
            trio.lowlevel.notify_closing(sock)

    async def _fail(self, code: int, reason: str) -> None:
        if self._protocol.state is OPEN:
            self._protocol.fail(code, reason)
        await self._write_pending()
        raise TransportClosed(reason)

    async def _flush(self) -> None:
        await self._write_pending()

    async def _write_pending(self) -> None:
        """Send what the protocol has queued; if another task is writing, it does
        (it looks again before it returns)."""
        if self._writing:
            return
        self._writing = True
        try:
            while True:
                data = self._take_data()
                if not data:  # nothing, or only the end-of-stream mark: closed later
                    return
                await self._send_all(data)
                del data
        finally:
            self._writing = False

    def _take_data(self) -> bytes:
        """What is to be written next, in order: the rest of a write made now, then
        what the protocol has queued since."""
        writes = self._protocol.data_to_send()
        data = b"".join(writes) if len(writes) != 1 else writes[0]
        if self._unsent:
            data, self._unsent = self._unsent + data, b""
        return data

    def can_send_now(self) -> bool:
        return self._socket is not None and self._protocol.state is OPEN

    def send_blocks_now(self, blocks: list[bytes]) -> bool:
        """Queue `blocks` and write what the socket takes now, without waiting (from
        any task: nothing here yields); False when some is left for the next write."""
        protocol = self._protocol
        for block in blocks:
            protocol.send_binary(block)
        return self._write_queued_now()

    async def _send_all(self, data: bytes) -> None:
        """Write `data`; a peer that does not take it within `stalled_timeout` is dropped."""
        try:
            await send_on_socket(self._socket, data, self._limits.stalled_timeout,
                                 self._stream.send_all)
        except StalledPeer:
            self.stalled = True
            raise

    async def send_block(self, block: bytes) -> None:
        """Send one block; a peer that does not take it within the deadline is dropped."""
        await self.send_blocks([block])

    async def send_blocks(self, blocks: list[bytes]) -> None:
        """Send blocks in one write; a peer that does not take them in time is dropped."""
        protocol = self._protocol
        if protocol.state is not OPEN:
            raise TransportClosed("connection closing")
        for block in blocks:
            protocol.send_binary(block)
        await self._write_pending()

    def block_ready(self) -> bool:
        """Whether a whole block is parsed already: `receive_block` returns it without
        reading (the frames before it, pings and pongs, need no wait either)."""
        for event in self._events:
            if (type(event) is Frame and event.fin
                    and (event.opcode is Opcode.BINARY or event.opcode is Opcode.CONT)):
                return True
        return False

    async def aclose(self, timeout: float) -> None:
        """Send a close frame within `timeout` (none if zero), then close the TCP stream."""
        if timeout > 0 and self._protocol.state is OPEN:
            with trio.move_on_after(timeout):
                try:
                    self._protocol.send_close(1000)
                    await self._write_pending()
                except TransportClosed:
                    pass
        self._events = []
        await trio.aclose_forcefully(self._stream)


def new_framing() -> ServerProtocol:
    """One connection's framing; `end_framing` it once the connection is done.

    The protocol's parser is a generator suspended in its own frame, and the
    error that stopped it (`parser_exc`: EOF, for a client that just went away)
    keeps that frame in its traceback; both frames hold the protocol. Those are
    reference cycles that reference counting never frees, left for a full
    collection (a dozen objects per connection, 200,000 after a reconnection
    storm of 20,000 clients). Closing the generator and dropping the error end
    them.
    """
    return ServerProtocol(max_size=BLOCK_SIZE, logger=_framing_log)


def end_framing(protocol: ServerProtocol) -> None:
    protocol.parser.close()
    protocol.parser_exc = None


@contextmanager
def framing() -> Iterator[ServerProtocol]:
    """`new_framing()` for the duration of a `with` block (a short exchange)."""
    protocol = new_framing()
    try:
        yield protocol
    finally:
        end_framing(protocol)


def _plain_socket(stream: trio.abc.Stream) -> socket.socket | None:
    """The non-blocking socket under a plain TCP stream, None for any other stream.
    trio's socket wrapper keeps it as `_sock`; without it the stream's own methods
    do the I/O, one scheduler pass more per read and per write."""
    if type(stream) is not trio.SocketStream:
        return None
    sock = getattr(stream.socket, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def _recv_nowait(sock: socket.socket) -> bytes | None:
    """What the socket has (b"" at its end), or None if it has nothing yet."""
    try:
        return sock.recv(RECEIVE_BUFFER_SIZE)
    except BlockingIOError:
        return None
    except OSError as e:
        raise TransportClosed("peer closed the connection") from e


def _one_block(parts: list[bytes]) -> bytes:
    block = parts[0] if len(parts) == 1 else b"".join(parts)
    if len(block) != BLOCK_SIZE:
        raise TransportClosed(f"message of {len(block)} bytes instead of a block")
    return block
