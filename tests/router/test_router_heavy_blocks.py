"""Blocks of many transmissions take turns; small blocks never wait for them
(router/server/dispatch.py, `HEAVY_BLOCK`).

The commands are slowed down by a probe that waits on the (mock) clock, as a
store would: that makes every block long enough to overlap with the others, so
the test can count how many heavy blocks are worked on at once and see a small
block pass the queue of heavy ones.
"""

from __future__ import annotations

import pytest
import trio
from smp_session import connect

from router.protocol.types import PING, PONG
from router.server import dispatch

CROWD = 20  # clients sending a heavy block at once
STEP = 0.001  # mock seconds each command takes


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_heavy_blocks_take_turns_and_a_small_block_passes_them(
    router, monkeypatch, autojump_clock
):
    execute, answer = dispatch.Dispatcher._execute, dispatch.Dispatcher._answer
    heavy_now = most = 0
    finished: list[str] = []

    async def slow_execute(self, subscriber, v):
        await trio.sleep(STEP)
        return await execute(self, subscriber, v)

    async def counting_answer(self, subscriber, raw_transmissions):
        nonlocal heavy_now, most
        if len(raw_transmissions) <= dispatch.HEAVY_BLOCK:
            return await answer(self, subscriber, raw_transmissions)
        heavy_now += 1
        most = max(most, heavy_now)
        try:
            return await answer(self, subscriber, raw_transmissions)
        finally:
            heavy_now -= 1

    monkeypatch.setattr(dispatch.Dispatcher, "_execute", slow_execute)
    monkeypatch.setattr(dispatch.Dispatcher, "_answer", counting_answer)
    heavy = [(b"", PING(), None)] * (dispatch.HEAVY_BLOCK + 2)

    async def client(name: str, requests: list) -> None:
        async with connect(router) as session:
            assert await session.commands(requests) == [PONG()] * len(requests)
            finished.append(name)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for i in range(CROWD):
                nursery.start_soon(client, f"heavy {i}", heavy)
            await trio.sleep(STEP)  # the crowd's blocks are in
            nursery.start_soon(client, "small", [(b"", PING(), None)])
    assert len(finished) == CROWD + 1
    assert most == dispatch.HEAVY_AT_ONCE, most
    # It came after every heavy block and is answered before most of them.
    assert finished.index("small") < CROWD // 2, finished
