"""Moving a stopped router's queues to another count of workers
(`smp-router workers-move`, docs/workers.md#another-count-of-workers).

A queue's worker is a function of its ids and the count (core/ownership.py), and
ids cannot change: under the new count a queue's ids may name different workers.
Each queue goes to one *home*, the worker most of its ids (recipient, sender,
notifier) name under the new count (the recipient id's on a tie); the ids that
name another worker are written to the owner exceptions (owner_exceptions.py).
Link ids need none: a link's commands are asked of every worker.

The embedded stores (memory snapshot, journal, SQLite) are read share by share (or
the one store of one process) and each queue, with its link, its messages and its
blocked mark, is written to its home's new share; every service record goes to
every share, so that each worker finds the certificate's one id. The new layout is
built in `DIR/workers-move.tmp/`, checked (queues and each queue's messages
counted), synced, then switched in: the old shares are kept whole in
`DIR/workers-N.old-<UTC time>/`. The postgres store is shared, and its workers
keep the data directory itself (layout.py): nothing is copied, its queues' ids are
read for the exceptions, and the count recorded.

The switch is a few renames; `MOVE_MARK` names them before the first, so a start
in between is refused and the command run again finishes them.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import trio

from store import MigrationCheckError, Stores, open_stores, read_store_kind, store_options
from store.durability import FsyncPolicy, atomic_write, fsync_dir, replace_durably, sync_tree
from store.factory import KIND_FILE, store_dir, store_opener
from store.interfaces import QueueRecord, ServiceRecord

from ..core.blocked import BLOCKED_FILE, BlockedQueues
from ..core.ownership import Ownership
from ..settings.config import ConfigError
from .layout import (
    MOVE_MARK,
    SHARED_STORES,
    WORKERS_FILE,
    moving_to,
    recorded_workers,
    worker_dir,
)
from .owner_exceptions import OWNER_EXCEPTIONS_FILE, write_owner_exceptions

MOVE_TMP = "workers-move.tmp"

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True, slots=True)
class Moved:
    queues: int
    messages: int
    exceptions: int
    backup: Path | None  # where the old shares are kept (None: nothing was moved)


def found_workers(data_dir: Path) -> int:
    """The count of workers the directory's queues are kept for (1: one process's)."""
    return recorded_workers(data_dir) or 1


def home_of(record: QueueRecord, ownership: Ownership) -> int:
    """The worker most of the queue's ids name; the recipient id's on a tie."""
    ids = [record.recipient_id, record.sender_id]
    if record.notifier is not None:
        ids.append(record.notifier.notifier_id)
    owners = [ownership.owner_of(i) for i in ids]
    return max(owners, key=lambda w: (owners.count(w), w == owners[0]))


def exceptions_of(record: QueueRecord, home: int, ownership: Ownership) -> list[bytes]:
    ids = [record.recipient_id, record.sender_id]
    if record.notifier is not None:
        ids.append(record.notifier.notifier_id)
    return [i for i in ids if ownership.owner_of(i) != home]


def _shares(data_dir: Path, workers: int) -> list[Path]:
    return [data_dir] if workers == 1 else [worker_dir(data_dir, i) for i in range(workers)]


def _share_names(workers: int, kind: str | None) -> list[str]:
    """What a layout of `workers` keeps directly in the data directory."""
    if workers > 1:
        return [worker_dir(Path(), i).name for i in range(workers)]
    return [KIND_FILE, BLOCKED_FILE] + ([store_dir(Path(), kind).name] if kind else [])


def _kind_of(shares: list[Path]) -> str | None:
    kinds = {k for k in (read_store_kind(share) for share in shares) if k is not None}
    if len(kinds) > 1:
        raise ConfigError(f"the shares hold different store kinds: {', '.join(sorted(kinds))}")
    return kinds.pop() if kinds else None


async def move_workers(
    data_dir: Path, to_workers: int, *, progress: Progress | None = None,
    settings: dict[str, Any] | None = None, fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
) -> Moved:
    """Move the directory's queues to `to_workers` workers (the directory's lock held
    by the caller). `settings`: the postgres store's (where its database is), if it
    is one; the embedded kinds need none."""
    if to_workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {to_workers}")
    if (moving := moving_to(data_dir)) is not None:
        if moving != to_workers:
            raise ConfigError(f"data directory {data_dir} is in the middle of a move to "
                              f"{moving} workers: finish it first (--workers {moving})")
        return _finish_switch(data_dir)
    from_workers = found_workers(data_dir)
    if from_workers == to_workers:
        return Moved(0, 0, 0, None)
    report = progress or (lambda phase, done, total: None)
    if (shared_kind := read_store_kind(data_dir)) in SHARED_STORES:
        return await _move_shared(data_dir, shared_kind, from_workers, to_workers, report,
                                  settings or {})
    sources = _shares(data_dir, from_workers)
    kind = _kind_of(sources)
    tmp = data_dir / MOVE_TMP
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    targets = _shares(tmp, to_workers)
    ownership = Ownership(to_workers)
    exceptions: dict[bytes, int] = {}
    try:
        counts = (0, 0)
        if kind is not None:
            counts = await _copy(kind, sources, targets, ownership, exceptions, report, fsync)
        if kind is not None and FsyncPolicy.parse(fsync) is not FsyncPolicy.NEVER:
            await trio.to_thread.run_sync(sync_tree, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    backup = _backup_dir(data_dir, from_workers)
    write_owner_exceptions(tmp, to_workers, exceptions)
    mark = {
        "from": from_workers, "to": to_workers, "backup": backup.name,
        "old": [*_share_names(from_workers, kind), OWNER_EXCEPTIONS_FILE],
        "new": sorted(p.name for p in tmp.iterdir()),
        "queues": counts[0], "messages": counts[1], "exceptions": len(exceptions),
    }
    atomic_write(data_dir / MOVE_MARK, (json.dumps(mark).encode(),))
    return _finish_switch(data_dir)


def _backup_dir(data_dir: Path, from_workers: int) -> Path:
    """`workers-N.old-<UTC time>`, or `-2`, `-3`... after it: never over a backup."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup, n = data_dir / f"workers-{from_workers}.old-{stamp}", 1
    while backup.exists():
        n += 1
        backup = data_dir / f"workers-{from_workers}.old-{stamp}-{n}"
    return backup


