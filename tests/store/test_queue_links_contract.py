"""Short links (v15) in the QueueStore contract, run against every backend in
conftest.QUEUE_BACKENDS: a queue's link comes with it or is set later (LSET), its
fixed data never changes, its id is unique and found as Party.LINK, and it goes
with LDEL or with its queue."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from router.protocol.types import AUTH
from store.interfaces import DUPLICATE, NotifierCreds, Party, QueueLinkData, QueueRecord


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


def make_link(**changes: object) -> QueueLinkData:
    link = QueueLinkData(new_id(), b"fixed:" + os.urandom(90), b"user:" + os.urandom(40))
    return replace(link, **changes)


def linked_record(link: QueueLinkData, mode: bytes = b"C", **changes: object) -> QueueRecord:
    snd_secure = mode == b"M"
    return make_record(queue_mode=mode, link_id=link.link_id, snd_secure=snd_secure, **changes)


async def all_links(store) -> dict[bytes, QueueLinkData]:
    return {rid: link async for rid, link in store.iter_links()}


async def the_same_link_everywhere(store, rec: QueueRecord, link: QueueLinkData | None) -> None:
    """What the store says about the queue's link, by every way of asking."""
    stored = await store.get_queue(Party.RECIPIENT, rec.recipient_id)
    assert stored is not None
    assert stored.link_id == (None if link is None else link.link_id)
    assert await store.get_link(rec.recipient_id) == link
    assert (await all_links(store)).get(rec.recipient_id) == link
    if link is not None:
        assert await store.get_queue(Party.LINK, link.link_id) == stored


# --- a queue created with its link ---------------------------------------------------


@pytest.mark.parametrize("mode", [b"M", b"C"])
async def test_a_queue_added_with_a_link_is_found_by_its_link_id(queues, mode):
    link = make_link()
    rec = linked_record(link, mode)
    assert await queues.add_queue(rec, link) is None
    assert await queues.get_queue(Party.LINK, link.link_id) == rec
    assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec
    assert await queues.get_link(rec.recipient_id) == link
    assert await all_links(queues) == {rec.recipient_id: link}


async def test_a_queue_without_a_link_has_none_and_keeps_the_old_defaults(queues):
    rec = make_record()
    assert await queues.add_queue(rec) is None
    stored = await queues.get_queue(Party.RECIPIENT, rec.recipient_id)
    assert stored is not None and stored.queue_mode is None and stored.link_id is None
    assert await queues.get_link(rec.recipient_id) is None
    assert await queues.get_link(new_id()) is None
    assert await all_links(queues) == {}


async def test_empty_link_parts_are_kept_as_empty(queues):
    link = make_link(fixed_data=b"", user_data=b"")
    rec = linked_record(link)
    assert await queues.add_queue(rec, link) is None
    assert await queues.get_link(rec.recipient_id) == link


async def test_a_link_id_is_found_only_as_a_link(queues):
    link = make_link()
    rec = linked_record(link, notifier=make_notifier())
    await queues.add_queue(rec, link)
    for party in (Party.RECIPIENT, Party.SENDER, Party.NOTIFIER):
        assert await queues.get_queue(party, link.link_id) is None
    for other_id in (rec.recipient_id, rec.sender_id, rec.notifier.notifier_id):
        assert await queues.get_queue(Party.LINK, other_id) is None


async def test_adding_a_queue_whose_link_id_is_taken_is_duplicate_and_adds_nothing(queues):
    link = make_link()
    first = linked_record(link)
    await queues.add_queue(first, link)
    second_link = make_link(link_id=link.link_id)
    second = linked_record(second_link)
    assert await queues.add_queue(second, second_link) == DUPLICATE
    assert await queues.get_queue(Party.RECIPIENT, second.recipient_id) is None
    assert await queues.get_queue(Party.SENDER, second.sender_id) is None
    assert await queues.queue_count() == 1
    await the_same_link_everywhere(queues, first, link)


