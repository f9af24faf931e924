"""Message expiration at the router: by the periodic pass and on SEND; expired
messages are counted in the router's statistics."""

from __future__ import annotations

import json
import time

import trio
from smp_session import connect

from router.protocol.types import INFO, OK, QUE, SUB


def later(seconds: float):
    """A wall clock `seconds` ahead of the real one."""
    return lambda: time.time() + seconds


async def test_messages_older_than_the_ttl_are_removed_and_counted(router_factory):
    router = await router_factory(message_ttl=3600)
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"old 1")
            await client.send(q.sender_id, b"old 2")
            expirer = router.expirer
            expirer.wall_clock = later(3600 + 2)
            assert await expirer.expire_all() == 2
            expirer.wall_clock = time.time
            await client.send(q.sender_id, b"fresh")
            assert await expirer.expire_all() == 0
            assert await client.recipient(q, SUB()) == OK()
            _, body = await client.next_message(q)
            assert body.body == b"fresh"
            assert router.statistics().messages_expired == 2


async def test_with_expire_on_send_a_send_first_removes_the_queues_expired_messages(
    router_factory,
):
    router = await router_factory(message_ttl=60, expire_on_send=True)
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"stale")
            router.expirer.wall_clock = later(60 + 2)
            await client.send(q.sender_id, b"new")
            assert router.statistics().messages_expired == 1
            assert await client.recipient(q, SUB()) == OK()
            _, body = await client.next_message(q)
            assert body.body == b"new"
            assert await client.no_more_events()


async def test_the_periodic_pass_runs_every_expire_interval(router_factory):
    router = await router_factory(message_ttl=60, expire_interval=0.05)
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"soon stale")
            expirer = router.expirer
            expirer.wall_clock = later(60 + 2)
            await expirer.wait_passes(expirer.passes + 2)  # one whole pass after the change
            assert router.statistics().messages_expired == 1
            info = await client.recipient(q, QUE())
            assert isinstance(info, INFO) and json.loads(info.json)["qiSize"] == 0
