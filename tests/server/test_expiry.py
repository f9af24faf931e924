"""Message expiration: what a pass removes, when passes run, what is counted.

The schedule runs on trio's MockClock (autojump); message times are compared
with a wall clock the test moves by hand.
"""

from __future__ import annotations

import os

import trio
import trio.testing

from router.server.core.expiry import Expirer
from store import MemoryMessageStore, Message


class Wall:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def message(ts: int) -> Message:
    return Message(os.urandom(24), ts, b"F", b"body %d" % ts)


async def queue_with(store: MemoryMessageStore, *times: int) -> bytes:
    rid = os.urandom(24)
    for ts in times:
        await store.write_message(rid, message(ts), 100)
    return rid


async def bodies(store: MemoryMessageStore, rid: bytes) -> list[bytes]:
    return [m.body async for m in store.iter_messages(rid)]


async def test_a_pass_removes_the_old_messages_at_each_queue_head_and_counts_them():
    store, wall, counted = MemoryMessageStore(), Wall(1000), []
    old = await queue_with(store, 100, 200)
    mixed = await queue_with(store, 100, 950, 300)  # a newer message shields the one after it
    fresh = await queue_with(store, 990)
    expirer = Expirer(store, ttl=500, interval=60, on_expired=counted.append, wall_clock=wall)
    assert await expirer.expire_all() == 3
    assert await bodies(store, old) == []
    assert await bodies(store, mixed) == [b"body 950", b"body 300"]
    assert await bodies(store, fresh) == [b"body 990"]
    assert sum(counted) == expirer.expired_total == 3


async def test_a_message_exactly_as_old_as_the_ttl_is_kept():
    store = MemoryMessageStore()
    rid = await queue_with(store, 500)
    expirer = Expirer(store, ttl=500, interval=60, wall_clock=Wall(1000))
    assert await expirer.expire_all() == 0
    assert await bodies(store, rid) == [b"body 500"]


async def test_expiring_one_queue_leaves_the_others_alone():
    store = MemoryMessageStore()
    a, b = await queue_with(store, 1), await queue_with(store, 1)
    expirer = Expirer(store, ttl=10, interval=60, wall_clock=Wall(100))
    assert await expirer.expire_queue(a) == 1
    assert await bodies(store, a) == [] and await bodies(store, b) == [b"body 1"]


async def test_the_quota_marker_expires_like_a_message():
    store = MemoryMessageStore()
    rid = os.urandom(24)
    await store.write_message(rid, message(1), 1)
    await store.write_message(rid, message(2), 1)  # refused: the marker goes in
    assert await store.queue_size(rid) == 2
    expirer = Expirer(store, ttl=10, interval=60, wall_clock=Wall(100))
    assert await expirer.expire_all() == 2
    assert await store.queue_size(rid) == 0


async def test_passes_run_at_start_and_then_every_interval(autojump_clock: trio.testing.MockClock):
    store, wall = MemoryMessageStore(), Wall(10_000)
    rid = await queue_with(store, 1)
    expirer = Expirer(store, ttl=100, interval=7200, wall_clock=wall)
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        await nursery.start(expirer.run)
        await expirer.wait_passes(1)
        assert trio.current_time() == start and await bodies(store, rid) == []
        await store.write_message(rid, message(9_950), 100)
        wall.now += 60  # the new message is now 110 s old, but no pass is due
        await trio.sleep(7199)
        assert expirer.passes == 1 and await store.queue_size(rid) == 1
        await expirer.wait_passes(2)
        assert trio.current_time() == start + 7200 and await store.queue_size(rid) == 0
        assert expirer.expired_total == 2
        nursery.cancel_scope.cancel()
