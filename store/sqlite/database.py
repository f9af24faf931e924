"""The SQLite database the queue and message stores share, and its worker thread.

Theory of operation
-------------------
`SqliteDatabase` owns one `sqlite3` connection in WAL mode. Every use of it
goes through `trio.to_thread.run_sync` with a `CapacityLimiter(1)`, so the
connection is only ever touched by one worker thread at a time and the Trio
thread never blocks on disk.

Writes are closures `op(conn) -> result` that only touch the database. They
are grouped into transactions by group commit (`GroupCommit`, store/durability.py,
the same as the journal's): a writer appends its op to the
pending list; if no batch is being committed it becomes the committer, takes
the whole pending list and runs it as one transaction on the worker; writers
that arrive meanwhile wait, and one of them commits their ops together as the
next batch. A writer's await returns only after the transaction holding its op
committed. If a batch fails, it is rolled back and each op is retried in a
transaction of its own, so one failing op cannot fail its neighbours. Waiting
for a commit is shielded from cancellation: an op that was handed over always
completes, and its caller always updates its cache to match.

`--fsync` maps onto PRAGMA synchronous: never -> OFF (a commit is written to
the OS, so it survives a crash of the router, not a power loss), batch and
always -> FULL (each committed transaction is synced before any of its
writers is answered). Group commit makes FULL cheap: one sync covers every
write that arrived while the previous transaction was being committed, which
is what `batch` promises; the two differ only for the journal, whose batch
also waits a short window for more writers.
"""

from __future__ import annotations

import errno
import logging
import math
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio

from router.protocol.types import INTERNAL, store_error

from ..durability import DiskReserve, FsyncPolicy, GroupCommit
from ..interfaces import (
    Message,
    QueueLinkData,
    QueueRecord,
    StoreError,
)
from ..queue_table import check_link_id, service_changes
from .schema import (
    INSERT_MESSAGE,
    INSERT_QUEUE,
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    change_service_figures,
    insert_row,
    message_row,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

DB_FILE = "store.sqlite3"
RESERVE_SUFFIX = ".reserve"  # the room kept for a full disk: store.sqlite3.reserve
# Room kept on disk for ACKs, DELs and checkpoints once the disk is full: twice
# the WAL's size at its automatic checkpoint (1000 pages of 4 KB).
DEFAULT_RESERVE_BYTES = 8 << 20
ROOM_CHECK_INTERVAL = 1.0  # seconds between two looks for room while the disk is full
NO_SPACE = store_error("database or disk is full")  # what SQLite says of a full disk
SYNCHRONOUS = {FsyncPolicy.NEVER: "OFF", FsyncPolicy.BATCH: "FULL", FsyncPolicy.ALWAYS: "FULL"}


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_FULL or (
            "disk is full" in str(exc))
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def translate_error(exc: BaseException) -> BaseException:
    """Map a failure of the database layer to StoreError; leave bugs as they are."""
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError):
        return StoreError(INTERNAL, str(exc))
    if isinstance(exc, sqlite3.Error):
        return StoreError(store_error(str(exc)), type(exc).__name__)
    if isinstance(exc, OSError):
        return StoreError(store_error(exc.strerror or "I/O error"), str(exc))
    return exc


class _Pending:
    __slots__ = ("op", "adds", "result", "error")

    def __init__(self, op: Op, adds: bool = False) -> None:
        self.op = op
        self.adds = adds  # adds rows: refused while the disk is full
        self.result: Any = None
        self.error: BaseException | None = None


