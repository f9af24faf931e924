"""Backends under the store contract suite.

Every backend is a `StoreBackend`: an id and an `open(path)` async context
manager that yields a ready store living under `path` (a directory that does
not exist yet) and closes it on exit. A persistent backend, opened again on the
same path, must find everything that was there.

To put a new backend under the suite, append one entry to QUEUE_BACKENDS or
MESSAGE_BACKENDS (or both).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from postgres_server import schema_for, shared_server

from store.journal.messages import open_journal
from store.journal.storelog import open_store_log
from store.memory.stores import MemoryMessageStore, MemoryQueueStore
from store.postgres.database import PostgresDatabase
from store.postgres.messages import PostgresMessageStore
from store.postgres.queues import PostgresQueueStore
from store.postgres.queues import open_queue_store as open_postgres_queue_store
from store.sqlite.database import DB_FILE, open_sqlite_database
from store.sqlite.messages import SqliteMessageStore
from store.sqlite.queues import SqliteQueueStore, open_queue_store


@dataclass(frozen=True)
class StoreBackend:
    id: str
    open: Callable[[Path], AbstractAsyncContextManager[Any]]
    persistent: bool = False


@asynccontextmanager
async def _memory_queues(path: Path) -> AsyncIterator[MemoryQueueStore]:
    store = MemoryQueueStore()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _memory_messages(path: Path) -> AsyncIterator[MemoryMessageStore]:
    store = MemoryMessageStore()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _snapshot_queues(path: Path) -> AsyncIterator[MemoryQueueStore]:
    """Memory store saved on close and loaded on open: the router's clean-restart path."""
    file = path / "queues.snapshot"
    store = MemoryQueueStore.load(file) if file.exists() else MemoryQueueStore()
    try:
        yield store
    finally:
        path.mkdir(parents=True, exist_ok=True)
        store.save(file)


@asynccontextmanager
async def _snapshot_messages(path: Path) -> AsyncIterator[MemoryMessageStore]:
    file = path / "messages.snapshot"
    store = MemoryMessageStore.load(file) if file.exists() else MemoryMessageStore()
    try:
        yield store
    finally:
        path.mkdir(parents=True, exist_ok=True)
        store.save(file)


@asynccontextmanager
async def _sqlite_queues(path: Path) -> AsyncIterator[SqliteQueueStore]:
    async with open_sqlite_database(path / DB_FILE) as db:
        store = await open_queue_store(db)
        try:
            yield store
        finally:
            await store.close()


@asynccontextmanager
async def _sqlite_messages(path: Path) -> AsyncIterator[SqliteMessageStore]:
    async with open_sqlite_database(path / DB_FILE) as db:
        store = SqliteMessageStore(db)
        try:
            yield store
        finally:
            await store.close()


@asynccontextmanager
async def _postgres_database(path: Path) -> AsyncIterator[PostgresDatabase]:
    """The schema of the test run's PostgreSQL that belongs to `path`: fresh for a new
    path, the same one when a persistent store is opened again on its path."""
    db = PostgresDatabase(shared_server().url, schema=schema_for(path), pool_size=4)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


@asynccontextmanager
async def _postgres_queues(path: Path) -> AsyncIterator[PostgresQueueStore]:
    async with _postgres_database(path) as db:
        store = await open_postgres_queue_store(db)
        try:
            yield store
        finally:
            await store.close()


@asynccontextmanager
async def _postgres_messages(path: Path) -> AsyncIterator[PostgresMessageStore]:
    async with _postgres_database(path) as db:
        store = PostgresMessageStore(db)
        try:
            yield store
        finally:
            await store.close()


QUEUE_BACKENDS: list[StoreBackend] = [
    StoreBackend("memory", _memory_queues),
    StoreBackend("memory-snapshot", _snapshot_queues, persistent=True),
    StoreBackend("sqlite", _sqlite_queues, persistent=True),
    StoreBackend("store-log", lambda p: open_store_log(p / "queues.log"), persistent=True),
    StoreBackend("postgres", _postgres_queues, persistent=True),
]

MESSAGE_BACKENDS: list[StoreBackend] = [
    StoreBackend("memory", _memory_messages),
    StoreBackend("memory-snapshot", _snapshot_messages, persistent=True),
    StoreBackend("sqlite", _sqlite_messages, persistent=True),
    StoreBackend("journal", open_journal, persistent=True),
    StoreBackend("postgres", _postgres_messages, persistent=True),
]


@pytest.fixture(params=QUEUE_BACKENDS, ids=lambda b: b.id)
def queue_backend(request: pytest.FixtureRequest) -> StoreBackend:
    return request.param


@pytest.fixture(params=MESSAGE_BACKENDS, ids=lambda b: b.id)
def message_backend(request: pytest.FixtureRequest) -> StoreBackend:
    return request.param


@pytest.fixture(params=[b for b in QUEUE_BACKENDS if b.persistent], ids=lambda b: b.id)
def persistent_queue_backend(request: pytest.FixtureRequest) -> StoreBackend:
    return request.param


@pytest.fixture(params=[b for b in MESSAGE_BACKENDS if b.persistent], ids=lambda b: b.id)
def persistent_message_backend(request: pytest.FixtureRequest) -> StoreBackend:
    return request.param


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
async def queues(queue_backend: StoreBackend, store_path: Path) -> AsyncIterator[Any]:
    async with queue_backend.open(store_path) as store:
        yield store


@pytest.fixture
async def messages(message_backend: StoreBackend, store_path: Path) -> AsyncIterator[Any]:
    async with message_backend.open(store_path) as store:
        yield store
