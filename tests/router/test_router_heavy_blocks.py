"""Blocks of many subscriptions take turns; every other block passes them
(router/server/core/dispatch.py, `HEAVY_BLOCK`).

The commands are slowed down by a probe that waits on the (mock) clock, as a
store would: that makes every block long enough to overlap with the others, so
the test can count how many blocks of SUBs are worked on at once and see the
traffic of clients already subscribed pass the queue they form.
"""

from __future__ import annotations

import pytest
import trio
from smp_session import connect

from router.protocol.codec import encode_command
from router.protocol.transmission import encode_transmission
from router.protocol.types import NSUB, OK, PING, PONG, SUB, Transmission
from router.server.core import dispatch

CROWD = 12  # clients resubscribing at once
STEP = 0.001  # mock seconds each command takes
MANY = dispatch.HEAVY_BLOCK + 2


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_blocks_of_subs_take_turns_and_other_blocks_pass_them(
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
        if not dispatch._many_subscriptions(raw_transmissions):
            return await answer(self, subscriber, raw_transmissions)
        heavy_now += 1
        most = max(most, heavy_now)
        try:
            return await answer(self, subscriber, raw_transmissions)
        finally:
            heavy_now -= 1

    async def client(name: str, ready: trio.Event, go: trio.Event, sub: bool) -> None:
        async with connect(router) as session:
            queues = await session.create_queues(MANY) if sub else []
            ready.set()
            await go.wait()
            if sub:
                requests = [(q.recipient_id, SUB(), q.rcv_seed) for q in queues]
                assert await session.commands(requests) == [OK()] * MANY
            else:  # a busy client: many commands, no subscription
                assert await session.commands([(b"", PING(), None)] * MANY) == [PONG()] * MANY
            finished.append(name)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            go = trio.Event()
            crowd = [trio.Event() for _ in range(CROWD)]
            for i, ready in enumerate(crowd):
                nursery.start_soon(client, f"subscribing {i}", ready, go, True)
            for ready in crowd:
                await ready.wait()
            monkeypatch.setattr(dispatch.Dispatcher, "_execute", slow_execute)
            monkeypatch.setattr(dispatch.Dispatcher, "_answer", counting_answer)
            go.set()
            await trio.sleep(STEP)  # the crowd's blocks are in
            nursery.start_soon(client, "busy", trio.Event(), go, False)
    assert len(finished) == CROWD + 1
    assert most == dispatch.HEAVY_AT_ONCE, most
    # It came after every block of SUBs and is answered before most of them.
    assert finished.index("busy") < CROWD // 2, finished


def _transmissions(commands: list) -> list[bytes]:
    return [encode_transmission(Transmission(b"", b"%d" % i, b"q", encode_command(c)))
            for i, c in enumerate(commands)]


def test_a_block_is_many_subscriptions_from_one_more_than_heavy_block():
    n = dispatch.HEAVY_BLOCK
    assert not dispatch._many_subscriptions(_transmissions([SUB()] * n + [PING()] * 50))
    assert dispatch._many_subscriptions(_transmissions([SUB()] * n + [NSUB()]))
    assert not dispatch._many_subscriptions(_transmissions([PING()] * (n + 1)) + [b"\x00junk"])