def _finish_switch(data_dir: Path) -> Moved:
    """The renames the mark names, each done once whatever was done before a crash."""
    mark = json.loads((data_dir / MOVE_MARK).read_text())
    tmp, backup = data_dir / MOVE_TMP, data_dir / mark["backup"]
    backup.mkdir(mode=0o700, exist_ok=True)
    for name in mark["old"]:
        # A name of both layouts is the old one's while the new one waits in tmp.
        if (data_dir / name).exists() and (name not in mark["new"] or (tmp / name).exists()):
            replace_durably(data_dir / name, backup / name)
    for name in mark["new"]:
        if (tmp / name).exists():
            replace_durably(tmp / name, data_dir / name)
    if mark["to"] > 1:
        atomic_write(data_dir / WORKERS_FILE, (f"{mark['to']}\n".encode(),))
    else:
        (data_dir / WORKERS_FILE).unlink(missing_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    (data_dir / MOVE_MARK).unlink()
    fsync_dir(data_dir)
    return Moved(mark["queues"], mark["messages"], mark["exceptions"], backup)


async def _copy(kind: str, sources: list[Path], targets: list[Path], ownership: Ownership,
                exceptions: dict[bytes, int], report: Progress,
                fsync: FsyncPolicy | str) -> tuple[int, int]:
    """Every queue of `sources` into its home's share of `targets`; (queues, messages).
    Written unsynced (the caller syncs the whole copy once, before the switch)."""
    source_options = store_options(kind, fsync=fsync)
    target_options = store_options(kind, fsync=FsyncPolicy.NEVER)
    blocked = [BlockedQueues(share) for share in targets]
    n_queues = n_messages = 0
    async with AsyncExitStack() as stack:
        srcs: list[Stores] = []
        for share in sources:
            if read_store_kind(share) is not None:
                srcs.append(await stack.enter_async_context(
                    open_stores(kind, share, source_options)))
        dsts: list[Stores] = []
        for share in targets:
            share.mkdir(mode=0o700, exist_ok=True)
            atomic_write(share / KIND_FILE, (kind.encode() + b"\n",))
            dsts.append(await stack.enter_async_context(
                store_opener(kind)(store_dir(share, kind), target_options)))
        service_ids = await _copy_services(srcs, dsts)
        total = sum([await src.queues.queue_count() for src in srcs])
        report("queues", 0, total)
        homes: dict[bytes, int] = {}
        for src in srcs:
            async for record in src.queues.iter_queues():
                home = homes[record.recipient_id] = home_of(record, ownership)
                for entity_id in exceptions_of(record, home, ownership):
                    exceptions[entity_id] = home
                n_messages += await _copy_queue(src, dsts[home], record, service_ids)
                n_queues += 1
                if n_queues % 500 == 0 or n_queues == total:
                    report("queues", n_queues, total)
        reasons: list[dict[bytes, str]] = [{} for _ in targets]
        for share in sources:
            for rid, reason in BlockedQueues(share).reasons.items():
                reasons[homes.get(rid, ownership.owner_of(rid))][rid] = reason
        for marks, share_reasons in zip(blocked, reasons, strict=True):
            if share_reasons:
                marks.add_many(share_reasons)
        held = sum([await dst.queues.queue_count() for dst in dsts])
        if held != n_queues:
            raise MigrationCheckError(
                f"queue count check failed: copied {n_queues}, the new shares hold {held}")
    return n_queues, n_messages


async def _move_shared(data_dir: Path, kind: str, from_workers: int, to_workers: int,
                       report: Progress, settings: dict[str, Any]) -> Moved:
    """A store every worker shares: only the exceptions change, and the count. The
    table is written first, for the new count: until the count is, a start of the
    old one refuses it (owner_exceptions.py) rather than misroutes."""
    ownership = Ownership(to_workers)
    exceptions: dict[bytes, int] = {}
    n_queues = 0
    async with open_stores(kind, data_dir, store_options(kind, **settings)) as stores:
        total = await stores.queues.queue_count()
        report("queues", 0, total)
        async for record in stores.queues.iter_queues():
            home = home_of(record, ownership)
            for entity_id in exceptions_of(record, home, ownership):
                exceptions[entity_id] = home
            n_queues += 1
            if n_queues % 500 == 0 or n_queues == total:
                report("queues", n_queues, total)
    backup = _backup_dir(data_dir, from_workers)
    backup.mkdir(mode=0o700)
    if (data_dir / OWNER_EXCEPTIONS_FILE).exists():
        shutil.copy2(data_dir / OWNER_EXCEPTIONS_FILE, backup / OWNER_EXCEPTIONS_FILE)
    if (data_dir / WORKERS_FILE).exists():
        shutil.copy2(data_dir / WORKERS_FILE, backup / WORKERS_FILE)
    write_owner_exceptions(data_dir, to_workers, exceptions)
    if to_workers > 1:
        atomic_write(data_dir / WORKERS_FILE, (f"{to_workers}\n".encode(),))
    else:
        (data_dir / WORKERS_FILE).unlink(missing_ok=True)
    fsync_dir(data_dir)
    return Moved(n_queues, 0, len(exceptions), backup)


async def _copy_services(srcs: list[Stores], dsts: list[Stores]) -> dict[bytes, bytes]:
    """Every service into every new share, one record per certificate and role;
    returns the ids replaced (a certificate two shares knew under two ids)."""
    kept: dict[tuple[bytes, bytes], ServiceRecord] = {}
    replaced: dict[bytes, bytes] = {}
    for src in srcs:
        async for service in src.queues.iter_services():
            first = kept.setdefault((service.role, service.cert_hash), service)
            if first.service_id != service.service_id:
                replaced[service.service_id] = first.service_id
    for dst in dsts:
        for service in kept.values():
            await dst.queues.add_service(service)
    return replaced


async def _copy_queue(src: Stores, dst: Stores, record: QueueRecord,
                      service_ids: dict[bytes, bytes]) -> int:
    """The queue, its link and its messages; returns how many messages."""
    link = None
    if record.link_id is not None:
        link = await src.queues.get_link(record.recipient_id)
        if link is None:
            raise MigrationCheckError(f"queue {record.recipient_id.hex()}: its link is missing")
    if service_ids:
        record = replace(
            record,
            rcv_service_id=service_ids.get(record.rcv_service_id, record.rcv_service_id),
            ntf_service_id=service_ids.get(record.ntf_service_id, record.ntf_service_id))
    error = await dst.queues.add_queue(record, link)
    if error is not None:
        raise MigrationCheckError(f"queue {record.recipient_id.hex()} could not be moved: {error}")
    size = 0
    async for message in src.messages.iter_messages(record.recipient_id):
        # A quota equal to the size stored makes the store append exactly this marker;
        # one above it stores the message itself.
        await dst.messages.write_message(record.recipient_id, message,
                                         size if message.quota else size + 1)
        size += 1
    if (held := await dst.messages.queue_size(record.recipient_id)) != size:
        raise MigrationCheckError(f"message count check failed for queue "
                                  f"{record.recipient_id.hex()}: source {size}, moved {held}")
    return size


