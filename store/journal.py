"""Journal message store: per-queue append-only message files and a state log.

Theory of operation (file formats: docs/store-log.md).

Files, all in the store's directory:

    <rid hex>.<seq>.msgs   one queue's messages in order; seq counts up from 0
    state.log              checksummed lines: a queue's read and write positions

A queue's undelivered messages run from its read position (rseq, rpos) to its
write position (wseq, wpos), through files rseq..wseq. After `rotate_after`
messages the writer starts the next file; a file the reader has left is
deleted. The state log's last line for a queue is that queue's position; a
line `<rid> -` forgets the queue (it is empty and its files are gone).

A write appends the record to the queue's file (written and flushed to the
OS) and is *pending*: counted for the quota, not yet visible. A commit then
makes it durable in this order: fsync the data files, append a state line
recording the new write position, fsync the state log; only then are the
messages visible and their writers answered. With `batch` one commit (a
group commit) covers every write of a short window; with `always` commits run
back to back; with `never` a write commits at once and nothing is fsynced.
Deletes append a state line at once (fsynced first only with `always`).

So the state log never points at data that is not on disk, and recovery is:
take each queue's last state line, check the records from its read to its
write position (a CRC per record) and truncate everything after the last good
one (a torn or uncommitted tail). Files outside rseq..wseq, and files of
queues with no state, are deleted; then the state log is compacted (one line
per non-empty queue, written to `state.log.new`, fsynced and renamed over).

Failures. A failed write (ENOSPC, EIO) removes its partial record and raises
StoreError; a failed fsync or state append rolls the affected queues back to
their last commit (their pending writers get StoreError). Either way nothing
is recorded as written that is not, and the next write may succeed.

File handles: an LRU of at most `max_open_files`; a handle with a write
waiting for its fsync is never closed. An empty queue whose file handle is
evicted is forgotten (state line `-`, file deleted), so idle empty queues cost
nothing.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from router.protocol.types import INTERNAL, store_error

from ._logfile import (
    FsyncPolicy,
    GroupCommit,
    encode_line,
    fsync_dir,
    io_error,
    log,
    read_log,
    write_all,
)
from .factory import StoreOptions, Stores
from .interfaces import Message, StoreError, WriteResult
from .storelog import open_store_log

__all__ = [
    "FsyncPolicy",
    "JournalMessageStore",
    "JournalStatistics",
    "decode_message",
    "encode_message",
    "open_journal",
    "open_journal_stores",
]

# --- message records ---------------------------------------------------------------
#
# record  = u32 length of payload | u32 CRC-32 of payload | payload   (big endian)
# payload = kind ('M' message, 'Q' QUOTA marker) | u8 n | msg_id (n bytes) | i64 ts
#           | u16 m | flags (m bytes) | body (the rest)

_HEADER = struct.Struct(">II")
_META = struct.Struct(">qH")
_MAX_PAYLOAD = 1 << 24  # far above any SMP message: a larger length is damage
_KIND_MESSAGE, _KIND_QUOTA = ord("M"), ord("Q")


def encode_message(m: Message) -> bytes:
    """A message's record, header included."""
    payload = b"".join(
        (
            bytes((_KIND_QUOTA if m.quota else _KIND_MESSAGE, len(m.msg_id))),
            m.msg_id,
            _META.pack(m.ts, len(m.flags)),
            m.flags,
            m.body,
        )
    )
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _meta(payload: bytes) -> tuple[bool, bytes, int, int]:
    """(quota, msg_id, ts, offset of flags) of a payload; ValueError if malformed."""
    if len(payload) < 2 or payload[0] not in (_KIND_MESSAGE, _KIND_QUOTA):
        raise ValueError("unknown record kind")
    n = payload[1]
    if len(payload) < 2 + n + _META.size:
        raise ValueError("record too short")
    ts, m = _META.unpack_from(payload, 2 + n)
    start = 2 + n + _META.size
    if len(payload) < start + m:
        raise ValueError("flags run past the record")
    return payload[0] == _KIND_QUOTA, payload[2 : 2 + n], ts, start


