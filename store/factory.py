"""Opening the stores of one kind, and moving a data directory from one kind to another.

A data directory holds one store kind at a time. Its `STORE_KIND` file names
the kind, and that kind's files live in their own subdirectory
`<kind>-store/`, so two kinds never share a file name. Opening a directory
that holds another kind is refused with `StoreKindMismatch`, whose message
names the kind found and the command that migrates it.

Kinds are registered in `STORE_KINDS`: kind name -> opener, or
"module:function" naming the opener (imported on first use, so a backend
module is only loaded when its kind is used). An opener is an async context
manager factory `opener(store_dir, options) -> Stores` that opens both stores
under `store_dir` (None for a memory-only run), and closes them on exit.
`register_store_kind()` adds one at run time.

Migration (`migrate_store`) copies into a fresh `<kind>-store.tmp/`, checks
that the copy holds as many queues as the source and, queue by queue, as
many messages (`MigrationCheckError` otherwise, and nothing is switched),
renames it into place, and only then rewrites `STORE_KIND`: a crash at any
point leaves the directory opening as one complete kind. The old kind's files
are kept as `<kind>-store.old/`. A `progress(phase, done, total)` callback
hears about every batch: phase "queues" counts queues, phase "messages"
counts the queues whose messages were copied.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .durable import atomic_write, replace_durably
from .interfaces import Message, MessageStore, QueueRecord, QueueStore
from .memory import MemoryMessageStore, MemoryQueueStore

KIND_FILE = "STORE_KIND"
MIGRATE_COMMAND = "smp-router migrate-store --data-dir {data_dir} --to {kind}"

BulkImport = Callable[[list[QueueRecord], list[tuple[bytes, Message]]], Awaitable[Any]]
Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(slots=True)
class Stores:
    """The two open stores of one kind."""

    kind: str
    queues: QueueStore
    messages: MessageStore
    store_dir: Path | None = None
    bulk_import: BulkImport | None = None  # one-transaction insert, if the kind has one


@dataclass(frozen=True, slots=True)
class StoreOptions:
    fsync: str = "batch"  # never | batch | always
    settings: Mapping[str, Any] = field(default_factory=dict)  # kind-specific extras


StoreOpener = Callable[[Path | None, StoreOptions], AbstractAsyncContextManager[Stores]]


class MigrationCheckError(Exception):
    """The copy does not hold what the source holds; the data directory was not switched."""


class StoreKindMismatch(Exception):
    """The data directory holds another store kind than the one asked for."""

    def __init__(self, data_dir: Path, found: str, wanted: str) -> None:
        self.data_dir, self.found, self.wanted = data_dir, found, wanted
        command = MIGRATE_COMMAND.format(data_dir=data_dir, kind=wanted)
        super().__init__(
            f"data directory {data_dir} holds a {found!r} store, not {wanted!r}; "
            f"start with --store {found}, or migrate it first with: {command}"
        )


# --- registry ----------------------------------------------------------------------

STORE_KINDS: dict[str, StoreOpener | str] = {
    "memory": "store.factory:open_memory_stores",
    "journal": "store.journal:open_journal_stores",
    "sqlite": "store.sqlite:open_sqlite_stores",
}


def register_store_kind(kind: str, opener: StoreOpener | str) -> None:
    STORE_KINDS[kind] = opener


def store_opener(kind: str) -> StoreOpener:
    try:
        opener = STORE_KINDS[kind]
    except KeyError:
        known = ", ".join(sorted(STORE_KINDS))
        raise ValueError(f"unknown store kind {kind!r} (known: {known})") from None
    if isinstance(opener, str):
        module, _, name = opener.partition(":")
        opener = STORE_KINDS[kind] = getattr(importlib.import_module(module), name)
    return opener


# --- opening -------------------------------------------------------------------------


def read_store_kind(data_dir: Path | str) -> str | None:
    """The kind named in the data directory's STORE_KIND file, or None."""
    try:
        return (Path(data_dir) / KIND_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def store_dir(data_dir: Path | str, kind: str) -> Path:
    return Path(data_dir) / f"{kind}-store"


@asynccontextmanager
async def open_stores(
    kind: str, data_dir: Path | str | None, *, fsync: str = "batch", **settings: Any
) -> AsyncIterator[Stores]:
    """Open the queue and message stores of `kind` in `data_dir` (None: memory only).

    Raises StoreKindMismatch if the directory holds another kind; marks a fresh
    directory with this kind.
    """
    opener = store_opener(kind)
    options = StoreOptions(fsync=fsync, settings=settings)
    if data_dir is None:
        async with opener(None, options) as stores:
            yield stores
        return
    data_dir = Path(data_dir)
    found = read_store_kind(data_dir)
    if found is not None and found != kind:
        raise StoreKindMismatch(data_dir, found, kind)
    data_dir.mkdir(parents=True, exist_ok=True)
    if found is None:
        _write_store_kind(data_dir, kind)
    async with opener(store_dir(data_dir, kind), options) as stores:
        yield stores


def _write_store_kind(data_dir: Path, kind: str) -> None:
    atomic_write(data_dir / KIND_FILE, (kind.encode() + b"\n",))


# --- memory kind ---------------------------------------------------------------------

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


# --- migration -------------------------------------------------------------------------

MIGRATE_BATCH = 2000  # queues (with their messages) per bulk-import transaction


async def migrate_store(
    data_dir: Path | str,
    to_kind: str,
    *,
    fsync: str = "batch",
    progress: Progress | None = None,
    **settings: Any,
) -> tuple[int, int]:
    """Copy every queue and message of the directory's current kind into `to_kind`,
    check the counts, and switch the directory over; returns (queues, messages) copied."""
    data_dir = Path(data_dir)
    from_kind = read_store_kind(data_dir)
    if from_kind is None:
        raise ValueError(f"{data_dir} holds no store (no {KIND_FILE} file)")
    store_opener(to_kind)  # fail on an unknown kind before touching anything
    if from_kind == to_kind:
        return 0, 0
    final, tmp = store_dir(data_dir, to_kind), data_dir / f"{to_kind}-store.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    options = StoreOptions(fsync=fsync, settings=settings)
    async with open_stores(from_kind, data_dir) as src:
        async with store_opener(to_kind)(tmp, options) as dst:
            counts = await copy_stores(src, dst, progress)
            await check_copy(src, dst, counts)
    _set_aside(final, data_dir / f"{to_kind}-store.old")
    replace_durably(tmp, final)
    _write_store_kind(data_dir, to_kind)
    _set_aside(store_dir(data_dir, from_kind), data_dir / f"{from_kind}-store.old")
    return counts


def _set_aside(path: Path, backup: Path) -> None:
    if path.exists():
        shutil.rmtree(backup, ignore_errors=True)
        replace_durably(path, backup)


async def copy_stores(
    src: Stores, dst: Stores, progress: Progress | None = None
) -> tuple[int, int]:
    """Copy every queue, then every message, from `src` into `dst`; returns the counts."""
    report = progress or _no_progress
    n_queues = n_messages = 0
    total = await src.queues.queue_count()
    report("queues", 0, total)
    batch: list[QueueRecord] = []
    async for rec in src.queues.iter_queues():
        batch.append(rec)
        if len(batch) >= MIGRATE_BATCH:
            n_queues += await _put_queues(dst, batch)
            batch = []
            report("queues", n_queues, total)
    n_queues += await _put_queues(dst, batch)
    report("queues", n_queues, total)
    rids = [rid async for rid in src.messages.queue_ids()]
    report("messages", 0, len(rids))
    pending: list[tuple[bytes, Message]] = []
    for done, rid in enumerate(rids, 1):
        async for m in src.messages.iter_messages(rid):
            pending.append((rid, m))
        if len(pending) >= MIGRATE_BATCH:
            n_messages += await _put_messages(dst, pending)
            pending = []
            report("messages", done, len(rids))
    n_messages += await _put_messages(dst, pending)
    report("messages", len(rids), len(rids))
    return n_queues, n_messages


async def check_copy(src: Stores, dst: Stores, counts: tuple[int, int]) -> None:
    """Raise MigrationCheckError unless `dst` holds every queue and message of `src`."""
    n_queues, n_messages = counts
    src_queues, dst_queues = await src.queues.queue_count(), await dst.queues.queue_count()
    if not src_queues == dst_queues == n_queues:
        raise MigrationCheckError(
            f"queue count check failed: source {src_queues}, copied {n_queues}, "
            f"destination {dst_queues}"
        )
    found = 0
    async for rid in src.messages.queue_ids():
        want, got = await src.messages.queue_size(rid), await dst.messages.queue_size(rid)
        if want != got:
            raise MigrationCheckError(
                f"message count check failed for queue {rid.hex()}: source {want}, "
                f"destination {got}"
            )
        found += got
    if found != n_messages:
        raise MigrationCheckError(
            f"message count check failed: copied {n_messages}, destination {found}"
        )


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


async def _put_queues(dst: Stores, records: list[QueueRecord]) -> int:
    if dst.bulk_import is not None:
        await dst.bulk_import(records, [])
        return len(records)
    for rec in records:
        error = await dst.queues.add_queue(rec)
        if error is not None:
            raise ValueError(f"queue {rec.recipient_id.hex()} could not be copied: {error}")
    return len(records)


async def _put_messages(dst: Stores, messages: list[tuple[bytes, Message]]) -> int:
    if dst.bulk_import is not None:
        await dst.bulk_import([], messages)
        return len(messages)
    sizes: dict[bytes, int] = {}
    for rid, m in messages:
        size = sizes.get(rid)
        if size is None:
            size = await dst.messages.queue_size(rid)
        # A quota equal to the current size makes the store append exactly this
        # marker; any larger quota stores the message itself.
        await dst.messages.write_message(rid, m, size if m.quota else size + 1)
        sizes[rid] = size + 1
    return len(messages)
