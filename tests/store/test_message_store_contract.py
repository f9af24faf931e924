"""The MessageStore contract, run against every backend in conftest.MESSAGE_BACKENDS.

Quota and marker rules: docs/protocol.md#behaviour
"""

from __future__ import annotations

import os

from store.interfaces import Message, WriteResult

QUOTA = 4


def new_id() -> bytes:
    return os.urandom(24)


def msg(ts: int = 1_700_000_000, body: bytes | None = None) -> Message:
    return Message(new_id(), ts, b"T", os.urandom(50) if body is None else body)


def marker_for(m: Message) -> Message:
    return Message(m.msg_id, m.ts, b"", b"", quota=True)


async def write_all(
    store, rid: bytes, msgs: list[Message], quota: int = QUOTA
) -> list[WriteResult]:
    return [await store.write_message(rid, m, quota) for m in msgs]


async def drain(store, rid: bytes) -> list[Message]:
    """Deliver-and-ACK every message of the queue, as a recipient would."""
    out = []
    while (head := await store.peek_message(rid)) is not None:
        deleted, _ = await store.delete_message(rid, head.msg_id)
        assert deleted
        out.append(head)
    return out


async def all_queue_ids(store) -> set[bytes]:
    return {rid async for rid in store.queue_ids()}


# --- write / peek / delete ------------------------------------------------------


async def test_the_first_write_into_an_empty_queue_says_so(messages):
    rid = new_id()
    assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY
    assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.STORED


async def test_messages_come_out_in_the_order_they_were_written(messages):
    rid = new_id()
    sent = [msg(ts=1_700_000_000 + i, body=bytes([i]) * (i * 100)) for i in range(QUOTA)]
    await write_all(messages, rid, sent)
    assert await drain(messages, rid) == sent


async def test_a_message_with_empty_and_maximal_bodies_is_stored_exactly(messages):
    rid = new_id()
    sent = [Message(new_id(), 1, b"F", b""), Message(new_id(), 2, b"T\x01x", os.urandom(16064))]
    await write_all(messages, rid, sent)
    assert await drain(messages, rid) == sent


async def test_peeking_does_not_remove_the_message(messages):
    rid = new_id()
    m = msg()
    await messages.write_message(rid, m, QUOTA)
    assert await messages.peek_message(rid) == m
    assert await messages.peek_message(rid) == m
    assert await messages.queue_size(rid) == 1


async def test_peeking_an_empty_or_unknown_queue_gives_none(messages):
    assert await messages.peek_message(new_id()) is None


async def test_deleting_the_head_by_its_id_returns_the_next_message(messages):
    rid = new_id()
    a, b = msg(), msg()
    await write_all(messages, rid, [a, b])
    assert await messages.delete_message(rid, a.msg_id) == (True, b)
    assert await messages.delete_message(rid, b.msg_id) == (True, None)
    assert await messages.queue_size(rid) == 0


async def test_deleting_with_another_id_deletes_nothing_and_returns_the_head(messages):
    rid = new_id()
    a, b = msg(), msg()
    await write_all(messages, rid, [a, b])
    assert await messages.delete_message(rid, b.msg_id) == (False, a)
    assert await messages.delete_message(rid, new_id()) == (False, a)
    assert await messages.queue_size(rid) == 2


async def test_deleting_from_an_empty_queue_deletes_nothing(messages):
    assert await messages.delete_message(new_id(), new_id()) == (False, None)


async def test_a_queue_emptied_by_deletes_accepts_into_empty_again(messages):
    rid = new_id()
    await write_all(messages, rid, [msg(), msg()])
    await drain(messages, rid)
    assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY


async def test_queues_are_independent(messages):
    a, b = new_id(), new_id()
    ma, mb = msg(), msg()
    await messages.write_message(a, ma, QUOTA)
    await messages.write_message(b, mb, QUOTA)
    assert await messages.peek_message(a) == ma
    assert await messages.delete_message(b, ma.msg_id) == (False, mb)
    assert await messages.delete_message(b, mb.msg_id) == (True, None)
    assert await messages.peek_message(a) == ma


# --- quota and marker -------------------------------------------------------------


async def test_a_write_past_the_quota_appends_one_marker_and_is_refused(messages):
    rid = new_id()
    sent = [msg(ts=i) for i in range(QUOTA)]
    results = await write_all(messages, rid, sent)
    assert results == [WriteResult.STORED_INTO_EMPTY] + [WriteResult.STORED] * (QUOTA - 1)
    refused = msg(ts=99)
    assert await messages.write_message(rid, refused, QUOTA) is WriteResult.QUOTA_EXCEEDED
    assert await messages.queue_size(rid) == QUOTA + 1
    assert await drain(messages, rid) == sent + [marker_for(refused)]


async def test_every_write_after_the_marker_is_refused_and_adds_nothing(messages):
    rid = new_id()
    await write_all(messages, rid, [msg() for _ in range(QUOTA)])
    first_refused = msg()
    assert await messages.write_message(rid, first_refused, QUOTA) is WriteResult.QUOTA_EXCEEDED
    for _ in range(3):
        assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.QUOTA_EXCEEDED
    assert await messages.queue_size(rid) == QUOTA + 1
    tail = (await drain(messages, rid))[-1]
    assert tail == marker_for(first_refused)


