"""Queue management at the router: NEW, KEY, SKEY, SEND rules, OFF, DEL, QUE, quota, sizes."""

from __future__ import annotations

import json

import trio
from smp_session import connect

from router.protocol import crypto
from router.protocol.codec import MAX_MESSAGE_LENGTH
from router.protocol.types import (
    ACK,
    AUTH,
    DEL,
    ERR,
    INFO,
    KEY,
    LARGE_MSG,
    NEW,
    OFF,
    OK,
    QUE,
    QUOTA,
    SEND,
    SKEY,
    SUB,
)


async def test_a_queue_is_created_secured_used_suspended_and_deleted(router):
    with trio.fail_after(10):
        async with connect(router) as recipient, connect(router) as sender:
            q = await recipient.create_queue()
            assert len(q.recipient_id) == 24 and len(q.sender_id) == 24
            seed, key = crypto.new_ed25519()
            assert await recipient.recipient(q, KEY(key)) == OK()
            await sender.send(q.sender_id, b"first", seed)
            assert await recipient.recipient(q, SUB()) == OK()
            msg, body = await recipient.next_message(q)
            assert body.body == b"first"
            info = await recipient.recipient(q, QUE())
            assert isinstance(info, INFO)
            assert json.loads(info.json)["qiSnd"] is True and json.loads(info.json)["qiSize"] == 1
            assert await recipient.recipient(q, ACK(msg.msg_id)) == OK()
            assert await recipient.recipient(q, OFF()) == OK()
            assert await sender.command(q.sender_id, SEND(b"F", b"late"), seed) == ERR(AUTH)
            assert await recipient.recipient(q, DEL()) == OK()
            assert await recipient.recipient(q, QUE()) == ERR(AUTH)
            stats = router.statistics()
            assert (stats.queues_created, stats.queues_secured, stats.queues_deleted) == (1, 1, 1)