def decode_message(record: bytes) -> Message:
    """The message of one whole record; ValueError if it is torn or corrupt."""
    if len(record) < _HEADER.size:
        raise ValueError("record too short")
    n, crc = _HEADER.unpack_from(record)
    payload = record[_HEADER.size :]
    if len(payload) != n or zlib.crc32(payload) != crc:
        raise ValueError("record checksum mismatch")
    quota, msg_id, ts, start = _meta(payload)
    m = _META.unpack_from(payload, start - _META.size)[1]
    return Message(msg_id, ts, payload[start : start + m], payload[start + m :], quota)


# --- positions and the state log ------------------------------------------------------

_INT = re.compile(r"[0-9]+")
_FILE = re.compile(r"([0-9a-f]+)\.([0-9]+)\.msgs")


@dataclass(frozen=True, slots=True, order=True)
class Pos:
    """A place in a queue's files: file number, byte offset, messages in that file before it."""

    seq: int
    offset: int
    count: int = field(default=0, compare=False)


_ORIGIN = Pos(0, 0, 0)


def state_line(rid: bytes, read: Pos, write: Pos) -> str:
    return f"{rid.hex()} {read.seq} {read.offset} {write.seq} {write.offset} {write.count}"


def parse_state_line(payload: str) -> tuple[bytes, tuple[Pos, Pos] | None]:
    """(recipient id, (read, write)) of a state line, or (id, None) for a forgotten queue."""
    parts = payload.split(" ")
    if not re.fullmatch(r"(?:[0-9a-f]{2})+", parts[0]):
        raise ValueError("bad queue id")
    rid = bytes.fromhex(parts[0])
    if parts[1:] == ["-"]:
        return rid, None
    if len(parts) != 6 or not all(_INT.fullmatch(p) for p in parts[1:]):
        raise ValueError("a state line has a queue id and five numbers")
    rs, ro, ws, wo, wc = map(int, parts[1:])
    read, write = Pos(rs, ro), Pos(ws, wo, wc)
    if read > write:
        raise ValueError("read position after write position")
    return rid, (read, write)


# --- in-memory state ---------------------------------------------------------------------


class _Handle:
    __slots__ = ("fd", "pins", "doomed")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0  # writes waiting for an fsync of this file
        self.doomed = False  # close once unpinned


@dataclass(slots=True, eq=False)
class _Entry:
    queue: _Queue
    seq: int
    offset: int
    size: int
    end: Pos  # the write position just after this record
    msg_id: bytes
    ts: int
    quota: bool
    handle: _Handle | None = None  # pinned until its commit round ends
    failed: bool = False  # rolled back: its writer gets StoreError
    discarded: bool = False  # its queue was emptied before the commit: nothing to record


class _Queue:
    """One queue's messages: `entries[:visible]` committed, the rest pending."""

    __slots__ = ("rid", "entries", "visible", "write", "logged", "committed", "first_seq", "head")

    def __init__(self, rid: bytes, write: Pos = _ORIGIN, first_seq: int = 0) -> None:
        self.rid = rid
        self.entries: deque[_Entry] = deque()
        self.visible = 0
        self.write = write  # where the next record goes (pending writes included)
        self.logged = write  # the write position in the queue's latest state line
        self.committed = write  # the write position that is durable and visible
        self.first_seq = first_seq  # the oldest file of the queue that may exist
        self.head: Message | None = None  # entries[0], read from disk once

    def read_pos(self) -> Pos:
        if self.visible:
            e = self.entries[0]
            return Pos(e.seq, e.offset)
        return self.committed


