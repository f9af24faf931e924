"""Smoke tests of the client against the real router on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from router.client import (
    ConnectionClosed,
    EndEvent,
    MessageEvent,
    SMPClient,
    SMPError,
    open_client,
)
from router.protocol import BLOCK_SIZE, crypto, pad_block
from router.protocol.types import AUTH, BLOCK, ERR, NO_MSG
from router.server import RouterConfig, RouterInfo, serve_router


@asynccontextmanager
async def running_router(**options: object) -> AsyncIterator[RouterInfo]:
    async with trio.open_nursery() as nursery:
        info: RouterInfo = await nursery.start(serve_router, RouterConfig(port=0, **options))
        yield info
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def router_and_client(**options: object) -> AsyncIterator[tuple[RouterInfo, SMPClient]]:
    async with running_router(**options) as info, open_client(info.address) as client:
        yield info, client


async def test_a_message_goes_from_sender_to_subscribed_recipient_and_is_acknowledged():
    with trio.fail_after(10):
        async with router_and_client() as (info, recipient):
            q = await recipient.create_queue()
            sender_seed, sender_key = crypto.new_ed25519()
            await recipient.secure_queue(q, sender_key)
            async with open_client(info.url, key_hash=info.key_hash) as sender:
                await sender.send(q.sender_id, b"hello", sender_seed=sender_seed)
                await sender.send(q.sender_id, b"again", sender_seed=sender_seed)
            await recipient.subscribe(q)
            first = await recipient.next_event()
            assert isinstance(first, MessageEvent) and first.body == b"hello"
            await recipient.ack(q, first.msg_id)
            second = await recipient.next_event()
            assert second.body == b"again" and second.msg_id != first.msg_id
            await recipient.ack(q, second.msg_id)
            assert recipient.next_event_nowait() is None


async def test_a_sender_secures_a_queue_itself_and_an_unsigned_send_is_then_refused():
    with trio.fail_after(10):
        async with router_and_client() as (_, client):
            q = await client.create_queue(subscribe=True)
            seed, key = crypto.new_ed25519()
            await client.secure_sender(q.sender_id, seed, key)
            with pytest.raises(SMPError) as e:
                await client.send(q.sender_id, b"unsigned")
            assert e.value.error == AUTH
            await client.send(q.sender_id, b"signed", sender_seed=seed)
            event = await client.next_event()
            assert event.body == b"signed"


async def test_get_reads_the_head_message_and_ack_with_nothing_delivered_is_no_msg():
    with trio.fail_after(10):
        async with router_and_client() as (_, client):
            q = await client.create_queue(snd_secure=False)
            assert await client.get(q) is None
            await client.send(q.sender_id, b"polled")
            message = await client.get(q)
            assert message is not None and message.body == b"polled"
            await client.ack(q, message.msg_id)
            with pytest.raises(SMPError) as e:
                await client.ack(q, message.msg_id)
            assert e.value.error == NO_MSG


async def test_many_subscriptions_in_one_call_each_get_their_waiting_message():
    with trio.fail_after(30):
        async with router_and_client() as (info, client):
            queues = [await client.create_queue() for _ in range(300)]
            for q in queues:
                await client.send(q.sender_id, q.recipient_id)
            async with open_client(info.address) as other:
                results = await other.subscribe_many(queues)
                assert results == [None] * len(queues)
                bodies = set()
                for _ in queues:
                    event = await other.next_event()
                    bodies.add(event.body)
                assert bodies == {q.recipient_id for q in queues}
            assert other.statistics().blocks_sent < len(queues) // 50


async def test_a_second_subscriber_takes_over_and_the_first_gets_end():
    with trio.fail_after(10):
        async with router_and_client() as (info, first):
            q = await first.create_queue(subscribe=True)
            async with open_client(info.address) as second:
                await second.subscribe(q)
                assert await first.next_event() == EndEvent(q.recipient_id)


async def test_queue_info_suspend_and_delete():
    with trio.fail_after(10):
        async with router_and_client() as (_, client):
            q = await client.create_queue(snd_secure=False)
            await client.send(q.sender_id, b"x")
            info = await client.info(q)
            assert isinstance(info, dict)
            await client.suspend(q)
            with pytest.raises(SMPError):
                await client.send(q.sender_id, b"refused")
            await client.delete(q)
            with pytest.raises(SMPError) as e:
                await client.subscribe(q)
            assert e.value.error == AUTH


async def test_notifications_reach_the_notifier_and_open_with_the_recipient_s_key():
    with trio.fail_after(10):
        async with router_and_client() as (info, client):
            q = await client.create_queue(snd_secure=False)
            creds = await client.enable_notifications(q)
            async with open_client(info.address) as notifier:
                await notifier.subscribe_notifications(creds)
                await client.send(q.sender_id, b"ping me", notify=True)
                event = await notifier.next_event()
            message = await client.get(q)
            assert event.notifier_id == creds.notifier_id
            assert (event.msg_id, event.ts) == (message.msg_id, message.ts)


async def test_a_malformed_block_is_answered_with_err_block_and_the_connection_survives():
    with trio.fail_after(10):
        async with running_router() as info:
            async with open_client(info.address, versions=(9, 10)) as client:
                await client.send_raw_block(b"\xff" * BLOCK_SIZE)
                assert await client.next_raw_response() == ERR(BLOCK)
                await client.ping()
            # Encrypted (v19): a block that opens to a batch that does not parse.
            async with open_client(info.address) as client:
                await client.send_raw_block(pad_block(b"\xff" * 100))
                assert await client.next_raw_response() == ERR(BLOCK)
                await client.ping()


async def test_the_client_negotiates_version_19_with_the_router():
    with trio.fail_after(10):
        async with router_and_client() as (_, client):
            assert client.version == 19
            # smp:// is native TLS: the session id is tls-unique (48 bytes with a SHA-384 suite)
            assert len(client.session_id) in (32, 48)


async def test_ack_many_acknowledges_several_queues_and_next_messages_arrive_as_events():
    with trio.fail_after(10):
        async with router_and_client() as (info, recipient):
            queues = [await recipient.create_queue(snd_secure=False) for _ in range(3)]
            async with open_client(info.address) as sender:
                for q in queues:
                    await sender.send(q.sender_id, b"first")
                    await sender.send(q.sender_id, b"second")
            await recipient.subscribe_many(queues)
            firsts = [await recipient.next_event() for _ in queues]
            assert {e.body for e in firsts} == {b"first"}
            by_id = {q.recipient_id: q for q in queues}
            results = await recipient.ack_many([(by_id[e.recipient_id], e.msg_id) for e in firsts])
            assert results == [None, None, None]
            seconds = [await recipient.next_event() for _ in queues]
            assert {e.body for e in seconds} == {b"second"}
            assert {e.recipient_id for e in seconds} == set(by_id)


async def test_a_websocket_ping_is_answered_by_the_router_and_the_connection_stays_usable():
    with trio.fail_after(10):
        async with running_router() as info, open_client(info.url, info.key_hash) as client:
            await client.websocket_ping()
            await client.ping()


async def test_an_smp_address_is_native_tls_and_a_ws_url_is_websocket_on_the_same_port():
    with trio.fail_after(10):
        async with running_router() as info:
            async with open_client(info.address) as native, \
                    open_client(info.url, info.key_hash) as websocket:
                assert native.session_id != websocket.session_id
                queue = await native.create_queue(subscribe=True)
                await websocket.send(queue.sender_id, b"across transports")
                event = await native.next_event()
                assert event.body == b"across transports"  # type: ignore[union-attr]
                with pytest.raises(ConnectionClosed, match="no transport ping"):
                    await native.websocket_ping()
