"""Opening the stores of one kind, and moving a data directory from one kind to another.

A data directory holds one store kind at a time. Its `STORE_KIND` file names
the kind, and that kind's files live in their own subdirectory
`<kind>-store/`, so two kinds never share a file name. Opening a directory
that holds another kind is refused with `StoreKindMismatch`, whose message
names the kind found and the command that migrates it.

Kinds are registered in `STORE_KINDS`: kind name -> `StoreKind`, its opener
and the type of its options (store/kinds.py; each opener is in a module of
its own, store/open_<kind>.py). `open_stores` takes the kind's options by
name, so a setting the kind does not have is refused with ValueError.
`register_store_kind()` adds one at run time.

Migration (`migrate_store`) copies into a fresh `<kind>-store.tmp/` (a kind
whose data is in files writes them unsynced, and syncs them all once the copy
is complete, so that a change at a time does not wait for a sync), checks
that the copy holds as many queues and links (v15 short links, copied with
their queues) as the source, the same services with the same count and ids
hash on each side (docs/protocol.md#services) and, queue by queue, as many messages
(`MigrationCheckError` otherwise, and nothing is switched), renames it into
place, and only then rewrites `STORE_KIND`: a crash at any point leaves the
directory opening as one complete kind. The old kind's files are kept, each
migration's under a name of its own, `<kind>-store.old-<UTC time>/` (`-2`,
`-3`... after it if two migrations share a second): no backup replaces another.
A `progress(phase, done, total)` callback hears about every batch: phase
"queues" counts queues, phase "messages" counts messages.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from .durability import FsyncPolicy, atomic_write, own_temp_suffix, replace_durably, sync_tree
from .interfaces import Message, Party, QueueLinkData, QueueRecord
from .journal import opener as journal_opener
from .kinds import (
    StoreKind,
    StoreOpener,
    StoreOptions,
    Stores,
)
from .memory import opener as memory_opener
from .memory.opener import MESSAGES_SNAPSHOT, QUEUES_SNAPSHOT
from .postgres import opener as postgres_opener
from .sqlite import opener as sqlite_opener

__all__ = [  # the names the rest of the router takes from here
    "KIND_FILE",
    "MESSAGES_SNAPSHOT",
    "MIGRATE_COMMAND",
    "QUEUES_SNAPSHOT",
    "STORE_KINDS",
    "MigrationCheckError",
    "StoreKind",
    "StoreKindMismatch",
    "StoreOpener",
    "StoreOptions",
    "Stores",
    "copy_stores",
    "migrate_store",
    "open_stores",
    "read_store_kind",
    "register_store_kind",
    "store_dir",
    "store_opener",
    "store_options",
]

KIND_FILE = "STORE_KIND"
MIGRATE_COMMAND = "smp-router migrate-store --data-dir {data_dir} --to {kind}"

Progress = Callable[[str, int, int], None]  # (phase, done, total)
SERVICE_PARTIES = (Party.RECIPIENT, Party.NOTIFIER)  # the sides a service covers


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

STORE_KINDS: dict[str, StoreKind[Any]] = {
    "memory": memory_opener.KIND,
    "journal": journal_opener.KIND,
    "sqlite": sqlite_opener.KIND,
    "postgres": postgres_opener.KIND,
}


def register_store_kind(
    kind: str, opener: StoreOpener[Any], options: type[StoreOptions] = StoreOptions
) -> None:
    STORE_KINDS[kind] = StoreKind(opener, options)


def _store_kind(kind: str) -> StoreKind[Any]:
    try:
        return STORE_KINDS[kind]
    except KeyError:
        known = ", ".join(sorted(STORE_KINDS))
        raise ValueError(f"unknown store kind {kind!r} (known: {known})") from None


def store_opener(kind: str) -> StoreOpener[Any]:
    return _store_kind(kind).opener


def store_options(
    kind: str, *, fsync: FsyncPolicy | str = FsyncPolicy.BATCH, **settings: Any
) -> StoreOptions:
    """The options of `kind` from settings by name; ValueError for an unknown kind or setting."""
    return _store_kind(kind).make_options(kind, fsync=fsync, **settings)


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
    kind: str,
    data_dir: Path | str | None,
    options: StoreOptions | None = None,
    *,
    fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
    **settings: Any,
) -> AsyncIterator[Stores]:
    """Open the queue and message stores of `kind` in `data_dir` (None: memory only),
    with `options` (the kind's options type) or, without them, options made
    from `fsync` and `settings` by `store_options`.

    Raises StoreKindMismatch if the directory holds another kind; marks a fresh
    directory with this kind.
    """
    opener = store_opener(kind)
    if options is None:
        options = store_options(kind, fsync=fsync, **settings)
    if data_dir is None:
        async with opener(None, options) as stores:
            yield stores
        return
    data_dir = Path(data_dir)
    found = read_store_kind(data_dir)
    if found is not None and found != kind:
        raise StoreKindMismatch(data_dir, found, kind)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # private: keys and messages
    if found is None:
        _write_store_kind(data_dir, kind)
    async with opener(store_dir(data_dir, kind), options) as stores:
        yield stores


def _write_store_kind(data_dir: Path, kind: str) -> None:
    # The workers of a shared store mark a fresh directory at once.
    atomic_write(data_dir / KIND_FILE, (kind.encode() + b"\n",), temp_suffix=own_temp_suffix())


# --- migration -------------------------------------------------------------------------

MIGRATE_BATCH = 2000  # queues (with their messages) per bulk-import transaction


class Migrated(tuple[int, int]):
    """(queues, messages) copied, and `backups`: where the stores set aside went."""

    backups: tuple[Path, ...]

    def __new__(cls, queues: int, messages: int, backups: tuple[Path, ...] = ()) -> Migrated:
        result = super().__new__(cls, (queues, messages))
        result.backups = backups
        return result


async def migrate_store(
    data_dir: Path | str,
    to_kind: str,
    *,
    fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
    progress: Progress | None = None,
    source_settings: dict[str, Any] | None = None,
    **settings: Any,
) -> Migrated:
    """Copy every queue and message of the directory's current kind into `to_kind`,
    check the counts, and switch the directory over; returns (queues, messages) copied,
    with the backups made.

    `settings` are the new kind's options, `source_settings` the current kind's (a kind
    whose data is not in the directory, postgres, needs them to be found). A destination
    that already holds queues (a database schema used before) is refused."""
    data_dir = Path(data_dir)
    from_kind = read_store_kind(data_dir)
    if from_kind is None:
        raise ValueError(f"{data_dir} holds no store (no {KIND_FILE} file)")
    options = store_options(to_kind, fsync=fsync, **settings)  # fails before touching anything
    if from_kind == to_kind:
        return Migrated(0, 0)
    in_files = _store_kind(to_kind).in_files
    if in_files:
        # Nothing uses the copy before the switch: it is written without a sync per
        # change (a change at a time, into the journal, would wait for one each) and
        # synced once, whole, before the switch.
        options = store_options(to_kind, fsync=FsyncPolicy.NEVER, **settings)
    source_options = store_options(from_kind, **(source_settings or {}))
    final, tmp = store_dir(data_dir, to_kind), data_dir / f"{to_kind}-store.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        async with open_stores(from_kind, data_dir, source_options) as src:
            async with store_opener(to_kind)(tmp, options) as dst:
                if held := await dst.queues.queue_count():
                    raise ValueError(
                        f"the {to_kind} store to migrate into already holds {held} queues "
                        "(name an empty database schema, or empty this one)"
                    )
                counts = await copy_stores(src, dst, progress)
                await check_copy(src, dst, counts)
        if in_files and FsyncPolicy.parse(fsync) is not FsyncPolicy.NEVER:
            await trio.to_thread.run_sync(sync_tree, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a copy that failed is no store
        raise
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    stale = _set_aside(final, data_dir, f"{to_kind}-store.old-{stamp}")
    replace_durably(tmp, final)
    _write_store_kind(data_dir, to_kind)
    old = _set_aside(store_dir(data_dir, from_kind), data_dir, f"{from_kind}-store.old-{stamp}")
    return Migrated(*counts, tuple(p for p in (old, stale) if p is not None))


def _set_aside(path: Path, data_dir: Path, name: str) -> Path | None:
    """Move `path` to `data_dir/name`, or `name-2`, `name-3`...: never over a backup."""
    if not path.exists():
        return None
    backup, n = data_dir / name, 1
    while backup.exists():
        n += 1
        backup = data_dir / f"{name}-{n}"
    replace_durably(path, backup)
    return backup


async def copy_stores(
    src: Stores, dst: Stores, progress: Progress | None = None
) -> tuple[int, int]:
    """Copy every service, every queue, then every message, from `src` into `dst`;
    returns the counts of queues and messages. A queue's record names the services its
    sides are associated with (docs/protocol.md#services), so the destination's counts
    and ids hashes follow from the records it stores. A kind with a bulk export of its
    own (postgres: binary COPY) is read through it."""
    report = progress or _no_progress
    async for service in src.queues.iter_services():
        stored = await dst.queues.add_service(service)
        if stored != service:
            raise MigrationCheckError(
                f"service {service.service_id.hex()}: the destination holds another record "
                "for its certificate and role"
            )
    n_queues = n_messages = 0
    total = await src.queues.queue_count()
    report("queues", 0, total)
    queue_pages = (src.bulk_export.queue_pages() if src.bulk_export is not None
                   else _queue_pages(src))
    async for page in queue_pages:
        links = {rec.recipient_id: link for rec, link in page if link is not None}
        n_queues += await _put_queues(dst, [rec for rec, _ in page], links)
        report("queues", n_queues, total)
    if src.bulk_export is not None:
        total = await src.bulk_export.message_count()
        message_pages = src.bulk_export.message_pages()
    else:
        rids = [rid async for rid in src.messages.queue_ids()]
        total = 0
        for rid in rids:
            total += await src.messages.queue_size(rid)
        message_pages = _message_pages(src, rids)
    report("messages", 0, total)
    async for messages in message_pages:
        n_messages += await _put_messages(dst, messages)
        report("messages", n_messages, total)
    return n_queues, n_messages


async def _queue_pages(
    src: Stores,
) -> AsyncIterator[list[tuple[QueueRecord, QueueLinkData | None]]]:
    """The source's queues with their links, MIGRATE_BATCH at a time."""
    page: list[tuple[QueueRecord, QueueLinkData | None]] = []
    async for rec in src.queues.iter_queues():
        link = None
        if rec.link_id is not None:
            link = await src.queues.get_link(rec.recipient_id)
            if link is None or link.link_id != rec.link_id:
                raise MigrationCheckError(f"queue {rec.recipient_id.hex()}: its link is missing")
        page.append((rec, link))
        if len(page) >= MIGRATE_BATCH:
            yield page
            page = []
    if page:
        yield page


async def _message_pages(
    src: Stores, rids: list[bytes]
) -> AsyncIterator[list[tuple[bytes, Message]]]:
    """The messages of the queues `rids`, whole queues of them at a time."""
    pending: list[tuple[bytes, Message]] = []
    for rid in rids:
        async for m in src.messages.iter_messages(rid):
            pending.append((rid, m))
        if len(pending) >= MIGRATE_BATCH:
            yield pending
            pending = []
    if pending:
        yield pending


async def check_copy(src: Stores, dst: Stores, counts: tuple[int, int]) -> None:
    """Raise MigrationCheckError unless `dst` holds every queue and message of `src`."""
    n_queues, n_messages = counts
    src_queues, dst_queues = await src.queues.queue_count(), await dst.queues.queue_count()
    if not src_queues == dst_queues == n_queues:
        raise MigrationCheckError(
            f"queue count check failed: source {src_queues}, copied {n_queues}, "
            f"destination {dst_queues}"
        )
    src_links, dst_links = await _link_count(src), await _link_count(dst)
    if src_links != dst_links:
        raise MigrationCheckError(
            f"link count check failed: source {src_links}, destination {dst_links}"
        )
    await _check_services(src, dst)
    found = 0
    async for rids in _batches(src.messages.queue_ids()):
        wanted, got = await _queue_sizes(src, rids), await _queue_sizes(dst, rids)
        for rid, want, size in zip(rids, wanted, got, strict=True):
            if want != size:
                raise MigrationCheckError(
                    f"message count check failed for queue {rid.hex()}: source {want}, "
                    f"destination {size}"
                )
        found += sum(got)
    if found != n_messages:
        raise MigrationCheckError(
            f"message count check failed: copied {n_messages}, destination {found}"
        )


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


async def _check_services(src: Stores, dst: Stores) -> None:
    """The same service records, and for each the same count and ids hash on both sides."""
    src_services = {s.service_id: s async for s in src.queues.iter_services()}
    dst_services = {s.service_id: s async for s in dst.queues.iter_services()}
    if src_services != dst_services:
        raise MigrationCheckError(
            f"service check failed: source {len(src_services)} services, "
            f"destination {len(dst_services)}, or their records differ"
        )
    for service_id in src_services:
        for party in SERVICE_PARTIES:
            want = await src.queues.service_summary(service_id, party)
            got = await dst.queues.service_summary(service_id, party)
            if want != got:
                raise MigrationCheckError(
                    f"service check failed for {service_id.hex()} ({party.name.lower()}): "
                    f"source {want.count} queues, destination {got.count}"
                    + ("" if want.count != got.count else ", their ids hashes differ")
                )


async def _batches(ids: AsyncIterator[bytes]) -> AsyncIterator[list[bytes]]:
    batch: list[bytes] = []
    async for entity_id in ids:
        batch.append(entity_id)
        if len(batch) >= MIGRATE_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


async def _queue_sizes(stores: Stores, rids: list[bytes]) -> list[int]:
    """The message counts of the queues `rids`: in one read where the kind has one."""
    if stores.bulk_export is not None:
        return await stores.bulk_export.queue_sizes(rids)
    return [await stores.messages.queue_size(rid) for rid in rids]


async def _link_count(stores: Stores) -> int:
    return sum([1 async for _ in stores.queues.iter_links()])


async def _put_queues(
    dst: Stores, records: list[QueueRecord], links: dict[bytes, QueueLinkData]
) -> int:
    if dst.bulk_import is not None:
        await dst.bulk_import(records, [], list(links.items()))
        return len(records)
    for rec in records:
        error = await dst.queues.add_queue(rec, links.get(rec.recipient_id))
        if error is not None:
            raise ValueError(f"queue {rec.recipient_id.hex()} could not be copied: {error}")
    return len(records)


async def _put_messages(dst: Stores, messages: list[tuple[bytes, Message]]) -> int:
    if dst.bulk_import is not None:
        await dst.bulk_import([], messages, [])
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
