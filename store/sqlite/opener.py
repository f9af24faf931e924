"""The "sqlite" store kind: both stores on one database in the kind's directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ..kinds import StoreKind, StoreOptions, Stores
from .database import DB_FILE, DEFAULT_RESERVE_BYTES, open_sqlite_database
from .messages import SqliteMessageStore
from .queues import DEFAULT_CACHE_SIZE, DEFAULT_DELETED_TTL, open_queue_store


@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteOptions(StoreOptions):
    """The sqlite kind: both stores in one database."""

    deleted_ttl: int = DEFAULT_DELETED_TTL
    cache_size: int = DEFAULT_CACHE_SIZE
    reserve_bytes: int = DEFAULT_RESERVE_BYTES  # room kept for a full disk; 0: none


@asynccontextmanager
async def open_sqlite_stores(
    store_dir: Path | None, options: SqliteOptions
) -> AsyncIterator[Stores]:
    """Both stores on one database in `store_dir`."""
    if store_dir is None:
        raise ValueError("the sqlite store needs a data directory")
    async with open_sqlite_database(
        store_dir / DB_FILE, fsync=options.fsync, reserve_bytes=options.reserve_bytes
    ) as db:
        queues = await open_queue_store(
            db, deleted_ttl=options.deleted_ttl, cache_size=options.cache_size
        )
        messages = SqliteMessageStore(db)
        try:
            yield Stores("sqlite", queues, messages, store_dir, bulk_import=queues.bulk_import)
        finally:
            await messages.close()
            await queues.close()


KIND = StoreKind(open_sqlite_stores, SqliteOptions)