async def test_a_queue_and_its_link_are_stored_whole_or_refused(queues):
    link = make_link()
    with pytest.raises(ValueError):
        await queues.add_queue(make_record(), link)  # the record does not name the link
    with pytest.raises(ValueError):
        await queues.add_queue(linked_record(link))  # the record names a link not given
    with pytest.raises(ValueError):
        await queues.add_queue(linked_record(make_link()), link)
    assert await queues.queue_count() == 0
    assert await queues.get_queue(Party.LINK, link.link_id) is None


# --- LSET --------------------------------------------------------------------------


async def test_setting_a_link_on_a_queue_without_one_adds_it(queues):
    rec = make_record(queue_mode=b"C", snd_secure=False)
    await queues.add_queue(rec)
    link = make_link()
    assert await queues.set_link(rec.recipient_id, link) is None
    await the_same_link_everywhere(queues, rec, link)


async def test_setting_the_same_link_again_with_new_user_data_replaces_only_that(queues):
    link = make_link()
    rec = linked_record(link)
    await queues.add_queue(rec, link)
    new = replace(link, user_data=b"other user data")
    assert await queues.set_link(rec.recipient_id, new) is None
    await the_same_link_everywhere(queues, rec, new)
    assert await queues.set_link(rec.recipient_id, new) is None  # the same again: fine
    await the_same_link_everywhere(queues, rec, new)


@pytest.mark.parametrize("change", ["fixed_data", "link_id", "both"])
async def test_the_fixed_data_and_link_id_of_a_link_never_change(queues, change):
    link = make_link()
    rec = linked_record(link)
    await queues.add_queue(rec, link)
    other = replace(link, user_data=b"new user data")
    if change in ("fixed_data", "both"):
        other = replace(other, fixed_data=b"other fixed data")
    if change in ("link_id", "both"):
        other = replace(other, link_id=new_id())
    assert await queues.set_link(rec.recipient_id, other) == AUTH
    await the_same_link_everywhere(queues, rec, link)
    assert await queues.get_queue(Party.LINK, other.link_id) == (
        await queues.get_queue(Party.RECIPIENT, rec.recipient_id)
        if other.link_id == link.link_id
        else None
    )


async def test_a_link_id_held_by_another_queue_is_auth(queues):
    link = make_link()
    holder = linked_record(link)
    other = make_record()
    await queues.add_queue(holder, link)
    await queues.add_queue(other)
    assert await queues.set_link(other.recipient_id, make_link(link_id=link.link_id)) == AUTH
    await the_same_link_everywhere(queues, other, None)
    await the_same_link_everywhere(queues, holder, link)


async def test_setting_a_link_on_a_missing_queue_is_auth(queues):
    link = make_link()
    assert await queues.set_link(new_id(), link) == AUTH
    assert await queues.get_queue(Party.LINK, link.link_id) is None
    assert await all_links(queues) == {}


async def test_other_changes_keep_the_link(queues):
    link = make_link()
    rec = linked_record(link, b"M")
    await queues.add_queue(rec, link)
    assert await queues.secure_queue(rec.recipient_id, b"sk" + os.urandom(42)) is None
    assert await queues.add_notifier(rec.recipient_id, make_notifier()) is None
    assert await queues.set_service(rec.recipient_id, Party.RECIPIENT, b"svc") is None
    assert await queues.suspend_queue(rec.recipient_id) is None
    await the_same_link_everywhere(queues, rec, link)
    stored = await queues.get_queue(Party.RECIPIENT, rec.recipient_id)
    assert stored.queue_mode == b"M" and stored.sender_key is not None


# --- LDEL and deleting the queue ----------------------------------------------------------


async def test_deleting_a_link_frees_its_id_and_a_new_link_may_follow(queues):
    link = make_link()
    rec = linked_record(link)
    await queues.add_queue(rec, link)
    assert await queues.delete_link(rec.recipient_id) is None
    await the_same_link_everywhere(queues, rec, None)
    assert await queues.get_queue(Party.LINK, link.link_id) is None
    other = make_record()
    await queues.add_queue(other)
    assert await queues.set_link(other.recipient_id, link) is None  # the id is free again
    await the_same_link_everywhere(queues, other, link)
    fresh = make_link()  # other fixed data: a new link, not a change of the old one
    assert await queues.set_link(rec.recipient_id, fresh) is None
    await the_same_link_everywhere(queues, rec, fresh)


