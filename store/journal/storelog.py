"""The store log: queue records in memory, every change appended to a text file.

Theory of operation. The file is a sequence of typed records, one per line
(`create`, `secure`, `add_notifier`, `delete_notifier`, `suspend`,
`set_service`, `set_link`, `delete_link`, `set_recipient_keys`, `delete`; the format is
store/journal/storelog_format.py and docs/store-log.md). The state is a pure
fold over them: `replay(records)` starts from no queues and applies `step` to
each (store/queue_table.py), and `step` is the only code that ever changes the
live table, so the router's state is, at every moment, the replay of its own
log. This module holds the files (recovery, compaction, backups) and the store
that appends to them.

A change is validated against the table, appended (write + flush to the OS),
applied, and then made as durable as the fsync policy says; validation, append
and apply run without a checkpoint, so concurrent tasks see changes atomically.

At every open the log is compacted: the current state, one `create` line per
queue, replaces the file through this sequence (each step is safe to crash in):

  1. write the snapshot to `queues.log.new` and fsync it;
  2. rename `queues.log` to the backup `queues.<UTC time>.log`;
  3. rename `queues.log.new` to `queues.log`;
  4. fsync the directory;
  5. delete the oldest backups beyond the newest `backups`.

Recovery at open: `.new` beside the log means step 1 did not finish (the log
is intact; `.new` is deleted); `.new` without the log means step 2 finished
and step 3 did not (`.new` is complete and fsynced; it is renamed into place).
"""

from __future__ import annotations

import os
import re
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import trio

from ..durability import (
    FsyncPolicy,
    GroupCommit,
    atomic_write,
    fsync_dir,
    io_error,
    replace_durably,
    write_all,
    write_synced,
)
from ..interfaces import StoreError
from ..kinds import closing_opener
from ..queue_table import AddService, CreateQueue, LogRecord, QueueTable, TableQueueStore
from .logfile import LogCorruptError, encode_line, iter_log, log
from .storelog_format import (
    compact_records,
    decode_record,
    encode_record,
    snapshot_changes,
    snapshot_lines,
)

__all__ = [  # the records and the fold are in store/queue_table.py
    "FsyncPolicy",
    "LogCorruptError",
    "StoreError",
    "StoreLogError",
    "StoreLogQueueStore",
    "backups_of",
    "compact_file",
    "compact_records",
    "decode_record",
    "encode_record",
    "open_log",
    "iter_snapshot_lines",
    "open_store_log",
    "recover_files",
    "snapshot_lines",
]


class StoreLogError(Exception):
    """The log's files are in a state no crash of ours can leave (e.g. the log is gone)."""


# --- files: recovery, compaction, backups -----------------------------------------------


def _new_path(path: Path) -> Path:
    return path.with_name(path.name + ".new")


def _backup_pattern(path: Path) -> re.Pattern[str]:
    stem, suffix = re.escape(path.stem), re.escape(path.suffix)
    return re.compile(rf"{stem}\.[0-9]{{8}}T[0-9]{{12}}Z{suffix}")


def backups_of(path: Path) -> list[Path]:
    """The log's backups, oldest first."""
    pattern = _backup_pattern(path)
    names = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    return sorted(names, key=lambda p: p.name)


def _backup_path(path: Path) -> Path:
    now = datetime.now(UTC)
    while True:
        candidate = path.with_name(f"{path.stem}.{now:%Y%m%dT%H%M%S%f}Z{path.suffix}")
        if not candidate.exists():
            return candidate
        now += timedelta(microseconds=1)  # two compactions within one microsecond: keep order


def recover_files(path: Path) -> None:
    """Finish or undo a compaction that a crash interrupted (see the module comment)."""
    new = _new_path(path)
    if path.exists():
        if new.exists():
            log.warning("%s: removing an unfinished compaction", new)
            new.unlink()
    elif new.exists():
        log.warning("%s: completing an interrupted compaction", path)
        replace_durably(new, path)
    elif backups_of(path):
        raise StoreLogError(
            f"{path} is missing but backups of it exist; restore the newest backup "
            f"({backups_of(path)[-1].name}) as {path.name} to start"
        )


def compact_file(path: Path, lines: Iterable[str], backups: int) -> None:
    """Replace the log with `lines` through the numbered steps of the module comment."""
    new = _new_path(path)
    write_synced(new, (line.encode("ascii") + b"\n" for line in lines))  # 1
    os.rename(path, _backup_path(path))  # 2
    os.rename(new, path)  # 3
    fsync_dir(path.parent)  # 4
    prune_backups(path, backups)  # 5


def prune_backups(path: Path, keep: int) -> None:
    old = backups_of(path)
    for backup in old[: max(0, len(old) - keep)]:
        backup.unlink()