class SqliteDatabase:
    """One database file, one worker path, group-committed writes.

    A full disk (docs/stores.md, "A full disk"): the database keeps
    `reserve_bytes` of room in a file of its own (`<db>.reserve`). When a write
    finds the disk full, that room is given back and the database is *full*:
    writes that add rows (`adds`: SEND, NEW) are refused with the store's error
    while the rest (ACK, DEL, expiration, the checkpoint at close) use the room
    given back. Once the disk has the reserve's room again (looked at no more
    than once a second, when an adding write comes), it is taken back and
    every write is accepted. A start on a full disk opens in the full state.
    """

    def __init__(
        self, path: Path | str, *, fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.fsync = FsyncPolicy.parse(fsync)
        self._limiter = trio.CapacityLimiter(1)
        self._conn: sqlite3.Connection | None = None
        self._pending: list[_Pending] = []
        self._group = GroupCommit(self._commit_pending)
        self.commits = 0  # transactions committed, for statistics and tests
        self.reads = 0  # read calls made on the worker
        self.reserve_bytes = reserve_bytes
        self.reserve = DiskReserve(self.path.with_name(self.path.name + RESERVE_SUFFIX))
        self.full = False  # the reserve was given back: adding writes are refused
        self._room_checked = -math.inf

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        await self._run(self._connect)

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The reserve's room is the database's while it opens (its WAL and shared
        # memory files are made now, on a disk that may be full).
        self.reserve.release()
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={SYNCHRONOUS[self.fsync]}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    INTERNAL, f"{self.path}: schema version {version} is newer than this router"
                )
            conn.executescript(SCHEMA)
            for to_version in range(max(version, 1) + 1, SCHEMA_VERSION + 1):
                # executescript commits first; each step and its version number are one transaction
                conn.executescript(
                    f"BEGIN; {MIGRATIONS[to_version]} PRAGMA user_version={to_version}; COMMIT;"
                )
            if version != SCHEMA_VERSION:  # no write at all when it is current (a full disk)
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        # Never more than an eighth of the filesystem (a small disk in a test).
        self.reserve_bytes = min(self.reserve_bytes, shutil.disk_usage(self.path.parent).total // 8)
        self._take_reserve()
        if self.full:
            log.warning("%s: the disk is full (no room for the %d-byte reserve): new messages "
                        "and queues are refused until there is room", self.path,
                        self.reserve_bytes)

    def _take_reserve(self) -> bool:
        """Hold the reserve's room again; False (and full) if the disk has not got it."""
        try:
            self.reserve.ensure(self.reserve_bytes)
        except OSError:
            self.full = bool(self.reserve_bytes)
            return False
        self.full = False
        return True

    def _give_reserve_back(self) -> None:
        """The disk is full: give the reserve's room to the writes that free space."""
        if not self.full:
            self.full = True
            self.reserve.release()
            log.error("%s: the disk is full: the %d-byte reserve is given back; new messages "
                      "and queues are refused until there is room (ACK, DEL and expiration go "
                      "on)", self.path, self.reserve_bytes)

    async def close(self) -> None:
        if self._conn is None:
            return
        with trio.CancelScope(shield=True):
            await self._group.wait(hurry=True)  # every write handed over before is committed
            await self._run(self._disconnect)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as e:
                # Everything committed is in the WAL, which the next open reads: a
                # checkpoint that cannot be written (a full disk) loses nothing.
                log.warning("%s: no checkpoint at close (%s); the WAL keeps the data",
                            self.path, e)
            finally:
                conn.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    # --- reads and writes ---------------------------------------------------

    async def read(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read-only op on the worker, between write transactions."""
        self.reads += 1
        return await self._run(lambda: op(self._connection()))

    async def write(self, op: Callable[[sqlite3.Connection], T], *, adds: bool = False) -> T:
        """Run `op` inside a group-committed transaction; return once it committed.

        `adds`: the op adds rows (a message, a queue), refused while the disk is full."""
        if adds and self.full and not await self._room_again():
            raise StoreError(NO_SPACE, f"{self.path}: the disk is full")
        item = _Pending(op, adds)
        self._pending.append(item)
        with trio.CancelScope(shield=True):
            await self._group.wait()
        if item.error is not None:
            raise item.error
        return item.result

    async def _room_again(self) -> bool:
        """Whether the reserve's room could be taken back (tried once a second at most)."""
        now = trio.current_time()
        if now - self._room_checked < ROOM_CHECK_INTERVAL:
            return False
        self._room_checked = now
        if await self._run(self._take_reserve):
            log.warning("%s: there is room on the disk again: new messages and queues are "
                        "accepted", self.path)
            return True
        return False

    async def _commit_pending(self) -> None:
        """One group-commit round: every op handed over so far, as one transaction."""
        batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            await trio.to_thread.run_sync(self._run_batch, batch, limiter=self._limiter)
        except Exception as exc:  # the worker call itself failed: fail the whole batch
            for item in batch:
                item.error = translate_error(exc)

    def _run_batch(self, batch: list[_Pending]) -> None:
        conn = self._connection()
        try:
            self._transaction(conn, batch)
        except Exception as exc:
            room_given = _disk_full(exc) and self._make_room(conn)
            if len(batch) == 1 and not room_given:
                raise
            for item in batch:  # isolate the failing op: every other op still commits
                if item.adds and self.full:
                    item.error = StoreError(NO_SPACE, f"{self.path}: the disk is full")
                    continue
                try:
                    self._transaction(conn, [item])
                except Exception as exc:
                    item.error = translate_error(exc)

    def _make_room(self, conn: sqlite3.Connection) -> bool:
        """After a write found the disk full: give the reserve back (once) and restart the
        WAL from its beginning where the checkpoint allows, so that the writes that free
        space can be written. Whether anything changed."""
        had_reserve = not self.full and self.reserve_bytes > 0
        self._give_reserve_back()
        try:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        except sqlite3.Error:
            busy = 1
        return had_reserve or not busy

    def _transaction(self, conn: sqlite3.Connection, batch: list[_Pending]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = [item.op(conn) for item in batch]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.commits += 1
        for item, result in zip(batch, results, strict=True):
            item.result = result

    async def _run(self, fn: Callable[[], T]) -> T:
        try:
            return await trio.to_thread.run_sync(fn, limiter=self._limiter)
        except StoreError:
            raise
        except Exception as exc:
            raise translate_error(exc) from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(INTERNAL, f"{self.path} is closed")
        return self._conn

    # --- migration ----------------------------------------------------------

    async def bulk_import(
        self,
        queues: Iterable[QueueRecord],
        messages: Iterable[tuple[bytes, Message]] = (),
        links: Iterable[tuple[bytes, QueueLinkData]] = (),
    ) -> tuple[int, int]:
        """Insert many queues (with their links: recipient id, link) and messages (each
        list oldest first per queue) in one transaction; returns (queues, messages)
        inserted. Any duplicate id fails it all."""
        queues, messages = list(queues), list(messages)  # an op may run twice (batch retry)
        by_queue = dict(links)
        for rec in queues:
            check_link_id(rec, by_queue.get(rec.recipient_id))

        def op(conn: sqlite3.Connection) -> tuple[int, int]:
            before = conn.total_changes
            conn.executemany(
                INSERT_QUEUE, (insert_row(r, by_queue.get(r.recipient_id)) for r in queues)
            )
            mid = conn.total_changes
            conn.executemany(INSERT_MESSAGE, (message_row(rid, m) for rid, m in messages))
            counts = mid - before, conn.total_changes - mid
            for r in queues:
                change_service_figures(conn, service_changes(None, r))
            return counts

        return await self.write(op)



@asynccontextmanager
async def open_sqlite_database(
    path: Path | str, *, fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
    reserve_bytes: int = DEFAULT_RESERVE_BYTES,
) -> AsyncIterator[SqliteDatabase]:
    db = SqliteDatabase(path, fsync=fsync, reserve_bytes=reserve_bytes)
    await db.open()
    try:
        yield db
    finally:
        await db.close()
