"""open_stores: the kind registry, the STORE_KIND marker, memory snapshots and migration."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from store import (
    KIND_FILE,
    STORE_KINDS,
    FsyncPolicy,
    MemoryMessageStore,
    MemoryQueueStore,
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    ServiceRecord,
    SqliteOptions,
    StoreKindMismatch,
    StoreOptions,
    Stores,
    WriteResult,
    migrate_store,
    open_stores,
    read_store_kind,
    register_store_kind,
    store_options,
)


def new_id() -> bytes:
    return os.urandom(24)


def record(**kw) -> QueueRecord:
    return QueueRecord(new_id(), new_id(), os.urandom(44), os.urandom(32), None, True, **kw)


async def fill(stores: Stores, n_queues: int = 3) -> dict[bytes, list[Message]]:
    """Queues with 0..n messages each, the last one past its quota (so it holds a marker)."""
    expected: dict[bytes, list[Message]] = {}
    for i in range(n_queues):
        rec = record(notifier=NotifierCreds(new_id(), b"nk", b"d" * 32) if i % 2 else None)
        assert await stores.queues.add_queue(rec) is None
        sent = [Message(new_id(), 100 + j, b"T", os.urandom(30)) for j in range(i + 1)]
        for m in sent:
            await stores.messages.write_message(rec.recipient_id, m, i + 1)
        expected[rec.recipient_id] = sent
    last = list(expected)[-1]
    refused = Message(new_id(), 999, b"T", b"refused")
    quota = len(expected[last])
    result = await stores.messages.write_message(last, refused, quota)
    assert result is WriteResult.QUOTA_EXCEEDED
    expected[last].append(Message(refused.msg_id, refused.ts, b"", b"", True))
    return expected


async def contents(stores: Stores) -> dict[bytes, list[Message]]:
    out = {}
    async for rec in stores.queues.iter_queues():
        out[rec.recipient_id] = [m async for m in stores.messages.iter_messages(rec.recipient_id)]
    return out


async def all_records(stores: Stores) -> list[QueueRecord]:
    return sorted([r async for r in stores.queues.iter_queues()], key=lambda r: r.recipient_id)


async def test_memory_stores_without_a_directory_need_no_files():
    async with open_stores("memory", None) as stores:
        assert isinstance(stores.queues, MemoryQueueStore)
        assert isinstance(stores.messages, MemoryMessageStore)
        assert stores.kind == "memory"


async def test_opening_a_fresh_directory_marks_it_with_the_kind(tmp_path):
    async with open_stores("sqlite", tmp_path / "data") as stores:
        assert stores.kind == "sqlite"
    assert (tmp_path / "data" / KIND_FILE).read_text().strip() == "sqlite"
    assert read_store_kind(tmp_path / "data") == "sqlite"


async def test_a_directory_of_another_kind_is_refused_with_the_migrate_command(tmp_path):
    async with open_stores("sqlite", tmp_path):
        pass
    with pytest.raises(StoreKindMismatch) as caught:
        async with open_stores("memory", tmp_path):
            pass
    text = str(caught.value)
    assert "'sqlite'" in text and "'memory'" in text
    assert f"smp-router migrate-store --data-dir {tmp_path} --to memory" in text
    assert (caught.value.found, caught.value.wanted) == ("sqlite", "memory")


async def test_an_unknown_kind_is_refused_before_touching_the_directory(tmp_path):
    with pytest.raises(ValueError, match="unknown store kind 'tape'"):
        async with open_stores("tape", tmp_path / "d"):
            pass
    assert not (tmp_path / "d").exists()


async def test_the_sqlite_kind_needs_a_directory():
    with pytest.raises(ValueError, match="data directory"):
        async with open_stores("sqlite", None):
            pass


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_queues_and_messages_survive_a_clean_restart(tmp_path, kind):
    async with open_stores(kind, tmp_path, fsync="always") as stores:
        expected = await fill(stores)
        records = await all_records(stores)
    async with open_stores(kind, tmp_path) as stores:
        assert await all_records(stores) == records
        assert await contents(stores) == expected


async def test_a_memory_snapshot_is_set_aside_once_loaded(tmp_path):
    rec = record()
    async with open_stores("memory", tmp_path) as stores:
        await stores.queues.add_queue(rec)
    snapshot = tmp_path / "memory-store" / "queues.snapshot"
    assert snapshot.exists()
    async with open_stores("memory", tmp_path) as stores:
        assert not snapshot.exists()  # a crash now must not revive this state later
        assert await stores.queues.delete_queue(rec.recipient_id) == rec
    async with open_stores("memory", tmp_path) as stores:
        assert await stores.queues.queue_count() == 0


async def test_memory_stores_are_saved_when_the_context_is_cancelled(tmp_path):
    rec = record()
    with trio.CancelScope() as scope:
        async with open_stores("memory", tmp_path) as stores:
            await stores.queues.add_queue(rec)
            scope.cancel()
            await trio.sleep_forever()
    async with open_stores("memory", tmp_path) as stores:
        assert await stores.queues.get_queue(Party.SENDER, rec.sender_id) == rec


@pytest.mark.parametrize(("source", "target"), [("memory", "sqlite"), ("sqlite", "memory")])
async def test_migration_copies_everything_and_switches_the_kind(tmp_path, source, target):
    async with open_stores(source, tmp_path) as stores:
        expected = await fill(stores, n_queues=5)
        records = await all_records(stores)
    n_messages = sum(map(len, expected.values()))
    migrated = await migrate_store(tmp_path, target)
    assert migrated == (5, n_messages)
    assert read_store_kind(tmp_path) == target
    async with open_stores(target, tmp_path) as stores:
        assert await all_records(stores) == records
        assert await contents(stores) == expected
        last = list(expected)[-1]
        refused = Message(new_id(), 1, b"T", b"x")
        assert await stores.messages.write_message(last, refused, 100) is (
            WriteResult.QUOTA_EXCEEDED
        )
    with pytest.raises(StoreKindMismatch):
        async with open_stores(source, tmp_path):
            pass
    (backup,) = migrated.backups
    assert backup.is_dir() and backup.name.startswith(f"{source}-store.old-")


async def test_every_migration_keeps_its_own_backup(tmp_path):
    """sqlite -> memory -> sqlite -> memory -> sqlite: four backups, none replaced."""
    async with open_stores("sqlite", tmp_path) as stores:
        await fill(stores, n_queues=2)
    backups = []
    for target in ("memory", "sqlite", "memory", "sqlite"):
        migrated = await migrate_store(tmp_path, target)
        assert migrated[0] == 2
        backups.extend(migrated.backups)
    assert len(backups) == len(set(backups)) == 4
    assert all(path.is_dir() for path in backups)
    assert sorted(p.name.split("-store.old-")[0] for p in backups) == ["memory"] * 2 + [
        "sqlite"
    ] * 2


async def test_migrating_to_the_current_kind_copies_nothing(tmp_path):
    async with open_stores("memory", tmp_path) as stores:
        await fill(stores)
    assert await migrate_store(tmp_path, "memory") == (0, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelOptions(StoreOptions):
    level: int = 0


async def test_a_registered_kind_is_opened_with_its_directory_and_typed_options(tmp_path):
    seen: list[tuple[Path | None, StoreOptions]] = []

    @asynccontextmanager
    async def open_test_stores(
        store_dir: Path | None, options: LevelOptions
    ) -> AsyncIterator[Stores]:
        seen.append((store_dir, options))
        yield Stores("test-kind", MemoryQueueStore(), MemoryMessageStore(), store_dir)

    register_store_kind("test-kind", open_test_stores, LevelOptions)
    try:
        async with open_stores("test-kind", tmp_path, fsync="never", level=3) as stores:
            assert stores.kind == "test-kind"
        with pytest.raises(ValueError, match="the test-kind store has no setting depth"):
            async with open_stores("test-kind", tmp_path, depth=3):
                pass
    finally:
        del STORE_KINDS["test-kind"]
    ((store_dir, options),) = seen
    assert store_dir == tmp_path / "test-kind-store"
    assert options == LevelOptions(fsync=FsyncPolicy.NEVER, level=3)


def test_each_kind_takes_only_its_own_settings():
    assert store_options("sqlite", cache_size=10) == SqliteOptions(cache_size=10)
    assert store_options("journal", fsync="always").fsync is FsyncPolicy.ALWAYS
    with pytest.raises(ValueError, match="the memory store has no setting cache_size"):
        store_options("memory", cache_size=10)
    with pytest.raises(ValueError, match="fsync must be one of never, batch, always"):
        store_options("journal", fsync="sometimes")


async def add_links(stores: Stores, n: int = 4) -> dict[bytes, QueueLinkData]:
    """Queues with links (one given later, one replaced), beside those `fill` made."""
    links = {}
    for i in range(n):
        link = QueueLinkData(new_id(), os.urandom(100 + i), os.urandom(i))
        rec = record(queue_mode=b"C", link_id=link.link_id)
        assert await stores.queues.add_queue(rec, link) is None
        links[rec.recipient_id] = link
    later = record(queue_mode=b"M")
    await stores.queues.add_queue(later)
    links[later.recipient_id] = QueueLinkData(new_id(), b"fixed", b"user")
    assert await stores.queues.set_link(later.recipient_id, links[later.recipient_id]) is None
    first = next(iter(links))
    links[first] = QueueLinkData(links[first].link_id, links[first].fixed_data, b"replaced")
    assert await stores.queues.set_link(first, links[first]) is None
    return links


async def all_links(stores: Stores) -> dict[bytes, QueueLinkData]:
    return {rid: link async for rid, link in stores.queues.iter_links()}


async def add_services(stores: Stores) -> dict[bytes, tuple]:
    """A messaging and a notifier service of one certificate, and a third without
    queues, with queues associated on either side or both; returns `all_services`."""
    cert = os.urandom(200)
    services = [
        ServiceRecord(new_id(), role, cert, hashlib.sha256(cert).digest(), 1_700_000_000)
        for role in (b"M", b"N")
    ]
    idle = os.urandom(200)
    services.append(ServiceRecord(new_id(), b"M", idle, hashlib.sha256(idle).digest(), 1))
    for service in services:
        assert await stores.queues.add_service(service) == service
    messaging, notifying = services[0].service_id, services[1].service_id
    recs = [record(notifier=NotifierCreds(new_id(), b"nk", b"d" * 32)) for _ in range(6)]
    for rec in recs:
        assert await stores.queues.add_queue(rec) is None
    rids = [rec.recipient_id for rec in recs]
    assert await stores.queues.set_queues_service(rids[:4], Party.RECIPIENT, messaging) == (
        [None] * 4
    )
    assert await stores.queues.set_queues_service(rids[2:], Party.NOTIFIER, notifying) == (
        [None] * 4
    )
    # created associated, as NEW in a service session; and one released again
    created = record(rcv_service_id=messaging)
    assert await stores.queues.add_queue(created) is None
    assert await stores.queues.set_service(rids[0], Party.RECIPIENT, None) is None
    held = await all_services(stores)
    assert held[messaging][1].count == 4 and held[notifying][2].count == 4
    return held


async def all_services(stores: Stores) -> dict[bytes, tuple]:
    """service id -> (record, recipient side's figures, notifier side's figures)."""
    return {
        s.service_id: (
            s,
            await stores.queues.service_summary(s.service_id, Party.RECIPIENT),
            await stores.queues.service_summary(s.service_id, Party.NOTIFIER),
        )
        async for s in stores.queues.iter_services()
    }


async def test_migration_copies_links_and_services_through_every_kind(tmp_path):
    async with open_stores("memory", tmp_path) as stores:
        expected = await fill(stores, n_queues=3)
        links = await add_links(stores)
        services = await add_services(stores)
        records = await all_records(stores)
    for kind in ("sqlite", "journal", "memory", "journal", "sqlite", "memory"):
        queues, _ = await migrate_store(tmp_path, kind)
        assert queues == len(records)
        async with open_stores(kind, tmp_path) as stores:
            assert await all_records(stores) == records, kind
            assert await all_links(stores) == links, kind
            assert await all_services(stores) == services, kind
            for service_id, (_, rcv, ntf) in services.items():
                for party, figures in ((Party.RECIPIENT, rcv), (Party.NOTIFIER, ntf)):
                    page = await stores.queues.service_queue_page(service_id, party, None, 100)
                    assert len(page) == figures.count, kind
            for rid, link in links.items():
                found = await stores.queues.get_queue(Party.LINK, link.link_id)
                assert found is not None and found.recipient_id == rid, kind
            assert (await contents(stores)).items() >= expected.items()
