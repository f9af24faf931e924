"""The channel between workers (workers/channel.py): frames whole and in order however
they are written and read; a link lost while its writer takes a batch ends that link."""

from __future__ import annotations

import os

import trio

from router.server.workers.channel import Frame, Links, _FrameReader, _Unwritten


async def test_a_link_lost_while_its_writer_takes_a_batch_ends_the_link_not_the_worker():
    group = f"channel-test-{os.getpid()}"
    received: list[Frame] = []
    lost: list[int] = []

    async def on_frame(peer: int, frame: Frame) -> None:
        received.append(frame)

    sender = Links(group, 0, 2, on_frame, lost.append)
    receiver = Links(group, 1, 2, on_frame, lambda peer: None)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(receiver.run)
            await nursery.start(sender.run)
            await sender.send(1, Frame(1, 7, b"first"))
            while not received:
                await trio.sleep(0.01)
            # The writer waits for frames: one arrives and the link is lost before the
            # writer runs, so it finds the queue closed and empty while taking its batch
            # (a peer that died while frames were on their way).
            sender._outgoing[1].send_nowait(Frame(1, 7, b"second"))
            sender._lose(1)
            await trio.sleep(0.1)
            assert lost == [1]
            await sender.send(1, Frame(1, 7, b"third"))  # a new link to the peer
            while b"third" not in [frame.payload for frame in received]:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()


class _Chunks:
    """A stream that gives what was sent in the chunks given."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def receive_some(self, max_bytes: int) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.chunks.pop(0) if self.chunks else b""


async def test_frames_cut_anywhere_by_the_reads_come_out_whole_and_in_order():
    sent = [Frame(kind, n, bytes([n]) * size, credit=n % 3)
            for n, (kind, size) in enumerate([(2, 16_000), (6, 0), (5, 300), (2, 40_000),
                                              (8, 1), (2, 16_000)])]
    data = b"".join(frame.encode() for frame in sent)
    # Whole frames in one read, a frame cut in two, a read ending in a header, many
    # frames in a read with the start of the next.
    cuts = [16_014, 16_020, 16_030, 16_340, 20_000, 56_354, 56_360, len(data)]
    chunks = [data[a:b] for a, b in zip([0, *cuts], cuts, strict=False)]
    reader = _FrameReader(_Chunks(chunks))  # type: ignore[arg-type]
    received: list[Frame] = []
    while frames := await reader.frames():
        received.extend(frames)
    assert received == sent
    assert all(type(frame.payload) is bytes for frame in received)


async def test_a_frame_written_in_part_by_its_sender_goes_on_before_the_next_ones():
    """A frame is written by the task that sends it when nothing waits for the link's
    writer; one larger than the socket takes at once is written in part, its rest goes
    to the writer first, and the frames sent meanwhile follow it, whole and in order."""
    group = f"channel-part-{os.getpid()}"
    received: list[Frame] = []

    async def on_frame(peer: int, frame: Frame) -> None:
        received.append(frame)

    sender = Links(group, 0, 2, on_frame, lambda peer: None)
    receiver = Links(group, 1, 2, on_frame, lambda peer: None)
    large = bytes(range(256)) * 3_500  # ~900 KB: more than a socket's buffer
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(receiver.run)
            await nursery.start(sender.run)
            await sender.send(1, Frame(1, 1, b"opens the link"))
            while not received:
                await trio.sleep(0.01)
            assert sender._unwritten[1].frames == 0  # written by its sender, not queued
            assert sender.send_nowait(1, Frame(2, 2, large))
            assert sender._unwritten[1].frames == 1  # its rest, for the writer
            small = [Frame(3, n, b"%d" % n) for n in range(20)]
            for frame in small:
                assert sender.send_nowait(1, frame)
            while len(received) < 22:
                await trio.sleep(0.01)
            assert received[1] == Frame(2, 2, large)
            assert received[2:] == small
            assert sender._unwritten[1].frames == 0
            nursery.cancel_scope.cancel()


class _FillingSocket:
    """A socket that takes `room` bytes of the first write, then everything."""

    def __init__(self, room: int) -> None:
        self.room: int | None = room
        self.written: list[bytes] = []

    def sendmsg(self, buffers: tuple[bytes, ...]) -> int:
        data = b"".join(buffers)
        taken = data if self.room is None else data[:self.room]
        self.room = None
        self.written.append(taken)
        return len(taken)


def test_while_the_rest_of_a_frame_waits_for_the_writer_the_next_frames_wait_too():
    sock = _FillingSocket(room=100)
    unwritten = _Unwritten(sock)  # type: ignore[arg-type]
    queue, for_writer = trio.open_memory_channel[Frame | bytes](8)
    first, second = Frame(2, 1, b"a" * 1_000), Frame(2, 1, b"b" * 10)
    assert unwritten.write_now(first, queue)
    assert for_writer.receive_nowait() == first.encode()[100:]  # its rest, for the writer
    assert unwritten.frames == 1
    assert not unwritten.write_now(second, queue)  # the socket has room, but not its turn
    assert sock.written == [first.encode()[:100]]
    unwritten.frames = 0  # the writer wrote it
    assert unwritten.write_now(second, queue)
    assert sock.written[-1] == second.encode()
