"""The QueueStore contract, run against every backend in conftest.QUEUE_BACKENDS."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from router.protocol.types import AUTH
from store.interfaces import DUPLICATE, NotifierCreds, Party, QueueRecord, QueueStatus


def new_id() -> bytes:
    return os.urandom(24)


def make_record(**changes: object) -> QueueRecord:
    rec = QueueRecord(
        recipient_id=new_id(),
        sender_id=new_id(),
        recipient_key=b"rk" + os.urandom(42),
        rcv_dh_secret=os.urandom(32),
        sender_key=None,
        snd_secure=True,
    )
    return replace(rec, **changes)


def make_notifier() -> NotifierCreds:
    return NotifierCreds(new_id(), b"nk" + os.urandom(42), os.urandom(32))


def same_queue(a: QueueRecord | None, b: QueueRecord) -> bool:
    """Equal except for updated_at, which the store stamps on changes."""
    return a is not None and replace(a, updated_at=0) == replace(b, updated_at=0)


async def all_queues(store) -> list[QueueRecord]:
    return [rec async for rec in store.iter_queues()]


async def service_ids(store, service_id: bytes, party: Party, page: int = 2) -> list[bytes]:
    """Every id of the service's queues on `party`'s side, walked by pages of `page`."""
    ids: list[bytes] = []
    after = None
    while found := await store.service_queue_page(service_id, party, after, page):
        assert len(found) <= page
        ids += found
        after = found[-1]
    return ids


# --- add / get --------------------------------------------------------------


async def test_an_added_queue_is_found_by_recipient_and_sender_id(queues):
    rec = make_record()
    assert await queues.add_queue(rec) is None
    assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec
    assert await queues.get_queue(Party.SENDER, rec.sender_id) == rec


async def test_a_queue_added_with_a_notifier_is_found_by_notifier_id(queues):
    ntf = make_notifier()
    rec = make_record(notifier=ntf)
    assert await queues.add_queue(rec) is None
    assert await queues.get_queue(Party.NOTIFIER, ntf.notifier_id) == rec


async def test_every_field_of_a_record_survives_storage(queues):
    ntf = make_notifier()
    rec = make_record(
        sender_key=b"sk" + os.urandom(42),
        snd_secure=False,
        status=QueueStatus.OFF,
        notifier=ntf,
        rcv_service_id=b"svc-r",
        ntf_service_id=b"svc-n",
        updated_at=1_700_000_000,
    )
    assert await queues.add_queue(rec) is None
    assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec


async def test_an_unknown_id_is_not_found_for_any_party(queues):
    await queues.add_queue(make_record())
    for party in Party:
        assert await queues.get_queue(party, new_id()) is None


async def test_an_id_is_only_found_under_its_own_party(queues):
    rec = make_record(notifier=make_notifier())
    await queues.add_queue(rec)
    assert await queues.get_queue(Party.SENDER, rec.recipient_id) is None
    assert await queues.get_queue(Party.NOTIFIER, rec.sender_id) is None
    assert await queues.get_queue(Party.RECIPIENT, rec.sender_id) is None


@pytest.mark.parametrize("taken", ["recipient", "sender", "notifier"])
async def test_adding_a_queue_with_a_taken_id_is_duplicate_and_changes_nothing(queues, taken):
    first = make_record(notifier=make_notifier())
    await queues.add_queue(first)
    second = make_record(notifier=make_notifier())
    if taken == "recipient":
        second = replace(second, recipient_id=first.recipient_id)
    elif taken == "sender":
        second = replace(second, sender_id=first.sender_id)
    else:
        second = replace(
            second, notifier=replace(second.notifier, notifier_id=first.notifier.notifier_id)
        )
    assert await queues.add_queue(second) == DUPLICATE
    assert await queues.queue_count() == 1
    assert await queues.get_queue(Party.RECIPIENT, first.recipient_id) == first
    assert await queues.get_queue(Party.SENDER, first.sender_id) == first
    assert await queues.get_queue(Party.NOTIFIER, first.notifier.notifier_id) == first
    if taken != "recipient":
        assert await queues.get_queue(Party.RECIPIENT, second.recipient_id) is None
    if taken != "sender":
        assert await queues.get_queue(Party.SENDER, second.sender_id) is None


# --- secure -------------------------------------------------------------------


async def test_securing_a_queue_sets_the_sender_key(queues):
    rec = make_record()
    await queues.add_queue(rec)
    key = b"sk" + os.urandom(42)
    assert await queues.secure_queue(rec.recipient_id, key) is None
    got = await queues.get_queue(Party.SENDER, rec.sender_id)
    assert got.sender_key == key
    assert same_queue(got, replace(rec, sender_key=key))


async def test_securing_again_with_the_same_key_is_fine(queues):
    rec = make_record()
    await queues.add_queue(rec)
    key = b"sk" + os.urandom(42)
    await queues.secure_queue(rec.recipient_id, key)
    assert await queues.secure_queue(rec.recipient_id, key) is None
    assert (await queues.get_queue(Party.RECIPIENT, rec.recipient_id)).sender_key == key


async def test_securing_again_with_another_key_is_auth_and_keeps_the_first(queues):
    rec = make_record()
    await queues.add_queue(rec)
    key = b"sk" + os.urandom(42)
    await queues.secure_queue(rec.recipient_id, key)
    assert await queues.secure_queue(rec.recipient_id, b"other" + os.urandom(39)) == AUTH
    assert (await queues.get_queue(Party.RECIPIENT, rec.recipient_id)).sender_key == key


async def test_securing_a_missing_queue_is_auth(queues):
    assert await queues.secure_queue(new_id(), b"k" * 44) == AUTH


# --- notifier -------------------------------------------------------------------


async def test_adding_a_notifier_makes_the_queue_reachable_by_its_id(queues):
    rec = make_record()
    await queues.add_queue(rec)
    ntf = make_notifier()
    assert await queues.add_notifier(rec.recipient_id, ntf) is None
    got = await queues.get_queue(Party.NOTIFIER, ntf.notifier_id)
    assert same_queue(got, replace(rec, notifier=ntf))


async def test_replacing_a_notifier_retires_the_old_notifier_id(queues):
    rec = make_record()
    await queues.add_queue(rec)
    old, new = make_notifier(), make_notifier()
    await queues.add_notifier(rec.recipient_id, old)
    assert await queues.add_notifier(rec.recipient_id, new) is None
    assert await queues.get_queue(Party.NOTIFIER, old.notifier_id) is None
    got = await queues.get_queue(Party.NOTIFIER, new.notifier_id)
    assert got.notifier == new


async def test_a_notifier_id_taken_by_another_queue_is_duplicate(queues):
    a, b = make_record(notifier=make_notifier()), make_record()
    await queues.add_queue(a)
    await queues.add_queue(b)
    assert await queues.add_notifier(b.recipient_id, a.notifier) == DUPLICATE
    assert (await queues.get_queue(Party.RECIPIENT, b.recipient_id)).notifier is None
    assert same_queue(await queues.get_queue(Party.NOTIFIER, a.notifier.notifier_id), a)


async def test_adding_a_notifier_to_a_missing_queue_is_auth(queues):
    assert await queues.add_notifier(new_id(), make_notifier()) == AUTH


async def test_deleting_a_notifier_returns_it_and_retires_its_id(queues):
    ntf = make_notifier()
    rec = make_record(notifier=ntf)
    await queues.add_queue(rec)
    assert await queues.delete_notifier(rec.recipient_id) == ntf
    assert await queues.get_queue(Party.NOTIFIER, ntf.notifier_id) is None
    assert (await queues.get_queue(Party.RECIPIENT, rec.recipient_id)).notifier is None


async def test_deleting_a_notifier_that_is_not_there_returns_none(queues):
    rec = make_record()
    await queues.add_queue(rec)
    assert await queues.delete_notifier(rec.recipient_id) is None
    assert await queues.delete_notifier(new_id()) is None


async def test_a_deleted_notifier_id_can_be_used_again(queues):
    ntf = make_notifier()
    rec = make_record(notifier=ntf)
    await queues.add_queue(rec)
    await queues.delete_notifier(rec.recipient_id)
    other = make_record()
    await queues.add_queue(other)
    assert await queues.add_notifier(other.recipient_id, ntf) is None
    got = await queues.get_queue(Party.NOTIFIER, ntf.notifier_id)
    assert got.recipient_id == other.recipient_id


# --- suspend ----------------------------------------------------------------------


async def test_suspending_a_queue_turns_it_off_and_is_idempotent(queues):
    rec = make_record()
    await queues.add_queue(rec)
    assert await queues.suspend_queue(rec.recipient_id) is None
    assert await queues.suspend_queue(rec.recipient_id) is None
    got = await queues.get_queue(Party.SENDER, rec.sender_id)
    assert got.status is QueueStatus.OFF
    assert same_queue(got, replace(rec, status=QueueStatus.OFF))


async def test_suspending_a_missing_queue_is_auth(queues):
    assert await queues.suspend_queue(new_id()) == AUTH


# --- services -------------------------------------------------------------------


async def test_queues_associated_with_a_service_are_listed_by_side(queues):
    a, b, c = (make_record(notifier=make_notifier()) for _ in range(3))
    for rec in (a, b, c):
        await queues.add_queue(rec)
    assert await queues.set_service(a.recipient_id, Party.RECIPIENT, b"svc1") is None
    assert await queues.set_service(b.recipient_id, Party.RECIPIENT, b"svc1") is None
    assert await queues.set_service(c.recipient_id, Party.RECIPIENT, b"svc2") is None
    assert await queues.set_service(c.recipient_id, Party.NOTIFIER, b"svc1") is None
    rcv = await service_ids(queues, b"svc1", Party.RECIPIENT)
    assert rcv == sorted([a.recipient_id, b.recipient_id])
    ntf = await service_ids(queues, b"svc1", Party.NOTIFIER)
    assert ntf == [c.notifier.notifier_id]
    assert await service_ids(queues, b"svc3", Party.RECIPIENT) == []


async def test_moving_a_queue_to_another_service_or_none_updates_both_lists(queues):
    rec = make_record()
    await queues.add_queue(rec)
    await queues.set_service(rec.recipient_id, Party.RECIPIENT, b"svc1")
    await queues.set_service(rec.recipient_id, Party.RECIPIENT, b"svc2")
    assert await service_ids(queues, b"svc1", Party.RECIPIENT) == []
    assert await service_ids(queues, b"svc2", Party.RECIPIENT) == [rec.recipient_id]
    await queues.set_service(rec.recipient_id, Party.RECIPIENT, None)
    assert await service_ids(queues, b"svc2", Party.RECIPIENT) == []
    got = await queues.get_queue(Party.RECIPIENT, rec.recipient_id)
    assert got.rcv_service_id is None


async def test_a_service_for_a_missing_queue_or_notifier_is_auth(queues):
    rec = make_record()
    await queues.add_queue(rec)
    assert await queues.set_service(new_id(), Party.RECIPIENT, b"svc") == AUTH
    assert await queues.set_service(rec.recipient_id, Party.NOTIFIER, b"svc") == AUTH
    assert await service_ids(queues, b"svc", Party.NOTIFIER) == []


async def test_deleting_the_notifier_ends_its_service_association(queues):
    rec = make_record(notifier=make_notifier())
    await queues.add_queue(rec)
    await queues.set_service(rec.recipient_id, Party.NOTIFIER, b"svc")
    await queues.delete_notifier(rec.recipient_id)
    assert await service_ids(queues, b"svc", Party.NOTIFIER) == []
    assert (await queues.get_queue(Party.RECIPIENT, rec.recipient_id)).ntf_service_id is None


async def test_a_queue_added_with_services_is_listed_under_them(queues):
    rec = make_record(notifier=make_notifier(), rcv_service_id=b"r", ntf_service_id=b"n")
    await queues.add_queue(rec)
    assert await service_ids(queues, b"r", Party.RECIPIENT) == [rec.recipient_id]
    assert await service_ids(queues, b"n", Party.NOTIFIER) == [rec.notifier.notifier_id]


# --- delete, iterate, count ----------------------------------------------------------


async def test_deleting_a_queue_returns_its_record_and_retires_every_id(queues):
    rec = make_record(notifier=make_notifier(), rcv_service_id=b"r", ntf_service_id=b"n")
    await queues.add_queue(rec)
    assert same_queue(await queues.delete_queue(rec.recipient_id), rec)
    assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) is None
    assert await queues.get_queue(Party.SENDER, rec.sender_id) is None
    assert await queues.get_queue(Party.NOTIFIER, rec.notifier.notifier_id) is None
    assert await service_ids(queues, b"r", Party.RECIPIENT) == []
    assert await service_ids(queues, b"n", Party.NOTIFIER) == []
    assert await queues.queue_count() == 0


async def test_deleting_a_missing_or_already_deleted_queue_is_auth(queues):
    rec = make_record()
    await queues.add_queue(rec)
    await queues.delete_queue(rec.recipient_id)
    assert await queues.delete_queue(rec.recipient_id) == AUTH
    assert await queues.delete_queue(new_id()) == AUTH


async def test_changes_to_a_deleted_queue_are_auth(queues):
    rec = make_record()
    await queues.add_queue(rec)
    await queues.delete_queue(rec.recipient_id)
    assert await queues.secure_queue(rec.recipient_id, b"k" * 44) == AUTH
    assert await queues.suspend_queue(rec.recipient_id) == AUTH
    assert await queues.add_notifier(rec.recipient_id, make_notifier()) == AUTH
    assert await queues.set_service(rec.recipient_id, Party.RECIPIENT, b"s") == AUTH


async def test_the_ids_of_a_deleted_queue_can_be_used_again(queues):
    rec = make_record(notifier=make_notifier())
    await queues.add_queue(rec)
    await queues.delete_queue(rec.recipient_id)
    again = replace(rec, recipient_key=b"new" + os.urandom(41))
    assert await queues.add_queue(again) is None
    assert await queues.get_queue(Party.NOTIFIER, rec.notifier.notifier_id) == again


async def test_iterating_yields_every_live_queue_once_and_count_agrees(queues):
    recs = [make_record(notifier=make_notifier() if i % 2 else None) for i in range(25)]
    for rec in recs:
        await queues.add_queue(rec)
    await queues.delete_queue(recs[3].recipient_id)
    await queues.suspend_queue(recs[4].recipient_id)
    live = {r.recipient_id for r in recs} - {recs[3].recipient_id}
    seen = await all_queues(queues)
    assert sorted(r.recipient_id for r in seen) == sorted(live)
    assert await queues.queue_count() == len(live)
    by_id = {r.recipient_id: r for r in seen}
    assert by_id[recs[4].recipient_id].status is QueueStatus.OFF


async def test_an_empty_store_has_no_queues(queues):
    assert await all_queues(queues) == []
    assert await queues.queue_count() == 0


# --- reopen -------------------------------------------------------------------------


async def test_a_persistent_store_keeps_everything_across_a_reopen(
    persistent_queue_backend, store_path
):
    kept = make_record(notifier=make_notifier())
    changed = make_record(notifier=make_notifier())
    gone = make_record(notifier=make_notifier())
    key, new_ntf = b"sk" + os.urandom(42), make_notifier()
    async with persistent_queue_backend.open(store_path) as store:
        for rec in (kept, changed, gone):
            assert await store.add_queue(rec) is None
        await store.secure_queue(changed.recipient_id, key)
        await store.suspend_queue(changed.recipient_id)
        await store.add_notifier(changed.recipient_id, new_ntf)
        await store.set_service(changed.recipient_id, Party.RECIPIENT, b"svc")
        await store.delete_queue(gone.recipient_id)
        expected = await store.get_queue(Party.RECIPIENT, changed.recipient_id)
    async with persistent_queue_backend.open(store_path) as store:
        assert await store.queue_count() == 2
        assert await store.get_queue(Party.RECIPIENT, kept.recipient_id) == kept
        assert await store.get_queue(Party.NOTIFIER, kept.notifier.notifier_id) == kept
        assert await store.get_queue(Party.SENDER, changed.sender_id) == expected
        assert expected.sender_key == key and expected.status is QueueStatus.OFF
        assert await store.get_queue(Party.NOTIFIER, new_ntf.notifier_id) == expected
        assert await store.get_queue(Party.NOTIFIER, changed.notifier.notifier_id) is None
        assert await service_ids(store, b"svc", Party.RECIPIENT) == [expected.recipient_id]
        for party, eid in (
            (Party.RECIPIENT, gone.recipient_id),
            (Party.SENDER, gone.sender_id),
            (Party.NOTIFIER, gone.notifier.notifier_id),
        ):
            assert await store.get_queue(party, eid) is None
        assert await store.delete_queue(gone.recipient_id) == AUTH


async def test_a_persistent_store_can_be_changed_after_a_reopen(
    persistent_queue_backend, store_path
):
    rec = make_record()
    async with persistent_queue_backend.open(store_path) as store:
        await store.add_queue(rec)
    async with persistent_queue_backend.open(store_path) as store:
        assert await store.add_queue(rec) == DUPLICATE
        assert same_queue(await store.delete_queue(rec.recipient_id), rec)
    async with persistent_queue_backend.open(store_path) as store:
        assert await store.queue_count() == 0
