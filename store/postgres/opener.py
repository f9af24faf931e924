"""The "postgres" store kind: both stores in one schema of a PostgreSQL database.

Its options are the reference router's `[STORE_LOG]` keys: `db_connection` (a
`postgresql://` URL), `db_schema`, `db_pool_size` and `db_deleted_ttl` (here in
seconds; the file's key is in days). The kind's directory in the data directory
holds only `DATABASE`, naming the database and schema (never a password), so an
operator looking at the data directory sees where the data is.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from ..durability import atomic_write, own_temp_suffix
from ..interfaces import StoreError
from ..kinds import StoreKind, StoreOptions, Stores
from .bulk import PostgresExport
from .database import (
    DEFAULT_POOL_SIZE,
    DEFAULT_SCHEMA,
    DatabaseUnavailable,
    PostgresDatabase,
    SchemaLocked,
    SchemaTooNew,
    redacted,
)
from .messages import PostgresMessageStore
from .queues import DEFAULT_DELETED_TTL, open_queue_store

log = logging.getLogger(__name__)

DEFAULT_CONNECTION = "postgresql://smp@/smp_server_store"  # the reference router's default
DATABASE_NOTE = "DATABASE"
COMPACT_INTERVAL = 3600.0  # seconds between two removals of queues deleted before the TTL

__all__ = [
    "DatabaseUnavailable",
    "KIND",
    "PostgresOptions",
    "SchemaLocked",
    "SchemaTooNew",
    "open_postgres_stores",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PostgresOptions(StoreOptions):
    """The postgres kind: both stores in one schema."""

    db_connection: str = DEFAULT_CONNECTION
    db_schema: str = DEFAULT_SCHEMA
    db_pool_size: int = DEFAULT_POOL_SIZE
    db_deleted_ttl: int = DEFAULT_DELETED_TTL  # seconds
    db_lock_index: int = 0  # the worker of its router (docs/workers.md#stores): its own lock


@asynccontextmanager
async def open_postgres_stores(
    store_dir: Path | None, options: PostgresOptions
) -> AsyncIterator[Stores]:
    """Both stores on the schema `options` name; `store_dir` (if any) gets a note of where."""
    db = PostgresDatabase(
        options.db_connection, schema=options.db_schema, pool_size=options.db_pool_size,
        fsync=options.fsync, lock_index=options.db_lock_index,
    )
    await db.open()
    try:
        if store_dir is not None:
            _write_note(store_dir, db)
        queues = await open_queue_store(db, deleted_ttl=options.db_deleted_ttl)
        messages = PostgresMessageStore(db)
        background = _Background()
        background.start(db.keep_lock)
        background.start(_compact_periodically, queues)
        try:
            yield Stores("postgres", queues, messages, store_dir, bulk_import=queues.bulk_import,
                         bulk_export=PostgresExport(db))
        finally:
            background.cancel()
            await messages.close()
            await queues.close()
    finally:
        await db.close()


class _Background:
    """Tasks that live as long as the stores. Not a nursery: the router enters and leaves
    its stores' context in different cancel scopes (it closes them shielded), which a
    nursery inside that context does not allow."""

    def __init__(self) -> None:
        self._scopes: list[trio.CancelScope] = []

    def start(self, fn, *args) -> None:
        scope = trio.CancelScope()
        self._scopes.append(scope)

        async def run() -> None:
            with scope:
                try:
                    await fn(*args)
                except Exception:  # a bug: logged, and the stores go on without the task
                    log.exception("postgres store: background task %s failed", fn.__name__)

        trio.lowlevel.spawn_system_task(run, name=f"postgres-store.{fn.__name__}")

    def cancel(self) -> None:
        for scope in self._scopes:
            scope.cancel()


def _write_note(store_dir: Path, db: PostgresDatabase) -> None:
    store_dir.mkdir(parents=True, exist_ok=True)
    note = f"{redacted(db.url)}\nschema {db.schema}\n"
    path = store_dir / DATABASE_NOTE
    if not path.exists() or path.read_text() != note:
        # The workers sharing the database write it too.
        atomic_write(path, (note.encode(),), temp_suffix=own_temp_suffix())


async def _compact_periodically(queues) -> None:
    while True:
        await trio.sleep(COMPACT_INTERVAL)
        try:
            removed = await queues.compact()
        except StoreError as e:  # the database is away: next time
            log.warning("deleted queues not removed: %s", e)
            continue
        if removed:
            log.info("%d deleted queues removed", removed)


KIND = StoreKind(open_postgres_stores, PostgresOptions, in_files=False)
