"""A migration into a kind whose data is in files writes the copy without a sync per
change and syncs it whole, once, before the data directory is switched to it; a copy
into PostgreSQL commits as it goes and has no files to sync."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from postgres_server import schema_for, shared_server

import store.factory
from store import migrate_store, open_stores, read_store_kind
from store.interfaces import Message, QueueRecord


async def _journal_with_a_message(data: Path) -> None:
    async with open_stores("journal", data) as stores:
        rec = QueueRecord(os.urandom(24), os.urandom(24), os.urandom(44), os.urandom(32),
                          None, True)
        assert await stores.queues.add_queue(rec) is None
        await stores.messages.write_message(rec.recipient_id, Message(b"m" * 24, 1, b"", b"x"),
                                            10)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
async def test_the_copy_is_synced_whole_before_the_switch(tmp_path, monkeypatch, kind):
    data = tmp_path / "data"
    await _journal_with_a_message(data)
    synced: list[tuple[Path, str | None, list[str]]] = []

    def sync_tree(root: Path) -> None:
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        synced.append((root, read_store_kind(data), files))

    monkeypatch.setattr(store.factory, "sync_tree", sync_tree)
    assert await migrate_store(data, kind) == (1, 1)
    ((root, kind_then, files),) = synced
    assert root == data / f"{kind}-store.tmp"
    assert kind_then == "journal"  # not switched yet
    assert files  # the copy's files, closed, are what is synced
    assert read_store_kind(data) == kind


async def test_a_copy_into_postgres_syncs_no_files(tmp_path, monkeypatch):
    data = tmp_path / "data"
    await _journal_with_a_message(data)
    synced: list[Path] = []
    monkeypatch.setattr(store.factory, "sync_tree", synced.append)
    settings = {"db_connection": shared_server().url, "db_schema": schema_for(tmp_path)}
    assert await migrate_store(data, "postgres", **settings) == (1, 1)
    assert synced == []
    # and out of it, into files, once
    assert await migrate_store(data, "sqlite", source_settings=settings) == (1, 1)
    assert synced == [data / "sqlite-store.tmp"]