class _Handles:
    """An LRU of open message files; pinned handles are never evicted."""

    def __init__(self, directory: Path, limit: int) -> None:
        self._dir = directory
        self._limit = limit
        self._open: OrderedDict[tuple[bytes, int], _Handle] = OrderedDict()
        self.evicted: list[tuple[bytes, int]] = []  # for the store to forget idle empty queues

    def path(self, rid: bytes, seq: int) -> Path:
        return self._dir / f"{rid.hex()}.{seq}.msgs"

    def get(self, rid: bytes, seq: int, *, create: bool, empty: bool = False) -> _Handle:
        """The file's handle; `create` makes the file, `empty` also cuts it to nothing."""
        key = (rid, seq)
        h = self._open.get(key)
        if h is not None:
            self._open.move_to_end(key)
            return h
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        if empty:
            flags |= os.O_TRUNC  # a fresh file must not carry anything left from before
        h = self._open[key] = _Handle(os.open(self.path(rid, seq), flags, 0o600))
        self._evict()
        return h

    def open_count(self) -> int:
        return len(self._open)

    def is_open(self, rid: bytes, seq: int) -> bool:
        return (rid, seq) in self._open

    def _evict(self) -> None:
        excess = len(self._open) - self._limit
        if excess <= 0:
            return
        victims = []
        for key, h in self._open.items():
            if not h.pins:
                victims.append(key)
                if len(victims) == excess:
                    break
        for key in victims:
            self.release(self._open.pop(key))
            self.evicted.append(key)

    def drop(self, rid: bytes, seq: int) -> None:
        h = self._open.pop((rid, seq), None)
        if h is not None:
            self.release(h)

    @staticmethod
    def release(h: _Handle) -> None:
        if h.pins:
            h.doomed = True
        else:
            os.close(h.fd)

    @staticmethod
    def unpin(h: _Handle) -> None:
        h.pins -= 1
        if not h.pins and h.doomed:
            os.close(h.fd)

    def close_all(self) -> None:
        for h in self._open.values():
            self.release(h)
        self._open.clear()


# --- recovery (blocking; runs on a worker thread at open) ------------------------------


@dataclass(slots=True)
class _Scanned:
    offset: int
    size: int
    msg_id: bytes
    ts: int
    quota: bool


def scan_file(path: Path, start: int, limit: int | None) -> tuple[int, list[_Scanned]]:
    """The whole records of `path` from `start` up to `limit` (None: the end of the file).

    Returns where the last good record ends and the records; stops at the
    first record that is incomplete, fails its CRC or does not parse.
    """
    out: list[_Scanned] = []
    with open(path, "rb", buffering=1 << 16) as f:
        size = os.fstat(f.fileno()).st_size
        end = size if limit is None else min(limit, size)
        off = min(start, end)
        f.seek(off)
        while off + _HEADER.size <= end:
            n, crc = _HEADER.unpack(f.read(_HEADER.size))
            if n > _MAX_PAYLOAD or off + _HEADER.size + n > end:
                break
            payload = f.read(n)
            if zlib.crc32(payload) != crc:
                break
            try:
                quota, msg_id, ts, _ = _meta(payload)
            except ValueError:
                break
            out.append(_Scanned(off, _HEADER.size + n, msg_id, ts, quota))
            off += _HEADER.size + n
    if off < end:
        log.warning("%s: damaged record at byte %d; dropping the rest of the file", path, off)
    return off, out


def _list_files(directory: Path) -> dict[bytes, dict[int, Path]]:
    files: dict[bytes, dict[int, Path]] = {}
    for p in directory.iterdir():
        m = _FILE.fullmatch(p.name)
        if m and len(m[1]) % 2 == 0:
            files.setdefault(bytes.fromhex(m[1]), {})[int(m[2])] = p
    return files


def _truncate(path: Path, size: int) -> None:
    if path.stat().st_size > size:
        log.warning("%s: truncating a torn or uncommitted tail at byte %d", path, size)
        os.truncate(path, size)


def _recover_queue(rid: bytes, read: Pos, write: Pos, files: dict[int, Path]) -> _Queue:
    """A queue's committed messages, with its files cut back to them (blocking)."""
    q = _Queue(rid)
    for seq in range(read.seq, write.seq + 1):
        path = files.get(seq)
        if path is None:
            if seq < write.seq or write.offset:
                log.warning("%s.%d.msgs is missing; its messages are lost", rid.hex(), seq)
            end, records = 0, []
        else:
            start = read.offset if seq == read.seq else 0
            end, records = scan_file(path, start, write.offset if seq == write.seq else None)
        if seq == write.seq:  # the next record goes where the last good one ends
            if path is not None:
                _truncate(path, end)
            if end < write.offset:
                log.warning("%s.%d.msgs: %d bytes lost", rid.hex(), seq, write.offset - end)
            write = Pos(write.seq, end, write.count)
        for r in records:  # `end` only matters for pending entries; these are committed
            q.entries.append(_Entry(q, seq, r.offset, r.size, write, r.msg_id, r.ts, r.quota))
    q.visible = len(q.entries)
    q.write = q.logged = q.committed = write
    q.first_seq = q.entries[0].seq if q.entries else write.seq
    return q


