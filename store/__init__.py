"""Persistence behind two small interfaces: queue records and undelivered messages."""

from .interfaces import (
    DUPLICATE,
    Message,
    MessageStore,
    NotifierCreds,
    Party,
    QueueRecord,
    QueueStatus,
    QueueStore,
    WriteResult,
)
from .memory import MemoryMessageStore, MemoryQueueStore, SnapshotError

__all__ = [
    "DUPLICATE",
    "MemoryMessageStore",
    "MemoryQueueStore",
    "Message",
    "MessageStore",
    "NotifierCreds",
    "Party",
    "QueueRecord",
    "QueueStatus",
    "QueueStore",
    "SnapshotError",
    "WriteResult",
]
