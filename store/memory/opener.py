"""The "memory" store kind: memory stores, kept across a clean stop in snapshot files.

With a data directory, a run holds `snapshot.reserve`: room on disk for the
snapshot it writes at stop, grown before each SEND or NEW is answered
(`SaveReserve`), so a full disk refuses the command rather than the save. The
file exists from the start of a run until its save is complete: a start that
finds it knows the last run did not save (it was killed, or its snapshot
failed) and refuses with one line naming it, unless `after_failed_save` says to
start from the last complete save.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ..durability import fsync_dir, replace_durably
from ..kinds import StoreKind, StoreOptions, Stores
from .stores import MemoryMessageStore, MemoryQueueStore, SaveReserve, SnapshotError

log = logging.getLogger(__name__)

QUEUES_SNAPSHOT = "queues.snapshot"
MESSAGES_SNAPSHOT = "messages.snapshot"
SAVE_RESERVE = "snapshot.reserve"
LOADED = ".loaded"  # the suffix of a snapshot read at start, kept until the next save


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryOptions(StoreOptions):
    """The memory kind, with a data directory: snapshots at stop."""

    # Start although the last run did not finish saving (it was killed, or its
    # snapshot failed): from the last complete save, losing what came after it.
    after_failed_save: bool = False


class UnsavedStateError(SnapshotError):
    """The last run did not finish saving; starting would silently lose what it held."""


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
    after_failed_save = isinstance(options, MemoryOptions) and options.after_failed_save
    reserve_path = store_dir / SAVE_RESERVE
    if reserve_path.exists() and not after_failed_save:
        raise UnsavedStateError(
            f"{reserve_path}: the last run did not finish saving the memory store (it was "
            "killed, or its snapshot failed); start with --after-failed-save to start from "
            "the last complete save, losing what came after it"
        )
    qfile, mfile = store_dir / QUEUES_SNAPSHOT, store_dir / MESSAGES_SNAPSHOT
    qsource, msource = _source(qfile, after_failed_save), _source(mfile, after_failed_save)
    queues = MemoryQueueStore.load(qsource) if qsource else MemoryQueueStore()
    messages = MemoryMessageStore.load(msource) if msource else MemoryMessageStore()
    # A loaded snapshot is set aside: after a crash, the next start must not bring
    # back messages already delivered or queues already deleted (unless told to).
    for file in (qfile, mfile):
        if file.exists():
            replace_durably(file, _loaded(file))
    reserve = SaveReserve(reserve_path, queues, messages)
    try:
        reserve.room_for(0)
    except Exception as e:  # noqa: BLE001 - a full disk: start, refusing what needs room
        log.warning("%s; SENDs and NEWs are refused until there is room", e)
    fsync_dir(store_dir)  # the reserve's file (this run's mark) is there for good
    queues.reserve, messages.reserve = reserve, reserve
    try:
        yield Stores("memory", queues, messages, store_dir)
    finally:
        queues.reserve = messages.reserve = None
        reserve.file.release()  # its room is the snapshot's
        # Messages first: a crash between the two leaves old queues, never orphaned ones lost.
        messages.save(mfile)
        queues.save(qfile)
        for file in (qfile, mfile):
            _loaded(file).unlink(missing_ok=True)
        reserve.file.remove()
        fsync_dir(store_dir)


def _loaded(file: Path) -> Path:
    return file.with_name(file.name + LOADED)


def _source(file: Path, after_failed_save: bool) -> Path | None:
    """The snapshot to start from: the file, or after a failed save the one it replaced."""
    if file.exists():
        return file
    if after_failed_save and _loaded(file).exists():
        return _loaded(file)
    return None


KIND = StoreKind(open_memory_stores, MemoryOptions)