def open_log(path: Path, *, backups: int, skip_corrupt: bool) -> QueueTable:
    """Recover, read and compact the log at `path` (blocking); returns its state.

    Streams: the log is read a chunk at a time and folded as it is read, and
    the snapshot is written one line at a time, so the memory this takes is
    that of the live queues, whatever the length of the log.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_files(path)
    if not path.exists():
        atomic_write(path, ())
        return QueueTable()
    table, compacted = _replay_file(path, skip_corrupt)
    services = 0 if table.services is None else len(table.services.by_id)
    if compacted and len(table.queues) + services == compacted:
        prune_backups(path, backups)  # the log is already its own snapshot
    else:
        try:
            compact_file(path, iter_snapshot_lines(table), backups)
        except OSError as e:
            if not path.exists():
                raise  # between the renames: the next start completes it (recover_files)
            # A full disk: the log as it is holds the same state (its torn tail, if any,
            # is cut off already), so the start goes on without compacting it.
            _new_path(path).unlink(missing_ok=True)
            log.warning("%s: not compacted at start: %s", path, e.strerror or e)
    return table


def _replay_file(path: Path, skip_corrupt: bool) -> tuple[QueueTable, int]:
    """The log's state, and its line count if the log is exactly a snapshot (else 0).

    A log is its own snapshot when every line is a `create` or an `add_service`
    in canonical form (what `encode_record` writes), in strictly increasing
    order, and no two create the same queue or service (the caller compares the
    count with the table's).
    Checking that while reading spares a second pass over the file.
    """
    table = QueueTable()
    canonical = True
    previous = b""
    count = 0
    for rec, line in iter_log(path, decode_record, skip_corrupt=skip_corrupt):
        if rec is None:  # a skipped corrupt line: the log must be rewritten
            canonical = False
            continue
        if canonical:
            canonical = (
                isinstance(rec, (CreateQueue, AddService))
                and line > previous
                and encode_line(encode_record(rec))[:-1] == line
            )
            previous = line
        table.apply(rec)
        count += 1
    return table, count if canonical else 0


def iter_snapshot_lines(table: QueueTable) -> Iterator[str]:
    """`snapshot_lines(table)` one line at a time: the same lines in the same order.

    Sorting the lines themselves would hold the whole snapshot in memory. The
    lines start with their checksum in fixed-width lowercase hex, so they sort
    by checksum first; only the rare lines that share one are compared whole.
    """
    records = snapshot_changes(table)
    crcs = array("L", map(_snapshot_crc, records))
    order = sorted(range(len(records)), key=crcs.__getitem__)
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and crcs[order[j]] == crcs[order[i]]:
            j += 1
        group = [_snapshot_line(records[k]) for k in order[i:j]]
        yield from sorted(group) if len(group) > 1 else group
        i = j


def _snapshot_line(change: LogRecord) -> str:
    return encode_line(encode_record(change))[:-1].decode("ascii")


def _snapshot_crc(change: LogRecord) -> int:
    return zlib.crc32(encode_record(change).encode("ascii"))


# --- the store -------------------------------------------------------------------------


class StoreLogQueueStore(TableQueueStore):
    """A QueueStore kept in memory and made durable by its append-only store log."""

    def __init__(
        self,
        path: Path,
        table: QueueTable,
        fd: int,
        *,
        fsync: FsyncPolicy,
        window: float,
        clock: Callable[[], float],
    ) -> None:
        self._path = path
        self._table = table
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._policy = fsync
        self._clock = clock
        self._closed = False
        self._group = GroupCommit(self._fsync, window if fsync is FsyncPolicy.BATCH else 0.0)
        if fsync is not FsyncPolicy.NEVER:
            self._durable = self._group.wait

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
        backups: int = 5,
        skip_corrupt: bool = False,
        window: float = 0.002,
        clock: Callable[[], float] = time.time,
    ) -> StoreLogQueueStore:
        """Recover and compact the log at `path` (created if missing) and open it for appends.

        Raises LogCorruptError for a corrupt line before the last one (unless
        `skip_corrupt`) and StoreLogError for files no crash can leave.
        """
        path = Path(path)
        table = await trio.to_thread.run_sync(
            lambda: open_log(path, backups=backups, skip_corrupt=skip_corrupt)
        )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        return cls(path, table, fd, fsync=FsyncPolicy.parse(fsync), window=window, clock=clock)

    # --- QueueStore ---------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._policy is not FsyncPolicy.NEVER:
                await self._group.wait(hurry=True)  # covers every change made before
        finally:
            os.close(self._fd)

    # --- appending ---------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    def _record(self, rec: LogRecord) -> None:
        """Append `rec` (written to the OS); the table applies it next, then `_durable`
        waits until it is as durable as the policy says."""
        if self._closed:
            raise trio.ClosedResourceError("the queue store is closed")
        line = encode_line(encode_record(rec))
        try:
            write_all(self._fd, line)
        except OSError as exc:
            self._cut_back()
            raise io_error(exc, f"appending to {self._path}") from exc
        self._size += len(line)

    def _cut_back(self) -> None:
        """Remove a partly written line, so the log ends with the last whole change."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as exc:  # the next open drops the torn line instead
            log.error("%s: cannot remove a partly written line: %s", self._path, exc)

    async def _fsync(self) -> None:
        try:
            await trio.to_thread.run_sync(os.fsync, self._fd)
        except OSError as exc:
            # The change stays applied: the OS holds it and a later fsync may
            # still make it durable; the caller learns that this one did not.
            raise io_error(exc, f"fsync of {self._path}") from exc


# `StoreLogQueueStore.open(path, ...)`, closed on exit.
open_store_log = closing_opener(StoreLogQueueStore.open)