def _delete_files(paths: Iterable[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)


def recover(directory: Path, *, skip_corrupt: bool) -> dict[bytes, _Queue]:
    """Read the state log, cut every queue's files back to it, compact the state log."""
    directory.mkdir(parents=True, exist_ok=True)
    state = directory / "state.log"
    new = directory / "state.log.new"
    if new.exists():
        log.warning("%s: removing an unfinished compaction", new)
        new.unlink()
    positions: dict[bytes, tuple[Pos, Pos]] = {}
    if state.exists():
        for rid, pos in read_log(state, parse_state_line, skip_corrupt=skip_corrupt):
            if pos is None:
                positions.pop(rid, None)
            else:
                positions[rid] = pos
    files = _list_files(directory)
    queues: dict[bytes, _Queue] = {}
    for rid, (read, write) in positions.items():
        q = _recover_queue(rid, read, write, files.get(rid, {}))
        keep = range(q.first_seq, q.write.seq + 1) if q.entries else range(0)
        _delete_files(p for seq, p in files.get(rid, {}).items() if seq not in keep)
        if q.entries:
            queues[rid] = q
    for rid in files.keys() - positions.keys():
        _delete_files(files[rid].values())
    lines = [state_line(q.rid, q.read_pos(), q.committed) for q in queues.values()]
    data = b"".join(map(encode_line, lines))
    if not state.exists() or state.read_bytes() != data:
        os.close(_write_state_new(directory, data, sync=True))
        os.replace(new, state)
        fsync_dir(directory)
    return queues


# --- the store ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalStatistics:
    queues: int  # queues known (holding messages, or emptied with their file still open)
    messages: int  # committed messages, QUOTA markers included
    pending_writes: int  # written, waiting for their commit
    open_files: int
    state_log_bytes: int


class JournalMessageStore:
    """A MessageStore in per-queue append-only files (see the module comment)."""

    def __init__(
        self,
        directory: Path,
        queues: dict[bytes, _Queue],
        *,
        fsync: FsyncPolicy,
        window: float,
        rotate_after: int,
        max_open_files: int,
        compact_state_at: int,
    ) -> None:
        self._dir = directory
        self._queues = queues
        self._policy = fsync
        self._rotate_after = rotate_after
        self._handles = _Handles(directory, max_open_files)
        self._pending: list[_Entry] = []  # written, waiting for a commit round
        self._dir_dirty = False  # a file was created since the last directory fsync
        self._state_dirty = False  # state lines since the last state-log fsync
        self._state_path = directory / "state.log"
        self._state_fd = os.open(self._state_path, os.O_WRONLY | os.O_APPEND)
        self._state_size = os.fstat(self._state_fd).st_size
        self._state_base = self._state_size  # size right after the last compaction
        self._compact_at = compact_state_at
        self._spill: list[bytes] | None = None  # state lines appended during a compaction
        self._compacting = trio.Lock()  # close waits for a compaction to finish
        self._broken: str | None = None  # a rollback could not be completed
        self._closed = False
        window = window if fsync is FsyncPolicy.BATCH else 0.0
        self._group = GroupCommit(self._commit_round, window)

    @classmethod
    async def open(
        cls,
        directory: Path | str,
        *,
        fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
        window: float = 0.002,
        rotate_after: int = 10_000,
        max_open_files: int = 512,
        compact_state_at: int = 64 << 20,
        skip_corrupt: bool = False,
    ) -> JournalMessageStore:
        """Recover the store in `directory` (created if missing).

        `window`: how long a group commit waits for more writes (batch only).
        `compact_state_at`: state log size (bytes) past which it is compacted
        while running (also at least four times its size after the last compaction).
        """
        directory = Path(directory)
        queues = await trio.to_thread.run_sync(
            lambda: recover(directory, skip_corrupt=skip_corrupt)
        )
        return cls(
            directory,
            queues,
            fsync=FsyncPolicy(fsync),
            window=window,
            rotate_after=rotate_after,
            max_open_files=max_open_files,
            compact_state_at=compact_state_at,
        )

    # --- MessageStore ------------------------------------------------------------------

    async def write_message(self, recipient_id: bytes, message: Message, quota: int) -> WriteResult:
        self._check_writable()
        q = self._queues.get(recipient_id)
        if q is not None and q.entries and q.entries[-1].quota:
            return WriteResult.QUOTA_EXCEEDED
        stored = 0 if q is None else len(q.entries)
        if stored >= quota:
            message = Message(message.msg_id, message.ts, b"", b"", True)
            result = WriteResult.QUOTA_EXCEEDED
        else:
            result = WriteResult.STORED if stored else WriteResult.STORED_INTO_EMPTY
        if q is None:
            q = self._queues[recipient_id] = _Queue(recipient_id)
        entry = self._append(q, message)
        await self._commit(entry)
        return result

    async def peek_message(self, recipient_id: bytes) -> Message | None:
        q = self._queues.get(recipient_id)
        return self._head(q) if q is not None and q.visible else None

    async def delete_message(
        self, recipient_id: bytes, msg_id: bytes
    ) -> tuple[bool, Message | None]:
        q = self._queues.get(recipient_id)
        if q is None or not q.visible:
            return False, None
        if q.entries[0].msg_id != msg_id:
            return False, self._head(q)
        self._check_open()
        self._advance(q, 1)
        await self._state_durable()
        return True, self._head(q) if q.visible else None

    async def delete_queue_messages(self, recipient_id: bytes) -> int:
        q = self._queues.get(recipient_id)
        if q is None:
            return 0
        self._check_open()
        count = len(q.entries)
        self._forget(q)
        await self._state_durable()
        return count

    async def queue_size(self, recipient_id: bytes) -> int:
        q = self._queues.get(recipient_id)
        return 0 if q is None else q.visible

    async def expire_messages(self, recipient_id: bytes, before_ts: int) -> int:
        q = self._queues.get(recipient_id)
        if q is None:
            return 0
        n = 0
        while n < q.visible and q.entries[n].ts < before_ts:
            n += 1
        if n:
            self._check_open()
            self._advance(q, n)
            await self._state_durable()
        return n

    async def queue_ids(self) -> AsyncIterator[bytes]:
        for rid in [rid for rid, q in self._queues.items() if q.visible]:
            yield rid

    async def iter_messages(self, recipient_id: bytes) -> AsyncIterator[Message]:
        q = self._queues.get(recipient_id)
        entries = list(q.entries)[: q.visible] if q is not None else []
        messages = [self._read(e) for e in entries]  # read now: the files may go meanwhile
        for m in messages:
            yield m

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._policy is not FsyncPolicy.NEVER:
            await self._group.wait(hurry=True)  # the last round commits every pending write
        async with self._compacting:
            self._handles.close_all()
            os.close(self._state_fd)

    def statistics(self) -> JournalStatistics:
        return JournalStatistics(
            queues=len(self._queues),
            messages=sum(q.visible for q in self._queues.values()),
            pending_writes=len(self._pending),
            open_files=self._handles.open_count(),
            state_log_bytes=self._state_size,
        )

    # --- writing ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the message store is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self._broken is not None:
            raise StoreError(INTERNAL, self._broken)

    def _append(self, q: _Queue, message: Message) -> _Entry:
        """Write the record to the queue's file (to the OS); the entry is pending."""
        w = q.write
        if w.count >= self._rotate_after:
            w = Pos(w.seq + 1, 0, 0)
        record = encode_message(message)
        try:
            h = self._handles.get(q.rid, w.seq, create=True, empty=w.offset == 0)
        except OSError as exc:
            self._retire_if_idle(q)
            raise io_error(exc, f"opening {self._handles.path(q.rid, w.seq)}") from exc
        try:
            write_all(h.fd, record)
        except OSError as exc:
            self._cut(q.rid, w.seq, h.fd, w.offset)
            self._retire_if_idle(q)
            raise io_error(exc, f"writing {self._handles.path(q.rid, w.seq)}") from exc
        if w.offset == 0:
            self._dir_dirty = True  # a new file: its directory entry needs an fsync too
        end = Pos(w.seq, w.offset + len(record), w.count + 1)
        e = _Entry(q, w.seq, w.offset, len(record), end, message.msg_id, message.ts, message.quota)
        e.handle = h
        h.pins += 1
        q.write = end
        q.entries.append(e)
        self._pending.append(e)
        self._forget_evicted()
        return e

    def _cut(self, rid: bytes, seq: int, fd: int, size: int) -> None:
        """Remove a partly written record."""
        try:
            os.ftruncate(fd, size)
        except OSError as exc:
            self._broken = f"cannot cut back {self._handles.path(rid, seq)}: {exc}"
            log.error("%s", self._broken)

    async def _commit(self, entry: _Entry) -> None:
        if self._policy is FsyncPolicy.NEVER:
            await self._commit_round()
        else:
            await self._group.wait()
        if entry.failed:
            raise StoreError(store_error("write failed"), "rolled back with its queue")

    async def _commit_round(self) -> None:
        """Make every pending write durable and visible (module comment, steps 1-3)."""
        batch, self._pending = self._pending, []
        try:
            await self._sync_data(batch)
            live = [e for e in batch if not (e.failed or e.discarded)]
            ends = {e.queue: e.end for e in live}  # each queue's last write in the batch
            self._log_positions(ends)
            await self._sync_state(ends)
            for e in live:  # they follow the visible ones, in order
                e.queue.visible += 1
            for q in ends:
                q.committed = q.logged
        finally:
            for e in batch:
                if e.handle is not None:
                    self._handles.unpin(e.handle)
                    e.handle = None
        await self._compact_state_if_long()

    async def _sync_data(self, batch: list[_Entry]) -> None:
        if self._policy is FsyncPolicy.NEVER:
            return
        fds = list({id(e.handle): e.handle.fd for e in batch if e.handle is not None}.values())
        sync_dir, self._dir_dirty = self._dir_dirty, False
        if not fds and not sync_dir:
            return
        errors = await _fsync_parallel(fds, self._dir if sync_dir else None)
        if errors:
            self._roll_back({e.queue for e in batch if not (e.failed or e.discarded)})
            raise io_error(errors[0], f"fsync of message files in {self._dir}") from errors[0]

    def _log_positions(self, ends: dict[_Queue, Pos]) -> None:
        if not ends:
            return
        for q, end in ends.items():
            q.logged = end
        try:
            self._append_state([state_line(q.rid, q.read_pos(), q.logged) for q in ends])
        except StoreError:
            for q in ends:
                q.logged = q.committed
            self._roll_back(set(ends))
            raise

    async def _sync_state(self, ends: dict[_Queue, Pos]) -> None:
        if self._policy is FsyncPolicy.NEVER:
            return
        try:
            await self._fsync_state()
        except StoreError:
            queues = [q for q in ends if self._queues.get(q.rid) is q]
            for q in queues:
                q.logged = q.committed
            self._roll_back(set(queues))
            try:  # restate the old positions, so a restart does not resurrect the writes
                self._append_state([state_line(q.rid, q.read_pos(), q.logged) for q in queues])
            except StoreError as exc:
                log.error("cannot restate positions after a failed fsync: %s", exc)
            raise

    def _roll_back(self, queues: set[_Queue]) -> None:
        """Undo every pending write of `queues`: their files end at the last commit again."""
        for q in queues:
            if self._queues.get(q.rid) is not q:
                continue  # forgotten meanwhile: its files are gone, or are a new queue's
            while len(q.entries) > q.visible:
                q.entries.pop().failed = True
            c = q.committed
            self._delete_files(q, range(c.seq + 1, q.write.seq + 1))
            try:
                os.truncate(self._handles.path(q.rid, c.seq), c.offset)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._broken = f"cannot roll back {self._handles.path(q.rid, c.seq)}: {exc}"
                log.error("%s", self._broken)
            q.write = c

    # --- reading and deleting -------------------------------------------------------------

    def _head(self, q: _Queue) -> Message:
        if q.head is None:
            q.head = self._read(q.entries[0])
        return q.head

    def _read(self, e: _Entry) -> Message:
        try:
            h = self._handles.get(e.queue.rid, e.seq, create=False)
            data = os.pread(h.fd, e.size, e.offset)
        except OSError as exc:
            raise io_error(exc, f"reading {self._handles.path(e.queue.rid, e.seq)}") from exc
        finally:
            self._forget_evicted()
        try:
            return decode_message(data)
        except ValueError as exc:
            where = f"{self._handles.path(e.queue.rid, e.seq)} at byte {e.offset}"
            raise StoreError(INTERNAL, f"{where}: {exc}") from exc

    def _advance(self, q: _Queue, n: int) -> None:
        """Delete the queue's `n` oldest visible messages: state line first, then memory."""
        read = Pos(q.entries[n].seq, q.entries[n].offset) if q.visible > n else q.committed
        self._append_state([state_line(q.rid, read, q.logged)])
        for _ in range(n):
            q.entries.popleft()
        q.visible -= n
        q.head = None
        self._delete_files(q, range(q.first_seq, read.seq))  # files the reader has left
        q.first_seq = max(q.first_seq, read.seq)
        self._retire_if_idle(q)

    def _retire_if_idle(self, q: _Queue) -> None:
        """Forget an empty queue whose file is closed (it costs nothing until written again)."""
        if not q.entries and not self._handles.is_open(q.rid, q.write.seq):
            try:
                self._forget(q)
            except StoreError as exc:  # it stays known; the next open drops it
                log.warning("cannot forget empty queue %s: %s", q.rid.hex(), exc)

    def _forget(self, q: _Queue) -> None:
        """Drop the queue and every message in it: state line `-`, then its files."""
        self._append_state([f"{q.rid.hex()} -"])
        for e in q.entries:
            e.discarded = True  # a pending writer returns: its write came before this delete
        q.entries.clear()
        q.visible = 0
        q.head = None
        self._delete_files(q, range(q.first_seq, q.write.seq + 1))
        if self._queues.get(q.rid) is q:
            del self._queues[q.rid]

    def _delete_files(self, q: _Queue, seqs: range) -> None:
        for seq in seqs:
            self._handles.drop(q.rid, seq)
            try:
                self._handles.path(q.rid, seq).unlink(missing_ok=True)
            except OSError as exc:  # harmless: the next open deletes files outside the state
                log.warning("cannot delete %s: %s", self._handles.path(q.rid, seq), exc)

    def _forget_evicted(self) -> None:
        evicted, self._handles.evicted = self._handles.evicted, []
        for rid, seq in evicted:
            q = self._queues.get(rid)
            if q is not None and seq == q.write.seq:
                self._retire_if_idle(q)

    # --- the state log ----------------------------------------------------------------------

    def _append_state(self, lines: list[str]) -> None:
        data = b"".join(map(encode_line, lines))
        try:
            write_all(self._state_fd, data)
        except OSError as exc:
            try:
                os.ftruncate(self._state_fd, self._state_size)
            except OSError as cut_exc:  # the next open drops the torn line instead
                log.error("%s: cannot cut back a torn line: %s", self._state_path, cut_exc)
            raise io_error(exc, f"appending to {self._state_path}") from exc
        self._state_size += len(data)
        self._state_dirty = True
        if self._spill is not None:
            self._spill.append(data)

    async def _state_durable(self) -> None:
        """After a delete: with `always`, wait for the state log's fsync."""
        if self._policy is FsyncPolicy.ALWAYS:
            await self._group.wait()
        elif self._policy is FsyncPolicy.NEVER:
            await self._compact_state_if_long()

    async def _fsync_state(self) -> None:
        if not self._state_dirty:
            return
        self._state_dirty = False
        try:
            await trio.to_thread.run_sync(os.fsync, self._state_fd)
        except OSError as exc:
            self._state_dirty = True
            raise io_error(exc, f"fsync of {self._state_path}") from exc

    async def _compact_state_if_long(self) -> None:
        long = self._state_size >= max(self._compact_at, 4 * self._state_base)
        if long and not self._compacting.locked():
            async with self._compacting:
                await self._compact_state()

    async def _compact_state(self) -> None:
        """Replace a long state log by one line per queue, while writes go on.

        Runs inside a commit round (or, with `never`, after a change), so no
        other task fsyncs the old file meanwhile. Lines appended while the new
        file is written go to both files.
        """
        lines = [state_line(q.rid, q.read_pos(), q.logged) for q in self._queues.values()]
        data = b"".join(map(encode_line, lines))
        sync = self._policy is not FsyncPolicy.NEVER
        new = self._dir / "state.log.new"
        self._spill = []
        try:
            fd = await trio.to_thread.run_sync(lambda: _write_state_new(self._dir, data, sync=sync))
        except OSError as exc:
            self._spill = None
            log.warning("%s: compaction failed, keeping the long log: %s", self._state_path, exc)
            return
        spill, self._spill = b"".join(self._spill), None
        try:
            write_all(fd, spill)
            os.replace(new, self._state_path)
        except OSError as exc:
            os.close(fd)
            new.unlink(missing_ok=True)
            log.warning("%s: compaction failed, keeping the long log: %s", self._state_path, exc)
            return
        os.close(self._state_fd)
        self._state_fd = fd
        self._state_size = self._state_base = len(data) + len(spill)
        self._state_dirty = True  # the spilled lines and the rename still need an fsync
        if sync:
            try:
                await self._fsync_state()
                await trio.to_thread.run_sync(fsync_dir, self._dir)
            except (OSError, StoreError) as exc:
                log.warning("%s: fsync after compaction failed: %s", self._state_path, exc)


def _write_state_new(directory: Path, data: bytes, *, sync: bool) -> int:
    new = directory / "state.log.new"
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        new.unlink(missing_ok=True)
        raise
    return fd


_FSYNC_THREADS = 8  # a disk serves concurrent fsyncs of different files much faster


async def _fsync_parallel(fds: list[int], directory: Path | None) -> list[OSError]:
    """fsync every file (and the directory) on up to _FSYNC_THREADS threads; the errors."""
    errors: list[OSError] = []

    async def sync(chunk: list[int], directory: Path | None) -> None:
        try:
            await trio.to_thread.run_sync(_fsync_all, chunk, directory)
        except OSError as exc:
            errors.append(exc)

    n = max(1, min(_FSYNC_THREADS, len(fds)))
    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(sync, fds[i::n], directory if i == 0 else None)
    return errors


def _fsync_all(fds: list[int], directory: Path | None) -> None:
    for fd in fds:
        os.fsync(fd)
    if directory is not None:
        fsync_dir(directory)


@asynccontextmanager
async def open_journal(directory: Path | str, **options: Any) -> AsyncIterator[JournalMessageStore]:
    """`JournalMessageStore.open(directory, **options)`, closed on exit."""
    store = await JournalMessageStore.open(directory, **options)
    try:
        yield store
    finally:
        await store.close()


_QUEUE_SETTINGS = ("backups", "skip_corrupt", "window")
_MESSAGE_SETTINGS = ("window", "rotate_after", "max_open_files", "compact_state_at", "skip_corrupt")


@asynccontextmanager
async def open_journal_stores(
    store_dir: Path | None, options: StoreOptions
) -> AsyncIterator[Stores]:
    """The `journal` store kind: `queues.log` (the store log) and `messages/` (this journal).

    Settings used: backups, skip_corrupt, window, rotate_after, max_open_files,
    compact_state_at; others are ignored.
    """
    if store_dir is None:
        raise ValueError("the journal store needs a data directory")
    s = options.settings
    queue_opts = {k: s[k] for k in _QUEUE_SETTINGS if k in s}
    message_opts = {k: s[k] for k in _MESSAGE_SETTINGS if k in s}
    async with open_store_log(store_dir / "queues.log", fsync=options.fsync, **queue_opts) as q:
        async with open_journal(store_dir / "messages", fsync=options.fsync, **message_opts) as m:
            yield Stores("journal", q, m, store_dir)
