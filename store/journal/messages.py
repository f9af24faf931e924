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
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from router.protocol.types import INTERNAL, store_error

from ..durability import FsyncPolicy, GroupCommit, fsync_dir, io_error, write_all
from ..interfaces import Message, StoreError, WriteResult
from ..kinds import closing_opener
from .files import (
    Entry,
    Handles,
    Pos,
    QueueFiles,
    decode_message,
    encode_message,
    parse_state_line,
    recover,
    state_line,
    write_state_new,
)
from .logfile import encode_line, log

__all__ = [
    "FsyncPolicy",
    "JournalMessageStore",
    "JournalStatistics",
    "Pos",
    "decode_message",
    "encode_message",
    "open_journal",
    "parse_state_line",
    "state_line",
]

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
        queues: dict[bytes, QueueFiles],
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
        self._handles = Handles(directory, max_open_files)
        self._pending: list[Entry] = []  # written, waiting for a commit round
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
            fsync=FsyncPolicy.parse(fsync),
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
            q = self._queues[recipient_id] = QueueFiles(recipient_id)
        entry = self._append(q, message)
        await self._commit(entry)
        return result

    async def peek_message(self, recipient_id: bytes) -> Message | None:
        q = self._queues.get(recipient_id)
        return self._head(q) if q is not None and q.visible else None

    async def peek_messages(self, recipient_ids: Sequence[bytes]) -> list[Message | None]:
        # A head not read yet is one pread of its file, as for `peek_message`.
        heads: list[Message | None] = []
        for rid in recipient_ids:
            q = self._queues.get(rid)
            heads.append(self._head(q) if q is not None and q.visible else None)
        return heads

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
        # Shielded, so that a caller already cancelled still commits pending writes
        # and waits out a running state-log compaction; the files are closed in any case.
        try:
            with trio.move_on_after(CLOSE_LIMIT) as scope:
                scope.shield = True
                if self._policy is not FsyncPolicy.NEVER:
                    await self._group.wait(hurry=True)  # the last round commits every pending write
                async with self._compacting:
                    pass
        finally:
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

    def _append(self, q: QueueFiles, message: Message) -> Entry:
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
        e = Entry(q, w.seq, w.offset, len(record), end, message.msg_id, message.ts, message.quota)
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

    async def _commit(self, entry: Entry) -> None:
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
                if not e.discarded:  # unless a DEL dropped them while the state log synced
                    e.queue.visible += 1
            for q in ends:
                q.committed = q.logged
        finally:
            for e in batch:
                if e.handle is not None:
                    self._handles.unpin(e.handle)
                    e.handle = None
        await self._compact_state_if_long()

    async def _sync_data(self, batch: list[Entry]) -> None:
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

    def _log_positions(self, ends: dict[QueueFiles, Pos]) -> None:
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

    async def _sync_state(self, ends: dict[QueueFiles, Pos]) -> None:
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

    def _roll_back(self, queues: set[QueueFiles]) -> None:
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

    def _head(self, q: QueueFiles) -> Message:
        if q.head is None:
            q.head = self._read(q.entries[0])
        return q.head

    def _read(self, e: Entry) -> Message:
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

    def _advance(self, q: QueueFiles, n: int) -> None:
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

    def _retire_if_idle(self, q: QueueFiles) -> None:
        """Forget an empty queue whose file is closed (it costs nothing until written again)."""
        if not q.entries and not self._handles.is_open(q.rid, q.write.seq):
            try:
                self._forget(q)
            except StoreError as exc:  # it stays known; the next open drops it
                log.warning("cannot forget empty queue %s: %s", q.rid.hex(), exc)

    def _forget(self, q: QueueFiles) -> None:
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

    def _delete_files(self, q: QueueFiles, seqs: range) -> None:
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
            fd = await trio.to_thread.run_sync(lambda: write_state_new(self._dir, data, sync=sync))
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


CLOSE_LIMIT = 60.0  # seconds close() may spend committing before it just closes the files
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


# `JournalMessageStore.open(directory, ...)`, closed on exit.
open_journal = closing_opener(JournalMessageStore.open)
