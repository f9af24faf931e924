"""The "journal" store kind: `queues.log` (the store log) and `messages/` (the journal)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ..kinds import StoreKind, StoreOptions, Stores
from .messages import open_journal
from .storelog import open_store_log


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalOptions(StoreOptions):
    """The journal kind: the store log for queues, the journal for messages."""

    backups: int = 5  # compacted store logs kept
    window: float = 0.002  # seconds a group commit waits for more writers (batch only)
    rotate_after: int = 10_000  # messages per message file
    max_open_files: int = 512  # message files held open at once
    compact_state_at: int = 64 << 20  # state log bytes past which it is compacted while running


@asynccontextmanager
async def open_journal_stores(
    store_dir: Path | None, options: JournalOptions
) -> AsyncIterator[Stores]:
    """Both stores in `store_dir`, with one fsync policy."""
    if store_dir is None:
        raise ValueError("the journal store needs a data directory")
    o = options
    async with open_store_log(
        store_dir / "queues.log",
        fsync=o.fsync, backups=o.backups, skip_corrupt=o.skip_corrupt, window=o.window,
    ) as queues:
        async with open_journal(
            store_dir / "messages",
            fsync=o.fsync, window=o.window, rotate_after=o.rotate_after,
            max_open_files=o.max_open_files, compact_state_at=o.compact_state_at,
            skip_corrupt=o.skip_corrupt,
        ) as messages:
            yield Stores("journal", queues, messages, store_dir)


KIND = StoreKind(open_journal_stores, JournalOptions)
