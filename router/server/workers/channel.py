"""The channel between worker processes (docs/workers.md#hand-offs-in-blocks).

Each worker listens on a Unix stream socket in the abstract namespace named
after its supervisor and its index, and accepts only processes of its own user
(`SO_PEERCRED`). Worker i sends to worker j over a link it opens itself, on
first use: a link carries frames one way, so the frames from i to j keep their
order, and j answers over its own link to i. A frame is its length (4 bytes),
its kind (1 byte), a credit (1 byte: what the other direction's window of that
connection gets back, carried by whatever frame goes that way), the id of the
connection it concerns in the sending or the receiving worker (8 bytes) and a
payload. A link's frames wait in a bounded queue for its writing task: a sender
waits when the peer does not keep up.

A link that breaks (its peer died) drops what was queued on it; each side
hears of it (`on_peer_lost`) and ends what depended on that peer. The next
send opens the link again, once the restarted peer listens.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import trio

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">IBBQ")  # length of what follows it, kind, credit, connection id
MAX_FRAME = 1 << 20  # bytes; a frame is a block or a write of about OUT_FRAME_BYTES
LINK_QUEUE = 64  # frames waiting for a link's writing task
READ_BYTES = 1 << 16  # a link's read (below the allocator's mmap threshold)
CONNECT_ATTEMPTS = 50  # a peer being restarted listens again within a few seconds
CONNECT_PAUSE = 0.1  # seconds between two attempts
ACCEPT_WAIT = 5.0  # seconds a live peer may take to answer a link (it may be starting)
_ACCEPTED = b"\x01"  # a link's one byte the other way: its reader is there
_PEERCRED = struct.Struct("3i")  # pid, uid, gid
T = TypeVar("T")


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 3x, per frame
class Frame:
    kind: int
    conn_id: int
    payload: bytes
    credit: int = 0  # 0-255: writes of the other way's window taken, given back

    def encode(self) -> bytes:
        return self.header() + self.payload

    def header(self) -> bytes:
        return _HEADER.pack(_HEADER.size - 4 + len(self.payload), self.kind, self.credit,
                            self.conn_id)


class LinkLost(Exception):
    """The peer could not be reached, or its link broke."""


def link_address(group: str, index: int) -> bytes:
    """The abstract socket name of worker `index` of the workers of `group`."""
    return f"\0smp-router.{group}.worker-{index}".encode()


FrameHandler = Callable[[int, Frame], Awaitable[None]]  # (peer index, frame)


class Links:
    """This worker's end of the channel: its listener and its links to the others."""

    def __init__(self, group: str, index: int, workers: int, on_frame: FrameHandler,
                 on_peer_lost: Callable[[int], None]) -> None:
        self.group, self.index, self.workers = group, index, workers
        self._on_frame = on_frame
        self._on_peer_lost = on_peer_lost
        self._outgoing: dict[int, trio.MemorySendChannel[Frame]] = {}
        self._opening: dict[int, trio.Event] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with listener:
            await listener.bind(link_address(self.group, self.index))
            listener.listen(self.workers * 2)
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    sock, _ = await listener.accept()
                    nursery.start_soon(self._receive_link, sock)

    async def send(self, peer: int, frame: Frame) -> None:
        """Queue `frame` on the link to `peer` (opened if need be); waits while the link's
        queue is full. LinkLost if the peer cannot be reached."""
        channel = self._outgoing.get(peer)
        if channel is None:
            channel = await self._open(peer)
        try:
            try:
                # Queued at once when there is room: no pass of the scheduler per frame.
                channel.send_nowait(frame)
            except trio.WouldBlock:
                await channel.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise LinkLost(f"the link to worker {peer} broke") from e

    def send_nowait(self, peer: int, frame: Frame) -> bool:
        """Queue `frame` on the link to `peer` if it is open and has room; False if not
        (then `send` it). Spares a task for a small frame sent from a callback."""
        channel = self._outgoing.get(peer)
        if channel is None:
            return False
        try:
            channel.send_nowait(frame)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    async def _open(self, peer: int) -> trio.MemorySendChannel[Frame]:
        opening = self._opening.get(peer)
        if opening is not None:  # another task opens it: wait for that one
            await opening.wait()
            channel = self._outgoing.get(peer)
            if channel is None:
                raise LinkLost(f"worker {peer} cannot be reached")
            return channel
        self._opening[peer] = opening = trio.Event()
        try:
            stream = await self._connect(peer)
            send, receive = trio.open_memory_channel[Frame](LINK_QUEUE)
            self._outgoing[peer] = send
            assert self._nursery is not None, "links are used while they run"
            self._nursery.start_soon(self._write_link, peer, stream, send, receive)
            return send
        finally:
            del self._opening[peer]
            opening.set()

    async def _connect(self, peer: int) -> trio.SocketStream:
        """A link to the peer's live process: it counts only once the peer's reader
        has answered it. A connection to the listener of a process being killed can
        succeed, and what is written on it is lost when the listener goes."""
        for _ in range(CONNECT_ATTEMPTS):
            sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                await sock.connect(link_address(self.group, peer))
            except OSError:
                sock.close()
                await trio.sleep(CONNECT_PAUSE)
                continue
            stream = trio.SocketStream(sock)
            accepted = b""
            try:
                await stream.send_all(self.index.to_bytes(2, "big"))  # who is speaking
                with trio.move_on_after(ACCEPT_WAIT):
                    accepted = await stream.receive_some(1)
            except (trio.BrokenResourceError, OSError):
                pass
            if accepted == _ACCEPTED:
                return stream
            await trio.aclose_forcefully(stream)
            await trio.sleep(CONNECT_PAUSE)
        raise LinkLost(f"worker {peer} cannot be reached")

    async def _write_link(self, peer: int, stream: trio.SocketStream,
                          channel: trio.MemorySendChannel[Frame],
                          frames: trio.MemoryReceiveChannel[Frame]) -> None:
        sock = _plain_socket(stream)
        try:
            async with stream, frames:
                async for frame in frames:
                    # The writer runs after the tasks that queued frames in this pass of
                    # the scheduler: what they all queued goes in one write (under load,
                    # ~5 frames), one wake-up of the peer. A frame written by its sender
                    # at once cost a write and a wake-up each: more CPU per message
                    # (bench/RESULTS.md, "Worker processes"). Each payload is copied
                    # once, into the write.
                    data = b"".join(_pieces(with_queued(frame, frames)))
                    if sock is None:
                        await stream.send_all(data)
                    else:
                        await _send_on(sock, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.warning("the link to worker %d broke", peer)
        finally:
            if self._outgoing.get(peer) is channel:  # not a link opened since
                self._lose(peer)

    def _lose(self, peer: int) -> None:
        """The peer is gone: its link is dropped (the next send opens a new one, to
        its restarted process) and what depended on it ends."""
        channel = self._outgoing.pop(peer, None)
        if channel is not None:
            channel.close()
        self._on_peer_lost(peer)

    async def _receive_link(self, sock: trio.socket.SocketType) -> None:
        stream = trio.SocketStream(sock)
        async with stream:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
            _pid, uid, _gid = _PEERCRED.unpack(creds)
            if uid != os.getuid():
                log.warning("refused a worker link from user %d", uid)
                return
            reader = _FrameReader(stream)
            try:
                peer = int.from_bytes(await reader.exactly(2), "big")
            except (trio.BrokenResourceError, OSError, LinkLost):
                return
            if not 0 <= peer < self.workers or peer == self.index:
                log.warning("refused a worker link claiming to be worker %d", peer)
                return
            try:
                await stream.send_all(_ACCEPTED)
            except (trio.BrokenResourceError, OSError):
                return
            on_frame = self._on_frame
            try:
                while True:
                    frames = await reader.frames()
                    if not frames:
                        break
                    for frame in frames:
                        await on_frame(peer, frame)
            except (trio.BrokenResourceError, OSError, LinkLost):
                pass
            except Exception:  # a frame this side cannot take: the link ends, not the worker
                log.exception("a frame from worker %d could not be handled", peer)
        log.warning("the link from worker %d ended", peer)
        # The link to it ends too, before anything is sent on it to a dead process
        # and lost (a link's writer hears of its end only when it writes).
        self._lose(peer)


def with_queued(first: T, queue: trio.MemoryReceiveChannel[T]) -> list[T]:
    """`first` and what else waits in `queue` now, to go in one write (a closed queue
    ends the list too: its reader ends at its next receive)."""
    batch = [first]
    while True:
        try:
            batch.append(queue.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return batch


def _plain_socket(stream: trio.SocketStream) -> socket.socket | None:
    """The socket under a link's stream (as `edge/websocket.py` reads a connection's):
    read and written directly, without the stream's pass of the scheduler per call."""
    sock = getattr(getattr(stream, "socket", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


async def _send_on(sock: socket.socket, data: bytes) -> None:
    """Write `data` to a link: at once when the socket takes it all (the usual case:
    no pass of the scheduler, the writer's wait for its next frames is its pass), else
    the rest as the peer reads."""
    try:
        sent = sock.send(data)
    except BlockingIOError:
        sent = 0
    if sent == len(data):
        return
    with memoryview(data) as view:
        rest = view[sent:]
        while rest:
            await trio.lowlevel.wait_writable(sock)
            try:
                rest = rest[sock.send(rest):]
            except BlockingIOError:
                pass


def _pieces(frames: list[Frame]) -> Iterator[bytes]:
    for frame in frames:
        yield frame.header()
        yield frame.payload


class _FrameReader:
    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._socket = _plain_socket(stream)
        self._buffer = bytearray()

    async def _read(self) -> bytes:
        """What the link has, waiting for some: one pass of the scheduler per read, as
        a stream's has when the socket has data already, not a pass more after a wait."""
        sock = self._socket
        if sock is None:
            return await self._stream.receive_some(READ_BYTES)
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data = sock.recv(READ_BYTES)
        except BlockingIOError:
            while True:
                await trio.lowlevel.wait_readable(sock)
                try:
                    return sock.recv(READ_BYTES)
                except BlockingIOError:
                    pass
        # Read at once: a pass all the same, so that a busy link lets the others run.
        await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            data = await self._read()
            if not data:
                raise LinkLost("the link ended")
            self._buffer += data
        taken = bytes(self._buffer[:n])
        del self._buffer[:n]
        return taken

    async def frames(self) -> list[Frame]:
        """The whole frames read so far, reading until there is one at least; none at a
        clean end between frames. Each is copied once from where it lies: from the read
        itself when nothing was left of the last one (most reads), else from the buffer."""
        buffer = self._buffer
        while True:
            frames: list[Frame] = []
            if buffer:
                with memoryview(buffer) as view:  # released before the buffer is cut
                    pos = _take_frames(buffer, view, frames)
                if pos:
                    del buffer[:pos]
                if frames:
                    return frames
            data = await self._read()
            if not data:
                if buffer:
                    raise LinkLost("the link ended within a frame")
                return []
            if buffer:
                buffer += data
                continue
            pos = _take_frames(data, data, frames)
            if pos < len(data):
                with memoryview(data) as view:
                    buffer += view[pos:]
            if frames:
                return frames


def _take_frames(source: bytes | bytearray, view: bytes | memoryview,
                 frames: list[Frame]) -> int:
    """The whole frames of `source` appended to `frames`, each payload a copy of its
    slice of `view` (bytes, or a memoryview of a bytearray); where the first frame not
    whole begins."""
    pos, end = 0, len(source)
    unpack, header = _HEADER.unpack_from, _HEADER.size
    while end - pos >= header:
        length, kind, credit, conn_id = unpack(source, pos)
        size = length - (header - 4)
        if not 0 <= size <= MAX_FRAME:
            raise LinkLost(f"a frame of {size} bytes")
        start = pos + header
        if end - start < size:
            break
        payload = view[start:start + size]
        frames.append(Frame(kind, conn_id,
                            payload if isinstance(payload, bytes) else payload.tobytes(),
                            credit))
        pos = start + size
    return pos
