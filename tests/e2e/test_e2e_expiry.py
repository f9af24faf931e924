"""Message expiration when a router starts on a store that holds old messages. The
periodic pass and expiry on SEND are tested at the router in tests/router/test_router_expiry.py."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from worker_count import serve_router_under_test

from router.client import open_client
from router.server import RouterConfig, RouterInfo
from store import Message, open_stores

STORES = ["memory", "journal", "sqlite"]
DAY = 86400


@asynccontextmanager
async def running_router(**settings: object) -> AsyncIterator[RouterInfo]:
    config = RouterConfig(port=0, **settings)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_router_under_test, config)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.one_process("writes into the store of the data directory as one process lays "
                         "it out (a worker's share is DIR/worker-I/)")
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
