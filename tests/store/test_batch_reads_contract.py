"""The batch reads of a block (`QueueStore.get_queues`, `MessageStore.peek_messages`),
run against every backend in conftest.QUEUE_BACKENDS / MESSAGE_BACKENDS: each answer is
what the single call (`get_queue`, `peek_message`) answers for the same id, in the order
given, with missing ids and the same id twice in one block."""

from __future__ import annotations

import os
from dataclasses import replace

import trio

from store.interfaces import Message, Party, QueueRecord
from tests.store.test_message_store_contract import QUOTA, marker_for, msg, write_all
from tests.store.test_queue_store_contract import make_notifier, make_record, new_id


def party_id(rec: QueueRecord, party: Party) -> bytes | None:
    if party is Party.RECIPIENT:
        return rec.recipient_id
    if party is Party.SENDER:
        return rec.sender_id
    if party is Party.NOTIFIER:
        return None if rec.notifier is None else rec.notifier.notifier_id
    return rec.link_id


async def singles(queues, party: Party, ids: list[bytes]) -> list[QueueRecord | None]:
    return [await queues.get_queue(party, i) for i in ids]


async def _stored_queues(queues, count: int) -> list[QueueRecord]:
    records = [make_record(notifier=make_notifier() if i % 2 else None) for i in range(count)]
    for rec in records:
        assert await queues.add_queue(rec) is None
    return records


# --- get_queues ------------------------------------------------------------------


async def test_get_queues_answers_as_get_queue_for_every_party(queues):
    records = await _stored_queues(queues, 6)
    for party in (Party.RECIPIENT, Party.SENDER, Party.NOTIFIER):
        ids = [i for rec in records if (i := party_id(rec, party)) is not None]
        ids = [new_id(), *ids[:2], new_id(), *ids[2:]]  # missing ids among them
        batch = await queues.get_queues(party, ids)
        assert batch == await singles(queues, party, ids)
        assert batch[0] is None and batch[3] is None
        assert [r for r in batch if r is not None] == [
            r for r in records if party_id(r, party) in ids
        ]


async def test_get_queues_keeps_the_order_and_answers_an_id_twice(queues):
    a, b = await _stored_queues(queues, 2)
    missing = new_id()
    ids = [b.recipient_id, a.recipient_id, missing, b.recipient_id, missing]
    assert await queues.get_queues(Party.RECIPIENT, ids) == [b, a, None, b, None]


async def test_get_queues_of_no_ids_is_empty(queues):
    await _stored_queues(queues, 1)
    assert await queues.get_queues(Party.RECIPIENT, []) == []


async def test_get_queues_does_not_find_a_deleted_queue(queues):
    a, b = await _stored_queues(queues, 2)
    await queues.get_queues(Party.RECIPIENT, [a.recipient_id, b.recipient_id])
    assert not isinstance(await queues.delete_queue(a.recipient_id), type(None))
    ids = [a.recipient_id, b.recipient_id]
    assert await queues.get_queues(Party.RECIPIENT, ids) == [None, b]
    assert await queues.get_queues(Party.SENDER, [a.sender_id, b.sender_id]) == [None, b]


async def test_get_queues_sees_each_change(queues):
    a, b = await _stored_queues(queues, 2)
    ids = [a.recipient_id, b.recipient_id]
    await queues.get_queues(Party.RECIPIENT, ids)  # cached now, where a store caches
    key = b"sk" + os.urandom(42)
    assert await queues.secure_queue(a.recipient_id, key) is None
    assert await queues.suspend_queue(b.recipient_id) is None
    batch = await queues.get_queues(Party.RECIPIENT, ids)
    assert batch == await singles(queues, Party.RECIPIENT, ids)
    assert batch[0] is not None and batch[0].sender_key == key
    assert batch[1] is not None and batch[1].status is not b.status


async def test_get_queues_finds_a_replaced_notifier_by_its_new_id_only(queues):
    (rec,) = await _stored_queues(queues, 1)
    old = make_record(notifier=make_notifier()).notifier
    assert await queues.add_notifier(rec.recipient_id, old) is None
    new = make_notifier()
    assert await queues.add_notifier(rec.recipient_id, new) is None
    found = await queues.get_queues(Party.NOTIFIER, [old.notifier_id, new.notifier_id])
    assert found[0] is None
    assert found[1] is not None and found[1].notifier == new


async def test_a_block_larger_than_sqlites_variable_limit_is_answered_whole(queues):
    records = await _stored_queues(queues, 1100)
    ids = [r.sender_id for r in records] + [new_id()]
    assert await queues.get_queues(Party.SENDER, ids) == [*records, None]


