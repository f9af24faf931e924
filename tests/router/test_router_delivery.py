"""Delivery at the router: the three triggers, one message in flight, ACK, GET, takeover, DEL."""

from __future__ import annotations

import json

import pytest
import trio
from router_scale import scaled
from smp_session import Queue, Session, connect

from router.protocol.types import (
    ACK,
    CMD_PROHIBITED,
    DEL,
    DELD,
    END,
    ERR,
    GET,
    INFO,
    MSG,
    NO_MSG,
    OK,
    QUE,
    SEND,
    SUB,
)


async def queue_info(client: Session, q: Queue) -> dict:
    info = await client.recipient(q, QUE())
    assert isinstance(info, INFO), info
    return json.loads(info.json)


async def test_messages_sent_before_subscribing_arrive_after_sub(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"early")
            assert await client.recipient(q, SUB()) == OK()
            _, body = await client.next_message(q)
            assert (body.body, body.flags) == (b"early", b"F")


async def test_a_message_sent_to_a_subscribed_empty_queue_is_pushed(router):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as sender:
            q = await recipient.create_queue(subscribe=True)
            await sender.expect_ok(q.sender_id, SEND(b"T", b"pushed"))
            _, body = await recipient.next_message(q)
            assert (body.body, body.flags) == (b"pushed", b"T")


