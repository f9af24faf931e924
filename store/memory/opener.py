"""The "memory" store kind: memory stores, kept across a clean stop in snapshot files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ..durability import replace_durably
from ..kinds import StoreKind, StoreOptions, Stores
from .stores import MemoryMessageStore, MemoryQueueStore

QUEUES_SNAPSHOT = "queues.snapshot"
MESSAGES_SNAPSHOT = "messages.snapshot"


@asynccontextmanager
async def open_memory_stores(
    store_dir: Path | None, options: StoreOptions
) -> AsyncIterator[Stores]:
    """Memory stores; with a directory, restored from its snapshots at open and saved
    back when the context exits (on a clean stop, cancellation included). The
    snapshots read at open are renamed `*.loaded`, kept until the next save."""
    if store_dir is None:
        yield Stores("memory", MemoryQueueStore(), MemoryMessageStore())
        return
    store_dir.mkdir(parents=True, exist_ok=True)
    qfile, mfile = store_dir / QUEUES_SNAPSHOT, store_dir / MESSAGES_SNAPSHOT
    queues = MemoryQueueStore.load(qfile) if qfile.exists() else MemoryQueueStore()
    messages = MemoryMessageStore.load(mfile) if mfile.exists() else MemoryMessageStore()
    # A loaded snapshot is set aside: after a crash, the next start must not bring
    # back messages already delivered or queues already deleted.
    for file in (qfile, mfile):
        if file.exists():
            replace_durably(file, file.with_name(file.name + ".loaded"))
    try:
        yield Stores("memory", queues, messages, store_dir)
    finally:
        # Messages first: a crash between the two leaves old queues, never orphaned ones lost.
        messages.save(mfile)
        queues.save(qfile)


KIND = StoreKind(open_memory_stores)
