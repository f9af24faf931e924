"""Persistence behind two small interfaces: queue records and undelivered messages.

`open_stores(kind, data_dir, fsync=...)` opens both stores of one kind
("memory", "sqlite", or any kind added to `STORE_KINDS`).
"""

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
)
from .interfaces import (
    DUPLICATE,
    Message,
    MessageStore,
    NotifierCreds,
    Party,
    QueueRecord,
    QueueStatus,
    QueueStore,
    StoreError,
    WriteResult,
)
from .memory import MemoryMessageStore, MemoryQueueStore, SnapshotError

__all__ = [
    "DUPLICATE",
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
    "QueueRecord",
    "QueueStatus",
    "QueueStore",
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
]