async def test_key_accepts_the_same_key_again_and_refuses_another(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            _, key = crypto.new_ed25519()
            _, other = crypto.new_ed25519()
            assert await client.recipient(q, KEY(key)) == OK()
            assert await client.recipient(q, KEY(key)) == OK()
            assert await client.recipient(q, KEY(other)) == ERR(AUTH)


async def test_send_to_a_secured_queue_must_be_signed_by_its_sender_key(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            seed, key = crypto.new_ed25519()
            wrong_seed, _ = crypto.new_ed25519()
            assert await client.recipient(q, KEY(key)) == OK()
            body = SEND(b"F", b"x")
            assert await client.command(q.sender_id, body) == ERR(AUTH)
            assert await client.command(q.sender_id, body, wrong_seed) == ERR(AUTH)
            assert await client.command(q.sender_id, body, seed) == OK()


async def test_a_signed_send_to_an_unsecured_queue_is_refused(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            seed, _ = crypto.new_ed25519()
            assert await client.command(q.sender_id, SEND(b"F", b"x"), seed) == ERR(AUTH)
            assert await client.command(q.sender_id, SEND(b"F", b"x")) == OK()


async def test_skey_secures_a_sender_secured_queue_with_the_key_it_is_signed_with(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue(snd_secure=True)
            seed, key = crypto.new_ed25519()
            other_seed, other_key = crypto.new_ed25519()
            # signed with another key than the one it installs
            assert await client.command(q.sender_id, SKEY(key), other_seed) == ERR(AUTH)
            assert await client.command(q.sender_id, SKEY(key), seed) == OK()
            assert await client.command(q.sender_id, SKEY(key), seed) == OK()  # same key again
            assert await client.command(q.sender_id, SKEY(other_key), other_seed) == ERR(AUTH)
            assert await client.command(q.sender_id, SEND(b"F", b"x"), seed) == OK()


async def test_skey_is_refused_on_a_queue_made_without_sender_securing(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue(snd_secure=False)
            seed, key = crypto.new_ed25519()
            assert await client.command(q.sender_id, SKEY(key), seed) == ERR(AUTH)


async def test_off_is_idempotent_refuses_only_send_and_leaves_sub_and_del_working(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"before")
            assert await client.recipient(q, OFF()) == OK()
            assert await client.recipient(q, OFF()) == OK()
            assert await client.command(q.sender_id, SEND(b"F", b"after")) == ERR(AUTH)
            assert await client.recipient(q, SUB()) == OK()
            msg, body = await client.next_message(q)
            assert body.body == b"before"
            assert await client.recipient(q, ACK(msg.msg_id)) == OK()
            assert await client.recipient(q, DEL()) == OK()


async def test_commands_for_a_missing_queue_or_with_the_wrong_key_are_auth(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            stranger, _ = crypto.new_ed25519()
            assert await client.command(b"\x00" * 24, SUB(), stranger) == ERR(AUTH)
            assert await client.command(q.recipient_id, SUB(), stranger) == ERR(AUTH)
            # the sender id is not a recipient id
            assert await client.command(q.sender_id, SUB(), q.rcv_seed) == ERR(AUTH)
            assert await client.command(b"\x00" * 24, SEND(b"F", b"x")) == ERR(AUTH)


async def test_quota_refuses_sends_and_the_marker_is_delivered_after_the_last_message(
    router_factory,
):
    router = await router_factory(quota=3)
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue()
            for i in range(3):
                await client.send(q.sender_id, b"m%d" % i)
            for _ in range(2):
                assert await client.command(q.sender_id, SEND(b"F", b"over")) == ERR(QUOTA)
            assert router.statistics().messages_quota_refused == 2
            assert await client.recipient(q, SUB()) == OK()
            received = []
            while True:
                msg, body = await client.next_message(q)
                received.append(body)
                # the queue is not empty until the marker itself is acknowledged
                assert await client.command(q.sender_id, SEND(b"F", b"x")) == ERR(QUOTA)
                assert await client.recipient(q, ACK(msg.msg_id)) == OK()
                if body.quota:
                    break
            assert [b.body for b in received[:3]] == [b"m0", b"m1", b"m2"]
            assert len(received) == 4 and received[3].body == b""
            await client.send(q.sender_id, b"room again")
            _, body = await client.next_message(q)
            assert body.body == b"room again" and not body.quota


async def test_a_body_over_the_limit_is_large_msg_and_one_at_the_limit_arrives_intact(router):
    with trio.fail_after(10):
        async with connect(router) as client:
            q = await client.create_queue(subscribe=True)
            too_big = SEND(b"F", b"x" * (MAX_MESSAGE_LENGTH + 1))
            assert await client.command(q.sender_id, too_big) == ERR(LARGE_MSG)
            body = bytes(range(256)) * (MAX_MESSAGE_LENGTH // 256) + b"y" * (
                MAX_MESSAGE_LENGTH % 256
            )
            await client.send(q.sender_id, body)
            _, opened = await client.next_message(q)
            assert opened.body == body
            assert await client.no_more_events()


async def test_new_needs_the_configured_password(router_factory):
    router = await router_factory(password=b"s3cret")
    with trio.fail_after(10):
        async with connect(router) as client:
            for wrong in (None, b"guess"):
                seed, key = crypto.new_ed25519()
                _, dh = crypto.new_x25519()
                new = NEW(key, dh, wrong, False, False)
                assert await client.command(b"", new, seed) == ERR(AUTH)
            q = await client.create_queue(basic_auth=b"s3cret")
            await client.send(q.sender_id, b"ok")


async def test_new_is_refused_when_queue_creation_is_disabled(router_factory):
    router = await router_factory(allow_new_queues=False)
    with trio.fail_after(10):
        async with connect(router) as client:
            seed, key = crypto.new_ed25519()
            _, dh = crypto.new_x25519()
            assert await client.command(b"", NEW(key, dh, None, False, False), seed) == ERR(AUTH)
