"""Memory store snapshot files: round trip, atomic replacement, damage detection."""

from __future__ import annotations

import os

import pytest

from store.interfaces import (
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
)
from store.memory import stores as stores_module
from store.memory.stores import MemoryMessageStore, MemoryQueueStore, SnapshotError


def new_id() -> bytes:
    return os.urandom(24)


async def saved_stores(tmp_path):
    queues, messages = MemoryQueueStore(), MemoryMessageStore()
    rec = QueueRecord(
        new_id(), new_id(), b"k", b"d", b"s", False, QueueStatus.OFF,
        NotifierCreds(new_id(), b"n", b"x"), b"svc", None, 42,
    )  # fmt: skip
    await queues.add_queue(rec)
    for i in range(3):
        await messages.write_message(rec.recipient_id, Message(new_id(), i, b"T", b"b" * i), 2)
    assert queues.save(tmp_path / "q") == 1
    assert messages.save(tmp_path / "m") == 3
    return queues, messages, rec


async def test_a_snapshot_round_trips_records_and_messages_with_the_marker(tmp_path):
    queues, messages, rec = await saved_stores(tmp_path)
    loaded_q = MemoryQueueStore.load(tmp_path / "q")
    loaded_m = MemoryMessageStore.load(tmp_path / "m")
    assert list(loaded_q.records()) == [rec]
    assert loaded_m.messages(rec.recipient_id) == messages.messages(rec.recipient_id)
    assert loaded_m.messages(rec.recipient_id)[-1].quota
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "q"]  # no temporary left


async def test_saving_again_replaces_the_previous_snapshot(tmp_path):
    queues, _, rec = await saved_stores(tmp_path)
    await queues.delete_queue(rec.recipient_id)
    assert queues.save(tmp_path / "q") == 0
    assert list(MemoryQueueStore.load(tmp_path / "q").records()) == []


@pytest.mark.parametrize("cut", [1, 5, 40])
async def test_a_truncated_snapshot_is_refused(tmp_path, cut):
    await saved_stores(tmp_path)
    data = (tmp_path / "m").read_bytes()
    (tmp_path / "m").write_bytes(data[:-cut])
    with pytest.raises(SnapshotError):
        MemoryMessageStore.load(tmp_path / "m")


async def test_a_flipped_byte_is_refused(tmp_path):
    await saved_stores(tmp_path)
    data = bytearray((tmp_path / "q").read_bytes())
    data[20] ^= 0x01
    (tmp_path / "q").write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="checksum"):
        MemoryQueueStore.load(tmp_path / "q")


async def test_a_snapshot_of_the_other_kind_is_refused(tmp_path):
    await saved_stores(tmp_path)
    with pytest.raises(SnapshotError, match="not a snapshot"):
        MemoryQueueStore.load(tmp_path / "m")


async def test_a_snapshot_keeps_queue_modes_and_links(tmp_path):
    queues = MemoryQueueStore()
    link = QueueLinkData(new_id(), b"fixed", b"")
    linked = QueueRecord(
        new_id(), new_id(), b"k", b"d", None, False, queue_mode=b"C", link_id=link.link_id
    )
    plain = QueueRecord(new_id(), new_id(), b"k", b"d", None, True, queue_mode=b"M")
    await queues.add_queue(linked, link)
    await queues.add_queue(plain)
    queues.save(tmp_path / "q")
    loaded = MemoryQueueStore.load(tmp_path / "q")
    assert sorted(loaded.records(), key=lambda r: r.queue_mode) == [linked, plain]
    assert await loaded.get_link(linked.recipient_id) == link
    assert await loaded.get_queue(Party.LINK, link.link_id) == linked


async def test_queues_of_one_service_share_one_id_object_once_loaded(tmp_path):
    """A million queues of one service would otherwise hold a million copies of its id."""
    queues = MemoryQueueStore()
    service = new_id()
    for _ in range(3):
        await queues.add_queue(QueueRecord(
            new_id(), new_id(), b"k", b"d", None, True,
            rcv_service_id=bytes(service), ntf_service_id=bytes(service),
        ))  # fmt: skip
    queues.save(tmp_path / "q")
    loaded = list(MemoryQueueStore.load(tmp_path / "q").records())
    ids = {id(r.rcv_service_id) for r in loaded} | {id(r.ntf_service_id) for r in loaded}
    assert len(ids) == 1 and loaded[0].rcv_service_id == service


async def test_a_snapshot_written_before_links_still_loads(tmp_path):
    """Version 1 items are version 3 items without the last three fields (mode, link,
    the count of more recipient keys)."""
    _, _, rec = await saved_stores(tmp_path)
    v3_items = list(stores_module._encode_records([rec], {}))
    none, no_more_keys = b"\xff\xff\xff\xff", b"\x00\x00\x00\x00"
    assert all(item.endswith(none * 2 + no_more_keys) for item in v3_items)
    v1_items = [item[: -len(none) * 3] for item in v3_items]
    stores_module.write_snapshot(tmp_path / "v1", b"SMPQUEv1", v1_items)
    loaded = MemoryQueueStore.load(tmp_path / "v1")
    assert list(loaded.records()) == [rec]
    assert rec.queue_mode is None and rec.link_id is None


async def test_a_snapshot_written_before_recipient_key_lists_still_loads(tmp_path):
    """Version 2 items are version 3 items without the count of more recipient keys."""
    _, _, rec = await saved_stores(tmp_path)
    v3_items = list(stores_module._encode_records([rec], {}))
    v2_items = [item[:-4] for item in v3_items]
    stores_module.write_snapshot(tmp_path / "v2", b"SMPQUEv2", v2_items)
    loaded = MemoryQueueStore.load(tmp_path / "v2")
    assert list(loaded.records()) == [rec]
    assert rec.more_recipient_keys == ()
