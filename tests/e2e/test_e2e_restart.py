"""Clean restarts: everything a client relies on survives two restarts in a row, on
every store kind (memory saves a snapshot when it stops; journal and sqlite keep
their files, postgres its database), and a deleted queue stays deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from e2e_helpers import assert_no_more_events
from postgres_server import postgres_store_options
from worker_count import serve_router_under_test

from router.client import (
    MessageEvent,
    NotifierCredentials,
    RecipientQueue,
    SMPClient,
    SMPError,
    open_client,
)
from router.protocol import crypto
from router.protocol.types import AUTH, QUOTA
from router.server import RouterConfig, RouterInfo

STORES = ["memory", "journal", "sqlite", "postgres"]
QUOTA_SIZE = 3


@asynccontextmanager
async def running_router(kind: str, data_dir: Path) -> AsyncIterator[RouterInfo]:
    """A router on the data directory, stopped cleanly (cancelled) on exit."""
    database = {"store_options": postgres_store_options(data_dir)} if kind == "postgres" else {}
    config = RouterConfig(port=0, store=kind, data_dir=data_dir, quota=QUOTA_SIZE, **database)
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_router_under_test, config)
        nursery.cancel_scope.cancel()


@dataclass
class World:
    """What the first run made, as the clients remember it."""

    key_secured: RecipientQueue
    sender_key: tuple[bytes, bytes]  # (seed, SPKI) installed by KEY
    sender_secured: RecipientQueue
    skey: tuple[bytes, bytes]  # installed by SKEY
    notified: RecipientQueue
    notifier: NotifierCredentials
    full: RecipientQueue  # QUOTA_SIZE messages and the QUOTA marker
    in_flight: RecipientQueue  # two messages, the first delivered and not acknowledged
    in_flight_id: bytes
    deleted: RecipientQueue
    suspended: RecipientQueue


async def make_world(client: SMPClient) -> World:
    key_secured = await client.create_queue(snd_secure=False)
    sender_key = crypto.new_ed25519()
    await client.secure_queue(key_secured, sender_key[1])

    sender_secured = await client.create_queue(snd_secure=True)
    skey = crypto.new_ed25519()
    await client.secure_sender(sender_secured.sender_id, *skey)

    notified = await client.create_queue()
    notifier = await client.enable_notifications(notified)

    full = await client.create_queue()
    for i in range(QUOTA_SIZE):
        await client.send(full.sender_id, b"full %d" % i)
    with pytest.raises(SMPError) as refused:
        await client.send(full.sender_id, b"refused")
    assert refused.value.error == QUOTA

    in_flight = await client.create_queue()
    await client.send(in_flight.sender_id, b"first")
    await client.send(in_flight.sender_id, b"second")
    await client.subscribe(in_flight)
    delivered = await client.next_event()
    assert isinstance(delivered, MessageEvent) and delivered.body == b"first"

    deleted = await client.create_queue()
    await client.send(deleted.sender_id, b"gone with its queue")
    await client.delete(deleted)

    suspended = await client.create_queue()
    await client.suspend(suspended)
    return World(
        key_secured, sender_key, sender_secured, skey, notified, notifier, full, in_flight,
        delivered.msg_id, deleted, suspended,
    )


async def expect_error(error, call) -> None:
    with pytest.raises(SMPError) as caught:
        await call
    assert caught.value.error == error


async def check_world(client: SMPClient, w: World) -> None:
    # Keys: only the installed sender keys may send, and the same key again is accepted.
    await client.send(w.key_secured.sender_id, b"k", sender_seed=w.sender_key[0])
    await expect_error(AUTH, client.send(w.key_secured.sender_id, b"unsigned"))
    await expect_error(AUTH, client.secure_queue(w.key_secured, crypto.new_ed25519()[1]))
    await client.secure_sender(w.sender_secured.sender_id, *w.skey)
    await client.send(w.sender_secured.sender_id, b"s", sender_seed=w.skey[0])

    # Notifier credentials: the notifier key still subscribes, the queue says it has one.
    await client.subscribe_notifications(w.notifier)
    assert (await client.info(w.notified))["qiNtf"] is True

    # The full queue: its messages in order, then the QUOTA marker, then room again.
    await client.subscribe(w.full)
    for i in range(QUOTA_SIZE):
        event = await client.next_event()
        assert (event.body, event.quota) == (b"full %d" % i, False)
        await client.ack(w.full, event.msg_id)
    marker = await client.next_event()
    assert marker.quota
    await client.ack(w.full, marker.msg_id)
    await client.send(w.full.sender_id, b"room again")
    assert (await client.next_event()).body == b"room again"

    # The unacknowledged message comes again, with the id it had, then the next one.
    await client.subscribe(w.in_flight)
    again = await client.next_event()
    assert (again.msg_id, again.body) == (w.in_flight_id, b"first")
    await client.ack(w.in_flight, again.msg_id)
    assert (await client.next_event()).body == b"second"

    # Deleted stays deleted; suspended stays suspended.
    await expect_error(AUTH, client.subscribe(w.deleted))
    await expect_error(AUTH, client.send(w.deleted.sender_id, b"x"))
    await expect_error(AUTH, client.send(w.suspended.sender_id, b"x"))
    await client.subscribe(w.suspended)


@pytest.mark.parametrize("kind", STORES)
async def test_queues_keys_notifiers_and_messages_survive_two_clean_restarts(kind, tmp_path):
    data_dir = tmp_path / "data"
    with trio.fail_after(60):
        async with running_router(kind, data_dir) as info, open_client(info.address) as c:
            world = await make_world(c)
            first_address = info.address.split("@")[0]
        async with running_router(kind, data_dir) as info:
            # the middle run only opens and closes the stores
            assert info.address.split("@")[0] == first_address
        async with running_router(kind, data_dir) as info, open_client(info.address) as c:
            assert info.address.split("@")[0] == first_address
            await check_world(c, world)


@pytest.mark.parametrize("kind", STORES)
async def test_what_the_last_run_acknowledged_is_not_delivered_after_a_restart(kind, tmp_path):
    data_dir = tmp_path / "data"
    with trio.fail_after(60):
        async with running_router(kind, data_dir) as info, open_client(info.address) as c:
            q = await c.create_queue()
            for body in (b"one", b"two", b"three"):
                await c.send(q.sender_id, body)
            await c.subscribe(q)
            first = await c.next_event()
            await c.ack(q, first.msg_id)
            second = await c.next_event()
            await c.ack(q, second.msg_id)
            third = await c.next_event()  # delivered, not acknowledged
        for _ in range(2):
            async with running_router(kind, data_dir):
                pass
        async with running_router(kind, data_dir) as info, open_client(info.address) as c:
            await c.subscribe(q)
            again = await c.next_event()
            assert (again.msg_id, again.body) == (third.msg_id, b"three")
            await c.ack(q, again.msg_id)
            await assert_no_more_events(c)
            assert (await c.info(q))["qiSize"] == 0