async def test_deleting_a_link_that_is_not_there_is_fine_and_on_a_missing_queue_auth(queues):
    rec = make_record()
    await queues.add_queue(rec)
    assert await queues.delete_link(rec.recipient_id) is None
    assert await queues.delete_link(rec.recipient_id) is None
    assert await queues.delete_link(new_id()) == AUTH
    assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec


async def test_deleting_a_queue_deletes_its_link_and_frees_the_link_id(queues):
    link = make_link()
    rec = linked_record(link)
    await queues.add_queue(rec, link)
    removed = await queues.delete_queue(rec.recipient_id)
    assert removed == rec
    assert await queues.get_queue(Party.LINK, link.link_id) is None
    assert await queues.get_link(rec.recipient_id) is None
    assert await all_links(queues) == {}
    assert await queues.set_link(rec.recipient_id, link) == AUTH
    again = linked_record(link)
    assert await queues.add_queue(again, link) is None
    assert await queues.get_queue(Party.LINK, link.link_id) == again


async def test_links_are_listed_once_each_beside_queues_without(queues):
    expected = {}
    for i in range(7):
        if i % 2:
            link = make_link()
            rec = linked_record(link)
            await queues.add_queue(rec, link)
            expected[rec.recipient_id] = link
        else:
            await queues.add_queue(make_record())
    assert await all_links(queues) == expected
    assert await queues.queue_count() == 7


# --- across a reopen -----------------------------------------------------------------------


async def test_links_and_their_changes_survive_a_reopen(persistent_queue_backend, store_path):
    created, added, replaced, deleted = make_link(), make_link(), make_link(), make_link()
    a = linked_record(created, b"M")
    b = make_record(queue_mode=b"C", snd_secure=False)
    c, d = linked_record(replaced), linked_record(deleted)
    gone_link = make_link()
    gone = linked_record(gone_link)
    newer = replace(replaced, user_data=b"replaced")
    async with persistent_queue_backend.open(store_path) as store:
        assert await store.add_queue(a, created) is None
        assert await store.add_queue(b) is None
        assert await store.add_queue(c, replaced) is None
        assert await store.add_queue(d, deleted) is None
        assert await store.add_queue(gone, gone_link) is None
        assert await store.set_link(b.recipient_id, added) is None
        assert await store.set_link(c.recipient_id, newer) is None
        assert await store.delete_link(d.recipient_id) is None
        assert await store.delete_queue(gone.recipient_id) == gone
    async with persistent_queue_backend.open(store_path) as store:
        assert await all_links(store) == {
            a.recipient_id: created,
            b.recipient_id: added,
            c.recipient_id: newer,
        }
        await the_same_link_everywhere(store, a, created)
        await the_same_link_everywhere(store, b, added)
        await the_same_link_everywhere(store, c, newer)
        await the_same_link_everywhere(store, d, None)
        stored_a = await store.get_queue(Party.RECIPIENT, a.recipient_id)
        assert stored_a.queue_mode == b"M"
        assert (await store.get_queue(Party.RECIPIENT, b.recipient_id)).queue_mode == b"C"
        assert await store.get_queue(Party.LINK, gone_link.link_id) is None
        assert await store.get_queue(Party.LINK, deleted.link_id) is None
        # the rules hold on what was read back
        assert await store.set_link(c.recipient_id, replace(newer, fixed_data=b"x")) == AUTH
        assert await store.set_link(d.recipient_id, make_link(link_id=a.link_id)) == AUTH
        assert await store.add_queue(linked_record(created), created) == DUPLICATE
        assert await store.set_link(d.recipient_id, gone_link) is None
    async with persistent_queue_backend.open(store_path) as store:
        await the_same_link_everywhere(store, d, gone_link)
        assert len(await all_links(store)) == 4