async def test_only_one_message_is_in_flight_until_it_is_acknowledged(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue(subscribe=True)
            for body in (b"one", b"two", b"three"):
                await client.send(q.sender_id, body)
            first, body = await client.next_message(q)
            assert body.body == b"one"
            assert await client.no_more_events()
            info = await queue_info(client, q)
            assert info["qiSize"] == 3 and "qDelivered" in info["qiSub"]
            assert await client.recipient(q, ACK(first.msg_id)) == OK()
            _, body = await client.next_message(q)
            assert body.body == b"two"
            assert await client.no_more_events()


async def test_ack_is_answered_with_the_next_message(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"first")
            await client.send(q.sender_id, b"second")
            assert await client.recipient(q, SUB()) == OK()
            first, _ = await client.next_message(q)
            resp = await client.command(
                q.recipient_id, ACK(first.msg_id), q.rcv_seed, msg_is_event=False
            )
            assert isinstance(resp, MSG) and q.open(resp).body == b"second"
            assert await client.recipient(q, ACK(resp.msg_id)) == OK()


async def test_ack_with_the_wrong_msg_id_or_nothing_delivered_is_no_msg(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            ack = ACK(b"\x01" * 24)
            assert await client.recipient(q, ack) == ERR(NO_MSG)
            assert await client.recipient(q, SUB()) == OK()
            assert await client.recipient(q, ack) == ERR(NO_MSG)
            await client.send(q.sender_id, b"m")
            msg, _ = await client.next_message(q)
            assert await client.recipient(q, ack) == ERR(NO_MSG)
            assert await client.recipient(q, ACK(msg.msg_id)) == OK()
            assert await client.recipient(q, ACK(msg.msg_id)) == ERR(NO_MSG)


async def test_ack_with_an_empty_msg_id_acknowledges_whatever_was_delivered(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue(subscribe=True)
            await client.send(q.sender_id, b"m")
            await client.next_message(q)
            assert await client.recipient(q, ACK(b"")) == OK()
            assert (await queue_info(client, q))["qiSize"] == 0


async def test_sub_again_on_the_same_connection_sends_the_head_again(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue(subscribe=True)
            await client.send(q.sender_id, b"m")
            first, _ = await client.next_message(q)
            assert await client.recipient(q, SUB()) == OK()
            again, _ = await client.next_message(q)
            assert again.msg_id == first.msg_id


async def test_get_returns_the_head_until_it_is_acknowledged_and_ack_then_says_ok(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            assert await client.recipient(q, GET()) == OK()  # empty
            await client.send(q.sender_id, b"a")
            await client.send(q.sender_id, b"b")
            first = await client.recipient(q, GET())
            assert isinstance(first, MSG) and q.open(first).body == b"a"
            assert await client.recipient(q, GET()) == first
            # GET mode: the next message is not sent along
            assert await client.recipient(q, ACK(first.msg_id)) == OK()
            second = await client.recipient(q, GET())
            assert isinstance(second, MSG) and q.open(second).body == b"b"
            assert await client.no_more_events()


async def test_sub_after_get_and_get_while_subscribed_are_prohibited(router):
    with trio.fail_after(10):
        async with connect(router) as client, connect(router) as other:
            polled, subscribed = await client.create_queues(2)
            assert await client.recipient(polled, GET()) == OK()
            assert await client.recipient(polled, SUB()) == ERR(CMD_PROHIBITED)
            assert await client.recipient(subscribed, SUB()) == OK()
            assert await client.recipient(subscribed, GET()) == ERR(CMD_PROHIBITED)
            # the rule is per connection: another one may SUB the polled queue
            assert await other.recipient(polled, SUB()) == OK()


async def test_a_new_subscriber_displaces_the_old_one_which_gets_end(router):
    with trio.fail_after(10):
        async with connect(router) as old, connect(router) as new:
            q = await old.create_queue(subscribe=True)
            await old.send(q.sender_id, b"unacknowledged")
            delivered, _ = await old.next_message(q)
            assert await new.recipient(q, SUB()) == OK()
            resent, body = await new.next_message(q)
            assert resent.msg_id == delivered.msg_id and body.body == b"unacknowledged"
            end = await old.next_event()
            assert (end.entity_id, end.response) == (q.recipient_id, END())
            assert await old.recipient(q, ACK(delivered.msg_id)) == ERR(NO_MSG)
            assert await new.recipient(q, ACK(resent.msg_id)) == OK()
            stats = router.statistics()
            assert stats.subscriptions == 1 and stats.subscriptions_displaced == 1


async def test_a_displaced_client_that_subscribes_again_takes_the_queue_back(router):
    with trio.fail_after(10):
        async with connect(router) as a, connect(router) as b:
            q = await a.create_queue(subscribe=True)
            assert await b.recipient(q, SUB()) == OK()
            assert (await a.next_event()).response == END()
            assert await a.recipient(q, SUB()) == OK()
            assert (await b.next_event()).response == END()
            await a.send(q.sender_id, b"back")
            _, body = await a.next_message(q)
            assert body.body == b"back"
            assert await b.no_more_events()


@pytest.mark.parametrize(("version", "event"), [(10, DELD()), (9, END())])
async def test_deleting_a_queue_tells_the_subscriber_on_another_connection(
    router, version, event
):
    with trio.fail_after(10):
        async with connect(router, version=version) as subscriber, connect(router) as owner:
            q = await owner.create_queue()
            assert await subscriber.recipient(q, SUB()) == OK()
            await owner.expect_ok(q.recipient_id, DEL(), q.rcv_seed)
            told = await subscriber.next_event()
            assert (told.entity_id, told.response) == (q.recipient_id, event)
            assert router.statistics().subscriptions == 0


@pytest.mark.scale
async def test_a_thousand_queues_subscribed_in_batches_get_every_message_once_in_order(
    router, store_kind
):
    with trio.fail_after(60):
        async with connect(router) as recipient, connect(router) as sender:
            queues = await recipient.create_queues(scaled(store_kind, 1000))
            by_id = {q.recipient_id: q for q in queues}
            for round_ in (0, 1):
                sends = [(q.sender_id, SEND(b"F", b"%d:%d" % (i, round_)), None)
                         for i, q in enumerate(queues)]
                assert set(await sender.commands(sends)) == {OK()}
            subs = await recipient.commands([(q.recipient_id, SUB(), q.rcv_seed) for q in queues])
            assert set(subs) == {OK()}
            received: dict[bytes, list[bytes]] = {rid: [] for rid in by_id}
            firsts = [await recipient.next_event() for _ in queues]
            for event in firsts:
                received[event.entity_id].append(by_id[event.entity_id].open(event.response).body)
            acks = [(e.entity_id, ACK(e.response.msg_id), by_id[e.entity_id].rcv_seed)
                    for e in firsts]
            seconds = await recipient.commands(acks, msg_is_event=False)
            for (rid, _, _), resp in zip(acks, seconds, strict=True):
                assert isinstance(resp, MSG)
                received[rid].append(by_id[rid].open(resp).body)
            final = await recipient.commands([(rid, ACK(b""), seed) for rid, _, seed in acks])
            assert set(final) == {OK()}
            for i, q in enumerate(queues):
                assert received[q.recipient_id] == [b"%d:0" % i, b"%d:1" % i]
            assert await recipient.no_more_events()


@pytest.mark.scale
async def test_a_thousand_subscribed_empty_queues_each_get_their_pushed_message_once(
    router, store_kind
):
    with trio.fail_after(60):
        async with connect(router) as recipient, connect(router) as sender:
            queues = await recipient.create_queues(scaled(store_kind, 1000), subscribe=True)
            by_id = {q.recipient_id: q for q in queues}
            sends = [(q.sender_id, SEND(b"F", q.recipient_id), None) for q in queues]
            assert set(await sender.commands(sends)) == {OK()}
            events = [await recipient.next_event() for _ in queues]
            bodies = [by_id[e.entity_id].open(e.response).body for e in events]
            assert sorted(bodies) == sorted(by_id)
            assert all(b == e.entity_id for b, e in zip(bodies, events, strict=True))
            assert await recipient.no_more_events()
            assert router.statistics().messages_delivered == len(queues)
