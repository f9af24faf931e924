"""Migration reports its progress and refuses to switch a directory over to a copy
whose counts differ from the source."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest

from store import (
    STORE_KINDS,
    Message,
    MigrationCheckError,
    QueueLinkData,
    QueueRecord,
    Stores,
    migrate_store,
    open_stores,
    read_store_kind,
)
from store.factory import StoreKind, store_opener


def record() -> QueueRecord:
    return QueueRecord(os.urandom(24), os.urandom(24), os.urandom(44), os.urandom(32), None, True)


async def fill(data_dir, kind: str = "journal", queues: int = 3) -> None:
    async with open_stores(kind, data_dir) as stores:
        for i in range(queues):
            rec = record()
            assert await stores.queues.add_queue(rec) is None
            for j in range(i):
                await stores.messages.write_message(
                    rec.recipient_id, Message(os.urandom(24), 100 + j, b"F", b"m"), 10
                )


async def test_progress_is_reported_per_phase_up_to_the_totals(tmp_path):
    await fill(tmp_path)
    seen: list[tuple[str, int, int]] = []
    assert await migrate_store(tmp_path, "sqlite", progress=lambda *p: seen.append(p)) == (3, 3)
    assert seen[0] == ("queues", 0, 3) and ("queues", 3, 3) in seen
    # The messages phase counts messages (0 + 1 + 2), not the queues that hold them.
    assert ("messages", 0, 3) in seen and seen[-1] == ("messages", 3, 3)


async def test_a_copy_that_lost_a_message_is_refused_and_the_directory_keeps_its_kind(
    tmp_path, monkeypatch
):
    await fill(tmp_path)
    real = store_opener("memory")

    @asynccontextmanager
    async def lossy(store_dir, options):
        async with real(store_dir, options) as stores:
            yield Stores(stores.kind, stores.queues, _DropsOne(stores.messages), store_dir)

    monkeypatch.setitem(STORE_KINDS, "memory", StoreKind(lossy))
    with pytest.raises(MigrationCheckError, match="message count"):
        await migrate_store(tmp_path, "memory")
    assert read_store_kind(tmp_path) == "journal"
    async with open_stores("journal", tmp_path) as stores:
        assert await stores.queues.queue_count() == 3


async def test_a_copy_that_lost_a_link_is_refused_and_the_directory_keeps_its_kind(
    tmp_path, monkeypatch
):
    await fill(tmp_path, "sqlite")
    link = QueueLinkData(os.urandom(24), b"fixed", b"user")
    async with open_stores("sqlite", tmp_path) as stores:
        assert await stores.queues.add_queue(replace(record(), link_id=link.link_id), link) is None
    real = store_opener("memory")

    @asynccontextmanager
    async def linkless(store_dir, options):
        async with real(store_dir, options) as stores:
            yield Stores(stores.kind, _DropsLinks(stores.queues), stores.messages, store_dir)

    monkeypatch.setitem(STORE_KINDS, "memory", StoreKind(linkless))
    with pytest.raises(
        MigrationCheckError, match="link count check failed: source 1, destination 0"
    ):
        await migrate_store(tmp_path, "memory")
    assert read_store_kind(tmp_path) == "sqlite"
    async with open_stores("sqlite", tmp_path) as stores:
        assert [rid async for rid, _ in stores.queues.iter_links()] != []


async def test_a_copy_that_lost_a_service_association_is_refused(tmp_path, monkeypatch):
    from test_store_factory import add_services

    async with open_stores("sqlite", tmp_path) as stores:
        await add_services(stores)
    real = store_opener("memory")

    @asynccontextmanager
    async def unassociated(store_dir, options):
        async with real(store_dir, options) as stores:
            yield Stores(stores.kind, _DropsAService(stores.queues), stores.messages, store_dir)

    monkeypatch.setitem(STORE_KINDS, "memory", StoreKind(unassociated))
    with pytest.raises(MigrationCheckError, match=r"service check failed for .* \(recipient\)"):
        await migrate_store(tmp_path, "memory")
    assert read_store_kind(tmp_path) == "sqlite"


class _DropsAService:
    """A queue store that stores the first queue associated on the recipient side
    without its association."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self._dropped = False

    async def add_queue(self, record, link=None):
        if record.rcv_service_id is not None and not self._dropped:
            self._dropped = True
            record = replace(record, rcv_service_id=None)
        return await self._inner.add_queue(record, link)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _DropsLinks:
    """A queue store that silently stores every queue without its link."""

    def __init__(self, inner) -> None:
        self._inner = inner

    async def add_queue(self, record, link=None):
        return await self._inner.add_queue(replace(record, link_id=None))

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _DropsOne:
    """A message store that silently drops the first message written to it."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self._dropped = False

    async def write_message(self, rid, message, quota):
        if not self._dropped:
            self._dropped = True
            return None
        return await self._inner.write_message(rid, message, quota)

    def __getattr__(self, name):
        return getattr(self._inner, name)
