"""Persistence behind two small interfaces: queue records and undelivered messages.

`open_stores(kind, data_dir, options)` opens both stores of one kind
("memory", "journal", "sqlite", or any kind added to `STORE_KINDS`), each with
its own typed options (`StoreOptions`, `JournalOptions`, `SqliteOptions`).
"""

from .durability import FsyncPolicy
from .factory import (
    KIND_FILE,
    MIGRATE_COMMAND,
    STORE_KINDS,
    MigrationCheckError,
    StoreKindMismatch,
    StoreOpener,
    StoreOptions,
    Stores,
    copy_stores,
    migrate_store,
    open_stores,
    read_store_kind,
    register_store_kind,
    store_options,
)
from .interfaces import (
    DUPLICATE,
    EMPTY_IDS_HASH,
    SERVICE_ROLES,
    Message,
    MessageStore,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    QueueStore,
    ServiceQueues,
    ServiceRecord,
    StoreError,
    WriteResult,
)
from .journal.opener import JournalOptions
from .memory.stores import MemoryMessageStore, MemoryQueueStore, SnapshotError
from .sqlite.opener import SqliteOptions

__all__ = [
    "DUPLICATE",
    "EMPTY_IDS_HASH",
    "SERVICE_ROLES",
    "FsyncPolicy",
    "JournalOptions",
    "SqliteOptions",
    "KIND_FILE",
    "MIGRATE_COMMAND",
    "STORE_KINDS",
    "MemoryMessageStore",
    "MemoryQueueStore",
    "Message",
    "MigrationCheckError",
    "MessageStore",
    "NotifierCreds",
    "Party",
    "QueueLinkData",
    "QueueRecord",
    "QueueStatus",
    "QueueStore",
    "ServiceQueues",
    "ServiceRecord",
    "SnapshotError",
    "StoreError",
    "StoreKindMismatch",
    "StoreOpener",
    "StoreOptions",
    "Stores",
    "WriteResult",
    "copy_stores",
    "migrate_store",
    "open_stores",
    "read_store_kind",
    "register_store_kind",
    "store_options",
]
