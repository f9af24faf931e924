"""Queue management end to end: NEW, KEY, SKEY, SEND rules, OFF, DEL, QUE, quota, sizes."""

from __future__ import annotations

import pytest
import trio
from e2e_helpers import assert_no_more_events

from router.client import MessageEvent, SMPError, open_client
from router.protocol import crypto
from router.protocol.codec import MAX_MESSAGE_LENGTH
from router.protocol.types import AUTH, ERR, KEY, LARGE_MSG, OK, QUOTA, SEND, SKEY, SUB


async def test_a_queue_is_created_secured_used_suspended_and_deleted(router):
    with trio.fail_after(10):
        async with open_client(router.address) as recipient, open_client(router.address) as sender:
            q = await recipient.create_queue()
            assert len(q.recipient_id) == 24 and len(q.sender_id) == 24
            seed, key = crypto.new_ed25519()
            await recipient.secure_queue(q, key)
            await sender.send(q.sender_id, b"first", sender_seed=seed)
            await recipient.subscribe(q)
            event = await recipient.next_event()
            assert isinstance(event, MessageEvent) and event.body == b"first"
            info = await recipient.info(q)
            assert info["qiSnd"] is True and info["qiSize"] == 1
            await recipient.ack(q, event.msg_id)
            await recipient.suspend(q)
            with pytest.raises(SMPError) as refused:
                await sender.send(q.sender_id, b"late", sender_seed=seed)
            assert refused.value.error == AUTH
            await recipient.delete(q)
            with pytest.raises(SMPError) as gone:
                await recipient.info(q)
            assert gone.value.error == AUTH
            stats = router.router.statistics()
            assert (stats.queues_created, stats.queues_secured, stats.queues_deleted) == (1, 1, 1)


async def test_key_accepts_the_same_key_again_and_refuses_another(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            _, key = crypto.new_ed25519()
            _, other = crypto.new_ed25519()
            await client.secure_queue(q, key)
            await client.secure_queue(q, key)
            resp = await client.command(q.recipient_id, KEY(other), q.rcv_auth_seed)
            assert resp == ERR(AUTH)


async def test_send_to_a_secured_queue_must_be_signed_by_its_sender_key(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            seed, key = crypto.new_ed25519()
            wrong_seed, _ = crypto.new_ed25519()
            await client.secure_queue(q, key)
            body = SEND(b"F", b"x")
            assert await client.command(q.sender_id, body) == ERR(AUTH)
            assert await client.command(q.sender_id, body, wrong_seed) == ERR(AUTH)
            assert await client.command(q.sender_id, body, seed) == OK()


async def test_a_signed_send_to_an_unsecured_queue_is_refused(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            seed, _ = crypto.new_ed25519()
            assert await client.command(q.sender_id, SEND(b"F", b"x"), seed) == ERR(AUTH)
            assert await client.command(q.sender_id, SEND(b"F", b"x")) == OK()


async def test_skey_secures_a_sender_secured_queue_with_the_key_it_is_signed_with(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue(snd_secure=True)
            seed, key = crypto.new_ed25519()
            other_seed, other_key = crypto.new_ed25519()
            # signed with another key than the one it installs
            assert await client.command(q.sender_id, SKEY(key), other_seed) == ERR(AUTH)
            await client.secure_sender(q.sender_id, seed, key)
            await client.secure_sender(q.sender_id, seed, key)  # same key again
            resp = await client.command(q.sender_id, SKEY(other_key), other_seed)
            assert resp == ERR(AUTH)
            assert await client.command(q.sender_id, SEND(b"F", b"x"), seed) == OK()


async def test_skey_is_refused_on_a_queue_made_without_sender_securing(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue(snd_secure=False)
            seed, key = crypto.new_ed25519()
            assert await client.command(q.sender_id, SKEY(key), seed) == ERR(AUTH)


async def test_off_is_idempotent_refuses_only_send_and_leaves_sub_and_del_working(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"before")
            await client.suspend(q)
            await client.suspend(q)
            assert await client.command(q.sender_id, SEND(b"F", b"after")) == ERR(AUTH)
            await client.subscribe(q)
            event = await client.next_event()
            assert event.body == b"before"
            await client.ack(q, event.msg_id)
            await client.delete(q)


async def test_commands_for_a_missing_queue_or_with_the_wrong_key_are_auth(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue()
            stranger, _ = crypto.new_ed25519()
            assert await client.command(b"\x00" * 24, SUB(), stranger) == ERR(AUTH)
            assert await client.command(q.recipient_id, SUB(), stranger) == ERR(AUTH)
            # the sender id is not a recipient id
            assert await client.command(q.sender_id, SUB(), q.rcv_auth_seed) == ERR(AUTH)
            assert await client.command(b"\x00" * 24, SEND(b"F", b"x")) == ERR(AUTH)


async def test_quota_refuses_sends_and_the_marker_is_delivered_after_the_last_message(
    router_factory,
):
    info = await router_factory(quota=3)
    with trio.fail_after(10):
        async with open_client(info.address) as client:
            q = await client.create_queue()
            for i in range(3):
                await client.send(q.sender_id, b"m%d" % i)
            for _ in range(2):
                assert await client.command(q.sender_id, SEND(b"F", b"over")) == ERR(QUOTA)
            assert info.router.statistics().messages_quota_refused == 2
            await client.subscribe(q)
            received = []
            while True:
                event = await client.next_event()
                received.append(event)
                # the queue is not empty until the marker itself is acknowledged
                assert await client.command(q.sender_id, SEND(b"F", b"x")) == ERR(QUOTA)
                await client.ack(q, event.msg_id)
                if event.quota:
                    break
            assert [e.body for e in received[:3]] == [b"m0", b"m1", b"m2"]
            assert len(received) == 4 and received[3].body == b""
            await client.send(q.sender_id, b"room again")
            event = await client.next_event()
            assert event.body == b"room again" and not event.quota


async def test_a_body_over_the_limit_is_large_msg_and_one_at_the_limit_arrives_intact(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            q = await client.create_queue(subscribe=True)
            too_big = SEND(b"F", b"x" * (MAX_MESSAGE_LENGTH + 1))
            assert await client.command(q.sender_id, too_big) == ERR(LARGE_MSG)
            body = bytes(range(256)) * (MAX_MESSAGE_LENGTH // 256) + b"y" * (
                MAX_MESSAGE_LENGTH % 256
            )
            await client.send(q.sender_id, body)
            event = await client.next_event()
            assert event.body == body
            await assert_no_more_events(client)


async def test_new_needs_the_configured_password(router_factory):
    info = await router_factory(password=b"s3cret")
    with trio.fail_after(10):
        async with open_client(info.address) as client:
            for wrong in (None, b"guess"):
                with pytest.raises(SMPError) as refused:
                    await client.create_queue(basic_auth=wrong)
                assert refused.value.error == AUTH
            q = await client.create_queue(basic_auth=b"s3cret")
            await client.send(q.sender_id, b"ok")


async def test_new_is_refused_when_queue_creation_is_disabled(router_factory):
    info = await router_factory(allow_new_queues=False)
    with trio.fail_after(10):
        async with open_client(info.address) as client:
            with pytest.raises(SMPError) as refused:
                await client.create_queue()
            assert refused.value.error == AUTH
