"""Notifications at the router: NKEY, NSUB, NMSG for flagged SENDs, takeover, NDEL and DEL."""

from __future__ import annotations

import pytest
import trio
from smp_session import Notifier, Queue, Session, connect

from router.protocol.types import (
    ACK,
    AUTH,
    DEL,
    DELD,
    END,
    ERR,
    GET,
    MSG,
    NDEL,
    NMSG,
    NSUB,
    OK,
    SEND,
)


async def notifications_until(
    ntf: Session, last_msg_id: bytes, notifier: Notifier
) -> list[tuple[bytes, int]]:
    """(msgId, ts) of each NMSG, opened with the recipient's key, up to `last_msg_id`.

    NMSGs of one notifier arrive in SEND order, so once the last one is here
    every earlier one has arrived too."""
    out: list[tuple[bytes, int]] = []
    while not out or out[-1][0] != last_msg_id:
        event = await ntf.next_event()
        assert isinstance(event.response, NMSG), event
        assert event.entity_id == notifier.notifier_id
        out.append(notifier.open(event.response))
    return out


async def get_message(client: Session, q: Queue) -> tuple[bytes, int]:
    """(msgId, ts) of the queue's head, taken with GET."""
    msg = await client.recipient(q, GET())
    assert isinstance(msg, MSG), msg
    return msg.msg_id, q.open(msg).ts


async def subscribe(ntf: Session, notifier: Notifier) -> None:
    await ntf.expect_ok(notifier.notifier_id, NSUB(), notifier.seed)


async def test_a_notifier_gets_an_nmsg_for_each_flagged_send_that_opens_to_the_msg_id_and_time(
    router,
):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as sender, connect(router) as ntf:
            q = await recipient.create_queue(subscribe=True)
            notifier = await recipient.enable_notifications(q)
            await subscribe(ntf, notifier)
            flagged: list[tuple[bytes, int]] = []
            for i in range(12):
                await sender.expect_ok(q.sender_id, SEND(b"T" if i % 2 == 0 else b"F", b"%d" % i))
                msg, body = await recipient.next_message(q)
                assert body.body == b"%d" % i
                if i % 2 == 0:
                    flagged.append((msg.msg_id, body.ts))
                await recipient.expect_ok(q.recipient_id, ACK(msg.msg_id), q.rcv_seed)
            assert await notifications_until(ntf, flagged[-1][0], notifier) == flagged
            assert await ntf.no_more_events()


async def test_nkey_again_gives_a_new_notifier_id_and_the_old_one_is_refused(router):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as ntf:
            q = await recipient.create_queue()
            old = await recipient.enable_notifications(q)
            await subscribe(ntf, old)
            new = await recipient.enable_notifications(q)
            assert new.notifier_id != old.notifier_id
            assert new.srv_ntf_dh_key != old.srv_ntf_dh_key
            ended = await ntf.next_event()
            assert (ended.entity_id, ended.response) == (old.notifier_id, END())
            assert await ntf.command(old.notifier_id, NSUB(), old.seed) == ERR(AUTH)
            await subscribe(ntf, new)
            await recipient.expect_ok(q.sender_id, SEND(b"T", b"x"))
            message = await get_message(recipient, q)
            assert await notifications_until(ntf, message[0], new) == [message]
            assert await ntf.no_more_events()


async def test_nsub_from_a_second_connection_ends_the_first_and_takes_the_notifications(router):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as first, \
                connect(router) as second:
            q = await recipient.create_queue()
            notifier = await recipient.enable_notifications(q)
            await subscribe(first, notifier)
            await subscribe(second, notifier)
            ended = await first.next_event()
            assert (ended.entity_id, ended.response) == (notifier.notifier_id, END())
            await recipient.expect_ok(q.sender_id, SEND(b"T", b"x"))
            message = await get_message(recipient, q)
            assert await notifications_until(second, message[0], notifier) == [message]
            assert await first.no_more_events()


@pytest.mark.parametrize(("version", "ended"), [(9, END()), (10, DELD())])
async def test_ndel_and_del_end_the_notifier_subscription(router, version, ended):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router, version=version) as ntf:
            q1, q2 = await recipient.create_queues(2)
            notifier1 = await recipient.enable_notifications(q1)
            notifier2 = await recipient.enable_notifications(q2)
            await subscribe(ntf, notifier1)
            await subscribe(ntf, notifier2)
            assert await recipient.recipient(q1, NDEL()) == OK()
            assert await recipient.recipient(q1, NDEL()) == OK()  # no notifier any more
            event = await ntf.next_event()
            assert (event.entity_id, event.response) == (notifier1.notifier_id, ended)
            assert await recipient.recipient(q2, DEL()) == OK()
            event = await ntf.next_event()
            assert (event.entity_id, event.response) == (notifier2.notifier_id, ended)
            refused = await ntf.command(notifier1.notifier_id, NSUB(), notifier1.seed)
            assert isinstance(refused, ERR)


async def test_notifications_sent_while_no_notifier_listens_arrive_on_nsub_unless_removed(router):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as ntf:
            kept, dropped = await recipient.create_queues(2)
            kept_notifier = await recipient.enable_notifications(kept)
            await recipient.enable_notifications(dropped)
            await recipient.expect_ok(kept.sender_id, SEND(b"T", b"while away"))
            await recipient.expect_ok(dropped.sender_id, SEND(b"T", b"while away"))
            assert router.notifications.pending(kept_notifier.notifier_id) == 1
            assert len(router.notifications) == 2
            # NDEL drops the pending NMSG before it answers; a new notifier starts empty
            assert await recipient.recipient(dropped, NDEL()) == OK()
            assert len(router.notifications) == 1
            dropped_notifier = await recipient.enable_notifications(dropped)
            await subscribe(ntf, dropped_notifier)
            await subscribe(ntf, kept_notifier)
            message = await get_message(recipient, kept)
            assert await notifications_until(ntf, message[0], kept_notifier) == [message]
            assert await ntf.no_more_events()


async def test_many_notifications_for_one_connection_arrive_packed_into_few_blocks(
    router_factory,
):
    # A window long enough for the SENDs of a few blocks to land in one batch, even when
    # a busy machine makes a durable store's 200 SENDs take over a second.
    router = await router_factory(ntf_batch_interval=2.0)
    with trio.fail_after(20):
        async with connect(router) as recipient, connect(router) as ntf:
            queues = await recipient.create_queues(200)
            notifiers = [await recipient.enable_notifications(q) for q in queues]
            subscribed = await ntf.commands([(n.notifier_id, NSUB(), n.seed) for n in notifiers])
            assert subscribed == [OK()] * 200
            blocks_before = ntf.blocks_received
            sent = await recipient.commands([(q.sender_id, SEND(b"T", b"x"), None) for q in queues])
            assert sent == [OK()] * 200
            events = [await ntf.next_event() for _ in queues]
            assert {e.entity_id for e in events} == {n.notifier_id for n in notifiers}
            # 200 NMSGs one by one would take 200 blocks; a block holds about 80 of them
            assert ntf.blocks_received - blocks_before <= 6