async def test_a_persistent_store_answers_a_block_after_a_reopen(
    persistent_queue_backend, store_path
):
    async with persistent_queue_backend.open(store_path) as queues:
        records = await _stored_queues(queues, 5)
    async with persistent_queue_backend.open(store_path) as queues:
        ids = [new_id(), *(r.recipient_id for r in records)]
        assert await queues.get_queues(Party.RECIPIENT, ids) == [None, *records]


async def test_get_queues_answers_a_block_while_writes_run(queues):
    """Lookups of a block racing changes of the same queues: once both are done, every
    answer (batch or single) is the record as last changed, never an older one."""
    records = await _stored_queues(queues, 40)
    ids = [r.recipient_id for r in records]
    keys = {r.recipient_id: b"sk" + os.urandom(42) for r in records}
    async with trio.open_nursery() as nursery:
        for rid in ids[::2]:
            nursery.start_soon(queues.secure_queue, rid, keys[rid])
        for _ in range(3):
            nursery.start_soon(queues.get_queues, Party.RECIPIENT, ids)
        for rid in ids[1::4]:
            nursery.start_soon(queues.delete_queue, rid)
    batch = await queues.get_queues(Party.RECIPIENT, ids)
    assert batch == await singles(queues, Party.RECIPIENT, ids)
    for rec, found in zip(records, batch, strict=True):
        i = ids.index(rec.recipient_id)
        if i % 4 == 1:
            assert found is None
        elif i % 2 == 0:
            assert found is not None and found.sender_key == keys[rec.recipient_id]
        else:
            assert found is not None and replace(found, updated_at=0) == replace(
                rec, updated_at=0)


# --- peek_messages ---------------------------------------------------------------


async def peeks(messages, ids: list[bytes]) -> list[Message | None]:
    return [await messages.peek_message(i) for i in ids]


async def test_peek_messages_answers_as_peek_message(messages):
    full, one, emptied, never = new_id(), new_id(), new_id(), new_id()
    first = msg()
    await write_all(messages, full, [first, msg(), msg()])
    only = msg(body=b"")
    await write_all(messages, one, [only])
    gone = msg()
    await write_all(messages, emptied, [gone])
    assert (await messages.delete_message(emptied, gone.msg_id))[0]
    ids = [never, full, emptied, one]
    batch = await messages.peek_messages(ids)
    assert batch == await peeks(messages, ids)
    assert batch == [None, first, None, only]


async def test_peek_messages_keeps_the_order_and_answers_an_id_twice(messages):
    a, b = new_id(), new_id()
    ma, mb = msg(), msg()
    await write_all(messages, a, [ma])
    await write_all(messages, b, [mb])
    missing = new_id()
    assert await messages.peek_messages([b, a, missing, b, a]) == [mb, ma, None, mb, ma]
    assert await messages.peek_messages([]) == []


async def test_peek_messages_shows_the_quota_marker_at_the_head(messages):
    rid, other = new_id(), new_id()
    sent = [msg() for _ in range(QUOTA + 1)]
    await write_all(messages, rid, sent)
    for m in sent[:QUOTA]:
        assert (await messages.delete_message(rid, m.msg_id))[0]
    await write_all(messages, other, [msg()])
    batch = await messages.peek_messages([rid, other])
    assert batch == await peeks(messages, [rid, other])
    assert batch[0] == marker_for(sent[QUOTA]) and batch[0].quota
    assert batch[1] is not None and not batch[1].quota


async def test_peek_messages_follows_deletes_and_expiry(messages):
    a, b = new_id(), new_id()
    old, new = msg(ts=1_000), msg(ts=2_000)
    await write_all(messages, a, [old, new])
    b1, b2 = msg(), msg()
    await write_all(messages, b, [b1, b2])
    assert await messages.expire_messages(a, 1_500) == 1
    assert (await messages.delete_message(b, b1.msg_id))[0]
    assert await messages.peek_messages([a, b]) == [new, b2]
    await messages.delete_queue_messages(a)
    assert await messages.peek_messages([a, b]) == [None, b2]


async def test_peek_messages_of_a_block_larger_than_sqlites_variable_limit(messages):
    ids = [new_id() for _ in range(1100)]
    heads = {}
    for rid in ids[::3]:
        heads[rid] = msg()
        await write_all(messages, rid, [heads[rid], msg()])
    assert await messages.peek_messages(ids) == [heads.get(rid) for rid in ids]


async def test_a_persistent_store_peeks_a_block_after_a_reopen(
    persistent_message_backend, store_path
):
    a, b = new_id(), new_id()
    ma = msg()
    async with persistent_message_backend.open(store_path) as messages:
        await write_all(messages, a, [ma, msg()])
    async with persistent_message_backend.open(store_path) as messages:
        assert await messages.peek_messages([b, a]) == [None, ma]
