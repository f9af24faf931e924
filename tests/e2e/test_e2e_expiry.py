"""Message expiration in a running router: at start, by the periodic pass, on SEND;
expired messages are counted in the router's statistics."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from e2e_helpers import assert_no_more_events

from router.client import open_client
from router.server import RouterConfig, RouterInfo, serve_router
from store import Message, open_stores

STORES = ["memory", "journal", "sqlite"]
DAY = 86400


@asynccontextmanager
async def running_router(**settings: object) -> AsyncIterator[RouterInfo]:
    config = RouterConfig(port=0, **settings)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_router, config)
        nursery.cancel_scope.cancel()


def later(seconds: float):
    """A wall clock `seconds` ahead of the real one."""
    return lambda: time.time() + seconds


async def test_messages_older_than_the_ttl_are_removed_and_counted(router_factory):
    info = await router_factory(message_ttl=3600)
    with trio.fail_after(10):
        async with open_client(info.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"old 1")
            await client.send(q.sender_id, b"old 2")
            expirer = info.router.expirer
            expirer.wall_clock = later(3600 + 2)
            assert await expirer.expire_all() == 2
            expirer.wall_clock = time.time
            await client.send(q.sender_id, b"fresh")
            assert await expirer.expire_all() == 0
            await client.subscribe(q)
            assert (await client.next_event()).body == b"fresh"
            assert info.router.statistics().messages_expired == 2


async def test_with_expire_on_send_a_send_first_removes_the_queues_expired_messages(
    router_factory,
):
    info = await router_factory(message_ttl=60, expire_on_send=True)
    with trio.fail_after(10):
        async with open_client(info.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"stale")
            info.router.expirer.wall_clock = later(60 + 2)
            await client.send(q.sender_id, b"new")
            assert info.router.statistics().messages_expired == 1
            await client.subscribe(q)
            assert (await client.next_event()).body == b"new"
            await assert_no_more_events(client)


async def test_the_periodic_pass_runs_every_expire_interval(router_factory):
    info = await router_factory(message_ttl=60, expire_interval=0.05)
    with trio.fail_after(10):
        async with open_client(info.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"soon stale")
            expirer = info.router.expirer
            expirer.wall_clock = later(60 + 2)
            await expirer.wait_passes(expirer.passes + 2)  # one whole pass after the change
            assert info.router.statistics().messages_expired == 1
            assert (await client.info(q))["qiSize"] == 0


@pytest.mark.parametrize("kind", STORES)
async def test_a_router_expires_messages_at_start_with_the_default_ttl_of_21_days(
    kind, tmp_path: Path
):
    data_dir = tmp_path / "data"
    with trio.fail_after(30):
        async with running_router(store=kind, data_dir=data_dir) as info:
            async with open_client(info.address) as client:
                q = await client.create_queue()
        # Messages from 22 and 20 days ago, as a router stopped meanwhile would find them.
        async with open_stores(kind, data_dir) as stores:
            now = int(time.time())
            for age, body in ((22, b"too old"), (20, b"old enough")):
                msg = Message(os.urandom(24), now - age * DAY, b"F", body)
                await stores.messages.write_message(q.recipient_id, msg, 10)
        async with running_router(store=kind, data_dir=data_dir) as info:
            await info.router.expirer.wait_passes(1)
            assert info.router.statistics().messages_expired == 1
            async with open_client(info.address) as client:
                await client.subscribe(q)
                assert (await client.next_event()).body == b"old enough"
