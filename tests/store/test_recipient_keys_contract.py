"""RKEY's recipient keys (docs/protocol.md#rkey) under every queue store kind:
`set_recipient_keys` replaces them, the first stays `recipient_key`, the others
are `more_recipient_keys`, and a durable store keeps them across a reopen."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from router.protocol.types import AUTH
from store.interfaces import Party, QueueLinkData, QueueRecord


def new_key() -> bytes:
    return b"rk" + os.urandom(42)


def make_record(**changes: object) -> QueueRecord:
    rec = QueueRecord(
        recipient_id=os.urandom(24),
        sender_id=os.urandom(24),
        recipient_key=new_key(),
        rcv_dh_secret=os.urandom(32),
        sender_key=None,
        snd_secure=False,
        queue_mode=b"C",
    )
    return replace(rec, **changes)


async def test_setting_recipient_keys_replaces_them_all(queues):
    rec = make_record()
    assert await queues.add_queue(rec) is None
    keys = (new_key(), new_key(), new_key())
    assert await queues.set_recipient_keys(rec.recipient_id, keys) is None
    got = await queues.get_queue(Party.RECIPIENT, rec.recipient_id)
    assert got.recipient_keys == keys
    assert got.recipient_key == keys[0] and got.more_recipient_keys == keys[1:]
    assert got.sender_id == rec.sender_id and got.rcv_dh_secret == rec.rcv_dh_secret
    assert await queues.get_queue(Party.SENDER, rec.sender_id) == got


async def test_back_to_one_recipient_key(queues):
    rec = make_record(more_recipient_keys=(new_key(),))
    assert await queues.add_queue(rec) is None
    only = (new_key(),)
    assert await queues.set_recipient_keys(rec.recipient_id, only) is None
    got = await queues.get_queue(Party.RECIPIENT, rec.recipient_id)
    assert got.recipient_keys == only and got.more_recipient_keys == ()


async def test_a_queue_added_with_more_keys_keeps_them(queues):
    rec = make_record(more_recipient_keys=(new_key(), new_key()))
    assert await queues.add_queue(rec) is None
    assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec
    assert [r async for r in queues.iter_queues()] == [rec]


async def test_recipient_keys_of_a_missing_or_deleted_queue_are_auth(queues):
    assert await queues.set_recipient_keys(os.urandom(24), (new_key(),)) is AUTH
    rec = make_record()
    await queues.add_queue(rec)
    await queues.delete_queue(rec.recipient_id)
    assert await queues.set_recipient_keys(rec.recipient_id, (new_key(),)) is AUTH


async def test_no_recipient_key_at_all_is_a_caller_bug(queues):
    rec = make_record()
    await queues.add_queue(rec)
    with pytest.raises(ValueError):
        await queues.set_recipient_keys(rec.recipient_id, ())
    assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec


async def test_recipient_keys_leave_the_link_in_place(queues):
    link = QueueLinkData(os.urandom(24), b"fixed", b"user")
    rec = make_record(link_id=link.link_id)
    assert await queues.add_queue(rec, link) is None
    keys = (new_key(), new_key())
    assert await queues.set_recipient_keys(rec.recipient_id, keys) is None
    assert await queues.get_link(rec.recipient_id) == link
    assert (await queues.get_queue(Party.LINK, link.link_id)).recipient_keys == keys


async def test_a_persistent_store_keeps_recipient_keys_across_a_reopen(
    persistent_queue_backend, store_path
):
    changed, created, single = make_record(), make_record(), make_record()
    keys = (new_key(), new_key())
    created = replace(created, more_recipient_keys=(new_key(),))
    async with persistent_queue_backend.open(store_path) as store:
        for rec in (changed, created, single):
            assert await store.add_queue(rec) is None
        assert await store.set_recipient_keys(changed.recipient_id, keys) is None
    async with persistent_queue_backend.open(store_path) as store:
        got = await store.get_queue(Party.RECIPIENT, changed.recipient_id)
        assert got.recipient_keys == keys
        assert await store.get_queue(Party.RECIPIENT, created.recipient_id) == created
        assert await store.get_queue(Party.RECIPIENT, single.recipient_id) == single
