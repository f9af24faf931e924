"""Notifier credentials end to end: NKEY, NSUB, NMSG on SEND, NDEL and DEL."""

from __future__ import annotations

import trio

from router.client import DeletedEvent, EndEvent, NotificationEvent, open_client


async def test_a_notifier_subscriber_gets_nmsg_for_sends_with_the_notify_flag(router):
    with trio.fail_after(10):
        async with open_client(router.address) as recipient, open_client(router.address) as ntf:
            q = await recipient.create_queue(subscribe=True)
            creds = await recipient.enable_notifications(q)
            await ntf.subscribe_notifications(creds)
            await recipient.send(q.sender_id, b"quiet")
            message = await recipient.next_event()
            await recipient.ack(q, message.msg_id)
            await recipient.send(q.sender_id, b"loud", notify=True)
            message = await recipient.next_event()
            event = await ntf.next_event()
            assert isinstance(event, NotificationEvent)
            assert event.notifier_id == creds.notifier_id
            assert (event.msg_id, event.ts) == (message.msg_id, message.ts)


async def test_removing_the_notifier_or_the_queue_ends_the_notifier_subscription(router):
    with trio.fail_after(10):
        async with open_client(router.address) as recipient, open_client(router.address) as ntf:
            q1, q2 = await recipient.create_queue(), await recipient.create_queue()
            creds1 = await recipient.enable_notifications(q1)
            creds2 = await recipient.enable_notifications(q2)
            await ntf.subscribe_notifications(creds1)
            await ntf.subscribe_notifications(creds2)
            await recipient.disable_notifications(q1)
            await recipient.disable_notifications(q1)  # no notifier any more: still OK
            assert await ntf.next_event() == DeletedEvent(creds1.notifier_id)
            await recipient.delete(q2)
            assert await ntf.next_event() == DeletedEvent(creds2.notifier_id)


async def test_a_new_notifier_key_replaces_the_old_notifier(router):
    with trio.fail_after(10):
        async with open_client(router.address) as recipient, open_client(router.address) as ntf:
            q = await recipient.create_queue()
            old = await recipient.enable_notifications(q)
            await ntf.subscribe_notifications(old)
            new = await recipient.enable_notifications(q)
            assert new.notifier_id != old.notifier_id
            assert await ntf.next_event() == EndEvent(old.notifier_id)
