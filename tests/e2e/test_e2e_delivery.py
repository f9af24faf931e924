"""Delivery end to end: the three triggers, one message in flight, ACK, GET, takeover, DEL."""

from __future__ import annotations

import pytest
import trio
from e2e_helpers import assert_no_more_events, create_queues, send_many

from router.client import DeletedEvent, EndEvent, MessageEvent, open_client
from router.protocol import crypto
from router.protocol.types import ACK, CMD_PROHIBITED, ERR, GET, MSG, NO_MSG, OK, SUB


async def test_messages_sent_before_subscribing_arrive_after_sub(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"early")
            await client.subscribe(q)
            event = await client.next_event()
            assert isinstance(event, MessageEvent) and event.body == b"early"
            assert event.flags == b"F" and event.recipient_id == q.recipient_id


async def test_a_message_sent_to_a_subscribed_empty_queue_is_pushed(router):
    with trio.fail_after(10):
        async with open_client(router.address) as recipient, open_client(router.address) as sender:
            q = await recipient.create_queue(subscribe=True)
            await sender.send(q.sender_id, b"pushed", notify=True)
            event = await recipient.next_event()
            assert event.body == b"pushed" and event.flags == b"T"


async def test_only_one_message_is_in_flight_until_it_is_acknowledged(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue(subscribe=True)
            for body in (b"one", b"two", b"three"):
                await client.send(q.sender_id, body)
            first = await client.next_event()
            assert first.body == b"one"
            await assert_no_more_events(client)
            info = await client.info(q)
            assert info["qiSize"] == 3 and "qDelivered" in info["qiSub"]
            await client.ack(q, first.msg_id)
            second = await client.next_event()
            assert second.body == b"two"
            await assert_no_more_events(client)


async def test_ack_is_answered_with_the_next_message(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"first")
            await client.send(q.sender_id, b"second")
            await client.subscribe(q)
            first = await client.next_event()
            resp = await client.command(q.recipient_id, ACK(first.msg_id), q.rcv_auth_seed)
            assert isinstance(resp, MSG)
            assert crypto.decrypt_msg_body(q.box_key, resp.msg_id, resp.enc_body).body == b"second"
            last = await client.command(q.recipient_id, ACK(resp.msg_id), q.rcv_auth_seed)
            assert last == OK()


async def test_ack_with_the_wrong_msg_id_or_nothing_delivered_is_no_msg(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            ack = ACK(b"\x01" * 24)
            assert await client.command(q.recipient_id, ack, q.rcv_auth_seed) == ERR(NO_MSG)
            await client.subscribe(q)
            assert await client.command(q.recipient_id, ack, q.rcv_auth_seed) == ERR(NO_MSG)
            await client.send(q.sender_id, b"m")
            event = await client.next_event()
            assert await client.command(q.recipient_id, ack, q.rcv_auth_seed) == ERR(NO_MSG)
            await client.ack(q, event.msg_id)
            again = ACK(event.msg_id)
            assert await client.command(q.recipient_id, again, q.rcv_auth_seed) == ERR(NO_MSG)


async def test_ack_with_an_empty_msg_id_acknowledges_whatever_was_delivered(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue(subscribe=True)
            await client.send(q.sender_id, b"m")
            await client.next_event()
            assert await client.command(q.recipient_id, ACK(b""), q.rcv_auth_seed) == OK()
            assert (await client.info(q))["qiSize"] == 0


async def test_sub_again_on_the_same_connection_sends_the_head_again(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue(subscribe=True)
            await client.send(q.sender_id, b"m")
            first = await client.next_event()
            await client.subscribe(q)
            again = await client.next_event()
            assert again.msg_id == first.msg_id


async def test_get_returns_the_head_until_it_is_acknowledged_and_ack_then_says_ok(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            assert await client.get(q) is None
            await client.send(q.sender_id, b"a")
            await client.send(q.sender_id, b"b")
            first = await client.get(q)
            assert (await client.get(q)).msg_id == first.msg_id
            resp = await client.command(q.recipient_id, ACK(first.msg_id), q.rcv_auth_seed)
            assert resp == OK()  # GET mode: the next message is not sent along
            assert (await client.get(q)).body == b"b"
            await assert_no_more_events(client)


async def test_sub_after_get_and_get_while_subscribed_are_prohibited(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client, open_client(router.address) as other:
            polled, subscribed = await create_queues(client, 2)
            await client.get(polled)
            resp = await client.command(polled.recipient_id, SUB(), polled.rcv_auth_seed)
            assert resp == ERR(CMD_PROHIBITED)
            await client.subscribe(subscribed)
            resp = await client.command(subscribed.recipient_id, GET(), subscribed.rcv_auth_seed)
            assert resp == ERR(CMD_PROHIBITED)
            # the rule is per connection: another one may SUB the polled queue
            await other.subscribe(polled)


async def test_a_new_subscriber_displaces_the_old_one_which_gets_end(router):
    with trio.fail_after(10):
        async with open_client(router.address) as old, open_client(router.address) as new:
            q = await old.create_queue(subscribe=True)
            await old.send(q.sender_id, b"unacknowledged")
            delivered = await old.next_event()
            new.add_queue(q)
            await new.subscribe(q)
            resent = await new.next_event()
            assert resent.msg_id == delivered.msg_id and resent.body == b"unacknowledged"
            assert await old.next_event() == EndEvent(q.recipient_id)
            ack = ACK(delivered.msg_id)
            assert await old.command(q.recipient_id, ack, q.rcv_auth_seed) == ERR(NO_MSG)
            await new.ack(q, resent.msg_id)
            stats = router.router.statistics()
            assert stats.subscriptions == 1 and stats.subscriptions_displaced == 1


async def test_a_displaced_client_that_subscribes_again_takes_the_queue_back(router):
    with trio.fail_after(10):
        async with open_client(router.address) as a, open_client(router.address) as b:
            q = await a.create_queue(subscribe=True)
            b.add_queue(q)
            await b.subscribe(q)
            assert await a.next_event() == EndEvent(q.recipient_id)
            await a.subscribe(q)
            assert await b.next_event() == EndEvent(q.recipient_id)
            await a.send(q.sender_id, b"back")
            assert (await a.next_event()).body == b"back"
            await assert_no_more_events(b)


@pytest.mark.parametrize("version, event_type", [(10, DeletedEvent), (9, EndEvent)])
async def test_deleting_a_queue_tells_the_subscriber_on_another_connection(
    router, version, event_type
):
    with trio.fail_after(10):
        async with (
            open_client(router.address, versions=(9, version)) as subscriber,
            open_client(router.address) as owner,
        ):
            assert subscriber.version == version
            q = await owner.create_queue()
            subscriber.add_queue(q)
            await subscriber.subscribe(q)
            await owner.delete(q)
            assert await subscriber.next_event() == event_type(q.recipient_id)
            assert router.router.statistics().subscriptions == 0


@pytest.mark.scale
async def test_a_thousand_queues_subscribed_in_batches_get_every_message_once_in_order(router):
    with trio.fail_after(60):
        async with open_client(router.address) as recipient, open_client(router.address) as sender:
            queues = await create_queues(recipient, 1000)
            by_id = {q.recipient_id: q for q in queues}
            await send_many(sender, [(q.sender_id, b"%d:0" % i) for i, q in enumerate(queues)])
            await send_many(sender, [(q.sender_id, b"%d:1" % i) for i, q in enumerate(queues)])
            assert all(e is None for e in await recipient.subscribe_many(queues))
            received: dict[bytes, list[bytes]] = {rid: [] for rid in by_id}
            firsts = [await recipient.next_event() for _ in queues]
            for event in firsts:
                received[event.recipient_id].append(event.body)
            acks = [(e.recipient_id, ACK(e.msg_id), by_id[e.recipient_id].rcv_auth_seed)
                    for e in firsts]
            seconds = await recipient.commands(acks)
            for (rid, _, _), resp in zip(acks, seconds, strict=True):
                assert isinstance(resp, MSG)
                q = by_id[rid]
                received[rid].append(
                    crypto.decrypt_msg_body(q.box_key, resp.msg_id, resp.enc_body).body
                )
            final = await recipient.commands(
                [(rid, ACK(b""), seed) for rid, _, seed in acks]
            )
            assert all(r == OK() for r in final)
            for i, q in enumerate(queues):
                assert received[q.recipient_id] == [b"%d:0" % i, b"%d:1" % i]
            await assert_no_more_events(recipient)


@pytest.mark.scale
async def test_a_thousand_subscribed_empty_queues_each_get_their_pushed_message_once(router):
    with trio.fail_after(60):
        async with open_client(router.address) as recipient, open_client(router.address) as sender:
            queues = await create_queues(recipient, 1000, subscribe=True)
            await send_many(sender, [(q.sender_id, q.recipient_id) for q in queues])
            events = [await recipient.next_event() for _ in queues]
            assert sorted(e.body for e in events) == sorted(q.recipient_id for q in queues)
            assert all(e.body == e.recipient_id for e in events)
            await assert_no_more_events(recipient)
            assert router.router.statistics().messages_delivered == 1000