async def test_writes_stay_refused_until_the_marker_itself_is_deleted(messages):
    rid = new_id()
    sent = [msg() for _ in range(QUOTA)]
    await write_all(messages, rid, sent)
    refused = msg()
    await messages.write_message(rid, refused, QUOTA)
    for m in sent:  # room frees up, but the marker is still waiting for its ACK
        await messages.delete_message(rid, m.msg_id)
        assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.QUOTA_EXCEEDED
    assert await messages.peek_message(rid) == marker_for(refused)
    assert await messages.delete_message(rid, refused.msg_id) == (True, None)
    again = msg()
    assert await messages.write_message(rid, again, QUOTA) is WriteResult.STORED_INTO_EMPTY
    assert await drain(messages, rid) == [again]


async def test_a_full_queue_does_not_limit_other_queues(messages):
    full, other = new_id(), new_id()
    await write_all(messages, full, [msg() for _ in range(QUOTA + 1)])
    assert await messages.write_message(other, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY


async def test_the_quota_is_applied_per_write(messages):
    rid = new_id()
    await write_all(messages, rid, [msg(), msg()], quota=10)
    assert await messages.write_message(rid, msg(), 2) is WriteResult.QUOTA_EXCEEDED
    assert (await messages.queue_size(rid)) == 3


async def test_deleting_all_messages_also_clears_the_marker(messages):
    rid = new_id()
    await write_all(messages, rid, [msg() for _ in range(QUOTA + 2)])
    assert await messages.delete_queue_messages(rid) == QUOTA + 1
    assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY


# --- delete_queue_messages, size, expiry, ids -----------------------------------------


async def test_deleting_a_queues_messages_returns_how_many_and_empties_it(messages):
    rid, other = new_id(), new_id()
    await write_all(messages, rid, [msg() for _ in range(3)])
    await messages.write_message(other, msg(), QUOTA)
    assert await messages.delete_queue_messages(rid) == 3
    assert await messages.peek_message(rid) is None
    assert await messages.queue_size(rid) == 0
    assert await messages.delete_queue_messages(rid) == 0
    assert await messages.queue_size(other) == 1
    assert await all_queue_ids(messages) == {other}


async def test_queue_size_counts_stored_messages(messages):
    rid = new_id()
    assert await messages.queue_size(rid) == 0
    await write_all(messages, rid, [msg() for _ in range(3)])
    assert await messages.queue_size(rid) == 3


async def test_expiry_deletes_only_messages_older_than_the_cutoff(messages):
    rid = new_id()
    sent = [msg(ts=t) for t in (100, 200, 300, 400)]
    await write_all(messages, rid, sent)
    assert await messages.expire_messages(rid, 300) == 2
    assert await messages.queue_size(rid) == 2
    assert await messages.peek_message(rid) == sent[2]
    assert await messages.expire_messages(rid, 300) == 0


async def test_expiring_every_message_empties_the_queue(messages):
    rid = new_id()
    await write_all(messages, rid, [msg(ts=t) for t in (1, 2)])
    assert await messages.expire_messages(rid, 1_000) == 2
    assert await messages.peek_message(rid) is None
    assert rid not in await all_queue_ids(messages)
    assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY
    assert await messages.expire_messages(new_id(), 1_000) == 0


async def test_an_expired_marker_lifts_the_quota(messages):
    rid = new_id()
    await write_all(messages, rid, [msg(ts=10) for _ in range(QUOTA + 1)])
    assert await messages.expire_messages(rid, 11) == QUOTA + 1
    assert await messages.write_message(rid, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY


async def test_queue_ids_lists_exactly_the_queues_holding_messages(messages):
    a, b, c = new_id(), new_id(), new_id()
    await messages.write_message(a, msg(), QUOTA)
    m = msg()
    await messages.write_message(b, m, QUOTA)
    await messages.write_message(c, msg(), QUOTA)
    await messages.delete_message(b, m.msg_id)
    assert await all_queue_ids(messages) == {a, c}


async def test_iterating_a_queues_messages_lists_them_in_order_without_removing(messages):
    rid = new_id()
    sent = [msg(ts=i) for i in range(QUOTA)]
    refused = msg()
    await write_all(messages, rid, sent + [refused])
    listed = [m async for m in messages.iter_messages(rid)]
    assert listed == sent + [marker_for(refused)]
    assert await messages.queue_size(rid) == QUOTA + 1
    assert [m async for m in messages.iter_messages(new_id())] == []


async def test_an_empty_store_lists_no_queues(messages):
    assert await all_queue_ids(messages) == set()


# --- reopen ------------------------------------------------------------------------------


async def test_a_persistent_store_keeps_every_message_across_a_reopen(
    persistent_message_backend, store_path
):
    a, b, gone = new_id(), new_id(), new_id()
    sent_a = [msg(ts=i) for i in range(3)]
    sent_b = [msg(ts=i) for i in range(QUOTA)]
    refused = msg(ts=50)
    async with persistent_message_backend.open(store_path) as store:
        await write_all(store, a, sent_a)
        await store.delete_message(a, sent_a[0].msg_id)
        await write_all(store, b, sent_b + [refused])
        await write_all(store, gone, [msg(), msg()])
        await store.delete_queue_messages(gone)
    async with persistent_message_backend.open(store_path) as store:
        assert await all_queue_ids(store) == {a, b}
        assert await store.queue_size(a) == 2
        assert await store.write_message(b, msg(), QUOTA) is WriteResult.QUOTA_EXCEEDED
        assert await store.peek_message(gone) is None
        assert await drain(store, a) == sent_a[1:]
        assert await drain(store, b) == sent_b + [marker_for(refused)]
        assert await store.write_message(b, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY
