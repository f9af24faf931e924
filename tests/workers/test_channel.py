"""The channel between workers (workers/channel.py): frames whole and in order however
they are written and read; a link lost while its writer takes a batch ends that link."""

from __future__ import annotations

import os

import trio

from router.server.workers import channel
from router.server.workers.channel import Frame, Links, _FrameReader


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


async def test_frames_queued_in_one_pass_of_the_scheduler_go_in_one_write(monkeypatch):
    """Frames sent by several tasks before the link's writer runs go to the socket in
    one write, whole and in order, a large one written in part among them."""
    group = f"channel-batch-{os.getpid()}"
    received: list[Frame] = []
    writes: list[int] = []
    send_on = channel._send_on

    async def counted(sock, data: bytes) -> None:
        writes.append(len(data))
        await send_on(sock, data)

    monkeypatch.setattr(channel, "_send_on", counted)

    async def on_frame(peer: int, frame: Frame) -> None:
        received.append(frame)

    sender = Links(group, 0, 2, on_frame, lambda peer: None)
    receiver = Links(group, 1, 2, on_frame, lambda peer: None)
    large = bytes(range(256)) * 3_500  # ~900 KB: more than a socket's buffer takes at once
    small = [Frame(3, n, b"%d" % n) for n in range(20)]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(receiver.run)
            await nursery.start(sender.run)
            await sender.send(1, Frame(1, 1, b"opens the link"))
            while not received:
                await trio.sleep(0.01)
            writes.clear()

            async def send_some(frames: list[Frame]) -> None:
                for frame in frames:
                    assert sender.send_nowait(1, frame)

            async with trio.open_nursery() as senders:  # no pass of the writer between
                senders.start_soon(send_some, small[:10])
                senders.start_soon(send_some, [Frame(2, 2, large), *small[10:]])
            while len(received) < 22:
                await trio.sleep(0.01)
            # One write of them all (the socket taking it in parts), none by a sender.
            assert writes == [sum(len(f.encode()) for f in [Frame(2, 2, large), *small])]
            first_task = [f for f in received[1:] if f in small[:10]]
            second_task = [f for f in received[1:] if f not in small[:10]]
            assert first_task == small[:10]  # each task's frames whole and in its order
            assert second_task == [Frame(2, 2, large), *small[10:]]
            nursery.cancel_scope.cancel()
