"""The "sqlite" store kind: both stores on one database in the kind's directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ..kinds import SqliteOptions, Stores
from .database import DB_FILE, open_sqlite_database
from .messages import SqliteMessageStore
from .queues import open_queue_store


@asynccontextmanager
async def open_sqlite_stores(
    store_dir: Path | None, options: SqliteOptions
) -> AsyncIterator[Stores]:
    """Both stores on one database in `store_dir`."""
    if store_dir is None:
        raise ValueError("the sqlite store needs a data directory")
    async with open_sqlite_database(store_dir / DB_FILE, fsync=options.fsync) as db:
        queues = await open_queue_store(
            db, deleted_ttl=options.deleted_ttl, cache_size=options.cache_size
        )
        messages = SqliteMessageStore(db)
        try:
            yield Stores("sqlite", queues, messages, store_dir, bulk_import=queues.bulk_import)
        finally:
            await messages.close()
            await queues.close()
