"""The channel between workers (workers/channel.py): a link lost while its writer takes
a batch of frames ends that link, never the worker."""

from __future__ import annotations

import os

import trio

from router.server.workers.channel import Frame, Links


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
            sender._outgoing[1].send_nowait(Frame(1, 7, b"second").encode())
            sender._lose(1)
            await trio.sleep(0.1)
            assert lost == [1]
            await sender.send(1, Frame(1, 7, b"third"))  # a new link to the peer
            while b"third" not in [frame.payload for frame in received]:
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
