"""Notifications end to end: NKEY, NSUB, NMSG for flagged SENDs, takeover, NDEL and DEL."""

from __future__ import annotations

import pytest
import trio
from e2e_helpers import assert_no_more_events, create_queues

from router.client import (
    DeletedEvent,
    EndEvent,
    MessageEvent,
    NotificationEvent,
    NotifierCredentials,
    SMPClient,
    SMPError,
    open_client,
)
from router.protocol import crypto
from router.protocol.types import AUTH, NID, NKEY, NSUB, OK, SEND


async def notifications_until(
    ntf: SMPClient, last_msg_id: bytes, creds: NotifierCredentials
) -> list[tuple[bytes, int]]:
    """(msgId, ts) of each NMSG, opened with the recipient's key, up to `last_msg_id`.

    NMSGs of one notifier arrive in SEND order, so once the last one is here
    every earlier one has arrived too."""
    out: list[tuple[bytes, int]] = []
    while not out or out[-1][0] != last_msg_id:
        event = await ntf.next_event()
        assert isinstance(event, NotificationEvent), event
        assert event.notifier_id == creds.notifier_id
        out.append(crypto.decrypt_ntf_meta(creds.ntf_box_key, event.nonce, event.enc_meta))
    return out


async def test_a_notifier_gets_an_nmsg_for_each_flagged_send_that_opens_to_the_msg_id_and_time(
    router,
):
    with trio.fail_after(10):
        async with (
            open_client(router.address) as recipient,
            open_client(router.address) as sender,
            open_client(router.address) as ntf,
        ):
            q = await recipient.create_queue(subscribe=True)
            creds = await recipient.enable_notifications(q)
            await ntf.subscribe_notifications(creds)
            flagged: list[tuple[bytes, int]] = []
            for i in range(12):
                await sender.send(q.sender_id, b"%d" % i, notify=i % 2 == 0)
                message = await recipient.next_event()
                assert isinstance(message, MessageEvent) and message.body == b"%d" % i
                if i % 2 == 0:
                    flagged.append((message.msg_id, message.ts))
                await recipient.ack(q, message.msg_id)
            assert await notifications_until(ntf, flagged[-1][0], creds) == flagged
            await assert_no_more_events(ntf)


async def test_nkey_again_gives_a_new_notifier_id_and_the_old_one_is_refused(router):
    with trio.fail_after(10):
        async with open_client(router.address) as recipient, open_client(router.address) as ntf:
            q = await recipient.create_queue()
            old = await recipient.enable_notifications(q)
            await ntf.subscribe_notifications(old)
            new = await recipient.enable_notifications(q)
            assert new.notifier_id != old.notifier_id
            assert new.srv_ntf_dh_key != old.srv_ntf_dh_key
            assert await ntf.next_event() == EndEvent(old.notifier_id)
            with pytest.raises(SMPError) as e:
                await ntf.subscribe_notifications(old)
            assert e.value.error == AUTH
            await ntf.subscribe_notifications(new)
            await recipient.send(q.sender_id, b"x", notify=True)
            message = await recipient.get(q)
            assert await notifications_until(ntf, message.msg_id, new) == [
                (message.msg_id, message.ts)
            ]
            await assert_no_more_events(ntf)


async def test_nsub_from_a_second_connection_ends_the_first_and_takes_the_notifications(router):
    with trio.fail_after(10):
        async with (
            open_client(router.address) as recipient,
            open_client(router.address) as first,
            open_client(router.address) as second,
        ):
            q = await recipient.create_queue()
            creds = await recipient.enable_notifications(q)
            await first.subscribe_notifications(creds)
            await second.subscribe_notifications(creds)
            assert await first.next_event() == EndEvent(creds.notifier_id)
            await recipient.send(q.sender_id, b"x", notify=True)
            message = await recipient.get(q)
            assert await notifications_until(second, message.msg_id, creds) == [
                (message.msg_id, message.ts)
            ]
            await assert_no_more_events(first)


@pytest.mark.parametrize(("version", "ended"), [(9, EndEvent), (10, DeletedEvent)])
async def test_ndel_and_del_end_the_notifier_subscription(router, version, ended):
    with trio.fail_after(10):
        async with (
            open_client(router.address) as recipient,
            open_client(router.address, versions=(version, version)) as ntf,
        ):
            q1, q2 = await recipient.create_queue(), await recipient.create_queue()
            creds1 = await recipient.enable_notifications(q1)
            creds2 = await recipient.enable_notifications(q2)
            await ntf.subscribe_notifications(creds1)
            await ntf.subscribe_notifications(creds2)
            await recipient.disable_notifications(q1)
            await recipient.disable_notifications(q1)  # no notifier any more: still OK
            assert await ntf.next_event() == ended(creds1.notifier_id)
            await recipient.delete(q2)
            assert await ntf.next_event() == ended(creds2.notifier_id)
            with pytest.raises(SMPError):
                await ntf.subscribe_notifications(creds1)


async def test_notifications_sent_while_no_notifier_listens_arrive_on_nsub_unless_removed(router):
    with trio.fail_after(10):
        async with (
            open_client(router.address) as recipient,
            open_client(router.address) as ntf,
        ):
            kept, dropped = await recipient.create_queue(), await recipient.create_queue()
            kept_creds = await recipient.enable_notifications(kept)
            await recipient.enable_notifications(dropped)
            await recipient.send(kept.sender_id, b"while away", notify=True)
            await recipient.send(dropped.sender_id, b"while away", notify=True)
            assert router.router.notifications.pending(kept_creds.notifier_id) == 1
            assert len(router.router.notifications) == 2
            # NDEL drops the pending NMSG before it answers; a new notifier starts empty
            await recipient.disable_notifications(dropped)
            assert len(router.router.notifications) == 1
            dropped_creds = await recipient.enable_notifications(dropped)
            await ntf.subscribe_notifications(dropped_creds)
            await ntf.subscribe_notifications(kept_creds)
            message = await recipient.get(kept)
            assert await notifications_until(ntf, message.msg_id, kept_creds) == [
                (message.msg_id, message.ts)
            ]
            await assert_no_more_events(ntf)


async def test_many_notifications_for_one_connection_arrive_packed_into_few_blocks(
    router_factory,
):
    # A window long enough for the SENDs of a few blocks to land in one batch.
    info = await router_factory(ntf_batch_interval=0.5)
    with trio.fail_after(20):
        async with open_client(info.address) as recipient, open_client(info.address) as ntf:
            queues = await create_queues(recipient, 200)
            keys = [(crypto.new_ed25519(), crypto.new_x25519()) for _ in queues]
            nids = await recipient.commands([
                (q.recipient_id, NKEY(ntf_key, dh_key), q.rcv_auth_seed)
                for q, ((_, ntf_key), (_, dh_key)) in zip(queues, keys, strict=True)
            ])
            assert all(isinstance(n, NID) for n in nids)
            subscribed = await ntf.commands([
                (n.notifier_id, NSUB(), seed)  # type: ignore[union-attr]
                for n, ((seed, _), _) in zip(nids, keys, strict=True)
            ])
            assert subscribed == [OK()] * 200
            blocks_before = ntf.statistics().blocks_received
            sent = await recipient.commands([(q.sender_id, SEND(b"T", b"x"), None) for q in queues])
            assert sent == [OK()] * 200
            events = [await ntf.next_event() for _ in queues]
            assert {e.notifier_id for e in events} == {n.notifier_id for n in nids}  # type: ignore
            # 200 NMSGs one by one would take 200 blocks; a block holds about 80 of them
            assert ntf.statistics().blocks_received - blocks_before <= 6
