"""The channel between workers (workers/channel.py): a link lost while its writer takes
a batch of frames ends that link, never the worker."""

from __future__ import annotations

import os

import trio

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
