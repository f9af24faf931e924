"""SQLite queue and message stores sharing one database file.

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

`SqliteQueueStore` keeps two things in memory. An index of the ids of every
live queue (recipient, sender and notifier ids, nothing else) answers a lookup
of an id that does not exist without touching the database: otherwise such a
lookup would cost a read on the worker thread while an existing, cached queue
costs none, and the answer time would tell which queue ids exist
(docs/protocol.md, "Transmissions and authorization"). And a cache of queue
records (a `QueueTable`, store/queue_table.py, over an OrderedDict), bounded to
`cache_size` records with least-recently-used eviction, loaded on a miss and
always updated after the database commit, never before. Misses load under a
per-id lock with a second look into the cache after the lock is taken, so
concurrent misses for one queue read the database once. Deleting a queue is a soft delete (the row
gets `deleted_at`); `compact()` removes rows deleted longer than
`deleted_ttl` ago, and runs when the store opens.

`SqliteMessageStore` keeps no cache: the head of a queue is one indexed read.
"""

from __future__ import annotations

import sqlite3
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio

from router.protocol.types import AUTH, INTERNAL, ErrorType, store_error

from ..durability import FsyncPolicy, GroupCommit
from ..interfaces import (
    DUPLICATE,
    Message,
    NotifierCreds,
    Party,
    QueueRecord,
    QueueStatus,
    StoreError,
    WriteResult,
)
from ..kinds import DEFAULT_CACHE_SIZE, DEFAULT_DELETED_TTL
from ..queue_table import (
    Decision,
    QueueTable,
    check_service_party,
    decide_add_notifier,
    decide_create,
    decide_delete_notifier,
    decide_secure,
    decide_set_service,
    decide_suspend,
    step,
)

T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]

DB_FILE = "store.sqlite3"
SYNCHRONOUS = {FsyncPolicy.NEVER: "OFF", FsyncPolicy.BATCH: "FULL", FsyncPolicy.ALWAYS: "FULL"}
_SCHEMA_VERSION = 1
_PAGE = 1000  # rows per worker call when iterating

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queues (
    pk INTEGER PRIMARY KEY,
    recipient_id BLOB NOT NULL,
    sender_id BLOB NOT NULL,
    recipient_key BLOB NOT NULL,
    rcv_dh_secret BLOB NOT NULL,
    sender_key BLOB,
    snd_secure INTEGER NOT NULL,
    status TEXT NOT NULL,
    notifier_id BLOB,
    notifier_key BLOB,
    rcv_ntf_dh_secret BLOB,
    rcv_service_id BLOB,
    ntf_service_id BLOB,
    updated_at INTEGER NOT NULL,
    deleted_at INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS queues_recipient ON queues(recipient_id)
    WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS queues_sender ON queues(sender_id)
    WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS queues_notifier ON queues(notifier_id)
    WHERE deleted_at IS NULL AND notifier_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS queues_rcv_service ON queues(rcv_service_id)
    WHERE deleted_at IS NULL AND rcv_service_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS queues_ntf_service ON queues(ntf_service_id)
    WHERE deleted_at IS NULL AND ntf_service_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS queues_deleted ON queues(deleted_at)
    WHERE deleted_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    recipient_id BLOB NOT NULL,
    msg_id BLOB NOT NULL,
    ts INTEGER NOT NULL,
    flags BLOB NOT NULL,
    body BLOB NOT NULL,
    quota INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_queue ON messages(recipient_id, seq);
"""


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
    __slots__ = ("op", "result", "error")

    def __init__(self, op: Op) -> None:
        self.op = op
        self.result: Any = None
        self.error: BaseException | None = None


class SqliteDatabase:
    """One database file, one worker path, group-committed writes."""

    def __init__(self, path: Path | str, *, fsync: FsyncPolicy | str = FsyncPolicy.BATCH) -> None:
        self.path = Path(path)
        self.fsync = FsyncPolicy.parse(fsync)
        self._limiter = trio.CapacityLimiter(1)
        self._conn: sqlite3.Connection | None = None
        self._pending: list[_Pending] = []
        self._group = GroupCommit(self._commit_pending)
        self.commits = 0  # transactions committed, for statistics and tests
        self.reads = 0  # read calls made on the worker

    # --- lifecycle ----------------------------------------------------------

    async def open(self) -> None:
        await self._run(self._connect)

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={SYNCHRONOUS[self.fsync]}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise StoreError(
                    INTERNAL, f"{self.path}: schema version {version} is newer than this router"
                )
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

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

    async def write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run `op` inside a group-committed transaction; return once it committed."""
        item = _Pending(op)
        self._pending.append(item)
        with trio.CancelScope(shield=True):
            await self._group.wait()
        if item.error is not None:
            raise item.error
        return item.result

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
        except Exception:
            if len(batch) == 1:
                raise
            for item in batch:  # isolate the failing op: every other op still commits
                try:
                    self._transaction(conn, [item])
                except Exception as exc:
                    item.error = translate_error(exc)

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
        self, queues: Iterable[QueueRecord], messages: Iterable[tuple[bytes, Message]] = ()
    ) -> tuple[int, int]:
        """Insert many queues and messages (each list oldest first per queue) in one
        transaction; returns (queues, messages) inserted. Any duplicate id fails it all."""
        queues, messages = list(queues), list(messages)  # an op may run twice (batch retry)

        def op(conn: sqlite3.Connection) -> tuple[int, int]:
            before = conn.total_changes
            conn.executemany(_INSERT_QUEUE, (_queue_row(r) for r in queues))
            mid = conn.total_changes
            conn.executemany(_INSERT_MESSAGE, (_message_row(rid, m) for rid, m in messages))
            return mid - before, conn.total_changes - mid

        return await self.write(op)


# --- rows ------------------------------------------------------------------------

_QUEUE_COLUMNS = (
    "recipient_id, sender_id, recipient_key, rcv_dh_secret, sender_key, snd_secure, status, "
    "notifier_id, notifier_key, rcv_ntf_dh_secret, rcv_service_id, ntf_service_id, updated_at"
)
_INSERT_QUEUE = f"INSERT INTO queues ({_QUEUE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
_SELECT_QUEUE = f"SELECT {_QUEUE_COLUMNS} FROM queues WHERE deleted_at IS NULL"
_LIVE_BY = {
    Party.RECIPIENT: _SELECT_QUEUE + " AND recipient_id = ?",
    Party.SENDER: _SELECT_QUEUE + " AND sender_id = ?",
    Party.NOTIFIER: _SELECT_QUEUE + " AND notifier_id = ?",
}
_MESSAGE_COLUMNS = "msg_id, ts, flags, body, quota"
_INSERT_MESSAGE = (
    "INSERT INTO messages (recipient_id, msg_id, ts, flags, body, quota) VALUES (?,?,?,?,?,?)"
)
_QUEUE_PAGE = (
    f"SELECT pk, {_QUEUE_COLUMNS} FROM queues WHERE deleted_at IS NULL AND pk > ?"
    f" ORDER BY pk LIMIT {_PAGE}"
)
_MESSAGE_PAGE = (
    f"SELECT seq, {_MESSAGE_COLUMNS} FROM messages WHERE recipient_id = ? AND seq > ?"
    f" ORDER BY seq LIMIT {_PAGE}"
)
_HEAD = f"SELECT seq, {_MESSAGE_COLUMNS} FROM messages WHERE recipient_id = ? ORDER BY seq LIMIT 1"


def _queue_row(r: QueueRecord) -> tuple[Any, ...]:
    n = r.notifier
    return (
        r.recipient_id,
        r.sender_id,
        r.recipient_key,
        r.rcv_dh_secret,
        r.sender_key,
        int(r.snd_secure),
        r.status.value,
        n.notifier_id if n else None,
        n.notifier_key if n else None,
        n.rcv_ntf_dh_secret if n else None,
        r.rcv_service_id,
        r.ntf_service_id,
        r.updated_at,
    )


def _record(row: tuple[Any, ...]) -> QueueRecord:
    rid, sid, rkey, rdh, skey, secure, status, nid, nkey, ndh, rsvc, nsvc, updated = row
    return QueueRecord(
        recipient_id=rid,
        sender_id=sid,
        recipient_key=rkey,
        rcv_dh_secret=rdh,
        sender_key=skey,
        snd_secure=bool(secure),
        status=QueueStatus(status),
        notifier=None if nid is None else NotifierCreds(nid, nkey, ndh),
        rcv_service_id=rsvc,
        ntf_service_id=nsvc,
        updated_at=updated,
    )


def _message_row(rid: bytes, m: Message) -> tuple[Any, ...]:
    return (rid, m.msg_id, m.ts, m.flags, m.body, int(m.quota))


def _message(row: tuple[Any, ...]) -> Message:
    msg_id, ts, flags, body, quota = row
    return Message(msg_id, ts, flags, body, bool(quota))


# --- queue store -------------------------------------------------------------------


class _KeyedLocks:
    """A trio.Lock per key, dropped when nobody holds or waits for it."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[Any, list[Any]] = {}  # key -> [lock, users]

    @asynccontextmanager
    async def hold(self, key: Any) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [trio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[key]


class _LiveIds:
    """The ids of every live queue, per party (recipient, sender, notifier), nothing else."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[Party, set[bytes]] = {party: set() for party in Party}

    def taken(self, party: Party, entity_id: bytes) -> bool:
        return entity_id in self._ids[party]

    def add(self, rid: bytes, sid: bytes, nid: bytes | None) -> None:
        self._ids[Party.RECIPIENT].add(rid)
        self._ids[Party.SENDER].add(sid)
        if nid is not None:
            self._ids[Party.NOTIFIER].add(nid)

    def discard(self, party: Party, entity_id: bytes) -> None:
        self._ids[party].discard(entity_id)

    def index(self, rec: QueueRecord) -> None:
        self.add(rec.recipient_id, rec.sender_id, _notifier_id(rec))

    def unindex(self, rec: QueueRecord) -> None:
        self.discard(Party.RECIPIENT, rec.recipient_id)
        self.discard(Party.SENDER, rec.sender_id)
        if rec.notifier is not None:
            self.discard(Party.NOTIFIER, rec.notifier.notifier_id)


def _notifier_id(rec: QueueRecord) -> bytes | None:
    return None if rec.notifier is None else rec.notifier.notifier_id


class SqliteQueueStore:
    """Queue records in the `queues` table, behind a coherent in-memory cache."""

    def __init__(
        self,
        db: SqliteDatabase,
        *,
        deleted_ttl: int = DEFAULT_DELETED_TTL,
        cache_size: int = DEFAULT_CACHE_SIZE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be at least 1, not {cache_size}")
        self.db = db
        self.deleted_ttl = deleted_ttl
        self.cache_size = cache_size
        self._clock = clock
        # The cached records, oldest use first, with the indexes of the shared table.
        self._lru: OrderedDict[bytes, QueueRecord] = OrderedDict()  # oldest use first
        self._cache = QueueTable(self._lru)  # the cached records, indexed as every table
        self._ids = _LiveIds()  # a lookup of any other id is a miss without the database
        self._locks = _KeyedLocks()
        self._deletes = 0  # bumped on every delete: a load that straddles one is discarded

    async def load_ids(self) -> None:
        """Read the ids of every live queue into the index (when the store opens)."""
        sql = "SELECT recipient_id, sender_id, notifier_id FROM queues WHERE deleted_at IS NULL"
        rows = await self.db.read(lambda conn: conn.execute(sql).fetchall())
        for ids in rows:
            self._ids.add(*ids)

    def cached_count(self) -> int:
        return len(self._cache.queues)

    async def bulk_import(
        self, queues: Iterable[QueueRecord], messages: Iterable[tuple[bytes, Message]] = ()
    ) -> tuple[int, int]:
        """`SqliteDatabase.bulk_import`, with the imported queues' ids indexed."""
        queues = list(queues)
        counts = await self.db.bulk_import(queues, messages)
        for rec in queues:
            self._ids.index(rec)
        return counts

    # --- cache ---------------------------------------------------------------

    def _cached(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        rec = self._cache.get(party, entity_id)
        if rec is not None:
            self._lru.move_to_end(rec.recipient_id)
        return rec

    def _cache_put(self, rec: QueueRecord, previous: QueueRecord | None = None) -> None:
        """Cache the record as it now is in the database (and index its ids);
        `previous`: the record it replaces, whose notifier id may be gone now."""
        old = self._cache.queues.get(rec.recipient_id) or previous
        if old is not None and old.notifier is not None and old.notifier != rec.notifier:
            self._ids.discard(Party.NOTIFIER, old.notifier.notifier_id)
        self._ids.index(rec)
        self._cache.put(rec)  # the most recently used: put moves it to the end
        while len(self._cache.queues) > self.cache_size:
            # Forget the record, not the queue: its ids stay in the index.
            self._cache.drop(next(iter(self._cache.queues)))

    def _cache_drop(self, rec: QueueRecord) -> None:
        """The queue is gone: forget the record and its ids."""
        self._cache.drop(rec.recipient_id)
        self._ids.unindex(rec)

    async def _load(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        rec = self._cached(party, entity_id)
        if rec is not None:
            return rec
        if not self._ids.taken(party, entity_id):
            return None  # no such queue: as quick as a cached one, and no database read
        async with self._locks.hold((party, entity_id)):
            while True:
                rec = self._cached(party, entity_id)  # another task may have loaded it
                if rec is not None:
                    return rec
                deletes = self._deletes
                row = await self.db.read(
                    lambda conn: conn.execute(_LIVE_BY[party], (entity_id,)).fetchone()
                )
                if deletes != self._deletes:
                    continue  # a delete committed meanwhile: the row may be stale
                if row is None:
                    return None
                rec = _record(row)
                cached = self._cache.queues.get(rec.recipient_id)
                if cached is not None:
                    return cached if self._cached(party, entity_id) is cached else None
                self._cache_put(rec)
                return rec

    def _now(self) -> int:
        return int(self._clock())

    # --- QueueStore ------------------------------------------------------------

    async def add_queue(self, record: QueueRecord) -> ErrorType | None:
        row = _queue_row(record)

        def op(conn: sqlite3.Connection) -> bool:
            try:
                conn.execute(_INSERT_QUEUE, row)
            except sqlite3.IntegrityError:
                return False
            return True

        if isinstance(decide_create(self._ids, record), ErrorType):
            return DUPLICATE
        async with self._locks.hold(record.recipient_id):
            if not await self.db.write(op):
                return DUPLICATE  # taken by a queue created meanwhile
            self._cache_put(record)
        return None

    async def get_queue(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        return await self._load(party, entity_id)

    async def secure_queue(self, recipient_id: bytes, sender_key: bytes) -> ErrorType | None:
        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            return await self._make(rec, decide_secure(rec, sender_key, self._now()))

    async def add_notifier(self, recipient_id: bytes, creds: NotifierCreds) -> ErrorType | None:
        nid = creds.notifier_id

        def taken(conn: sqlite3.Connection) -> bool:  # by a queue changed meanwhile
            sql = "SELECT 1 FROM queues WHERE notifier_id = ? AND deleted_at IS NULL"
            return conn.execute(sql, (nid,)).fetchone() is not None

        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            decision = decide_add_notifier(self._ids, rec, creds, self._now())
            return await self._make(rec, decision, unless=taken, refused=DUPLICATE)

    async def delete_notifier(self, recipient_id: bytes) -> NotifierCreds | None:
        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            decision = decide_delete_notifier(rec, self._now())
            if decision is None or await self._make(rec, decision) is not None:
                return None
            return None if rec is None else rec.notifier

    async def suspend_queue(self, recipient_id: bytes) -> ErrorType | None:
        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            return await self._make(rec, decide_suspend(rec, self._now()))

    async def set_service(
        self, recipient_id: bytes, party: Party, service_id: bytes | None
    ) -> ErrorType | None:
        check_service_party(party)  # before any I/O
        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            return await self._make(rec, decide_set_service(rec, party, service_id, self._now()))

    async def service_queues(self, service_id: bytes, party: Party) -> list[QueueRecord]:
        column = "rcv_service_id" if party is Party.RECIPIENT else "ntf_service_id"
        sql = f"{_SELECT_QUEUE} AND {column} = ?"
        rows = await self.db.read(lambda conn: conn.execute(sql, (service_id,)).fetchall())
        return [_record(row) for row in rows]

    async def delete_queue(self, recipient_id: bytes) -> QueueRecord | ErrorType:
        now = self._now()

        def op(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row = conn.execute(_LIVE_BY[Party.RECIPIENT], (recipient_id,)).fetchone()
            if row is not None:
                conn.execute(
                    "UPDATE queues SET deleted_at = ? WHERE recipient_id = ?"
                    " AND deleted_at IS NULL",
                    (now, recipient_id),
                )
            return row

        async with self._locks.hold(recipient_id):
            row = await self.db.write(op)
            if row is None:
                return AUTH
            self._deletes += 1
            rec = self._cache.queues.get(recipient_id) or _record(row)
            self._cache_drop(rec)
            return rec

    async def iter_queues(self) -> AsyncIterator[QueueRecord]:
        last = 0
        while True:
            rows = await self.db.read(
                lambda conn, last=last: conn.execute(_QUEUE_PAGE, (last,)).fetchall()
            )
            for row in rows:
                yield _record(row[1:])
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    async def queue_count(self) -> int:
        sql = "SELECT count(*) FROM queues WHERE deleted_at IS NULL"
        return await self.db.read(lambda conn: conn.execute(sql).fetchone()[0])

    async def compact(self, deleted_before: int | None = None) -> int:
        """Hard-delete queue rows soft-deleted before `deleted_before` (default: now
        minus `deleted_ttl`); returns how many rows were removed."""
        cutoff = self._now() - self.deleted_ttl if deleted_before is None else deleted_before
        sql = "DELETE FROM queues WHERE deleted_at IS NOT NULL AND deleted_at < ?"
        return await self.db.write(lambda conn: conn.execute(sql, (cutoff,)).rowcount)

    async def close(self) -> None:
        self._lru = OrderedDict()
        self._cache = QueueTable(self._lru)
        self._ids = _LiveIds()

    # --- internals ---------------------------------------------------------------

    async def _make(
        self,
        previous: QueueRecord | None,
        decision: Decision,
        *,
        unless: Callable[[sqlite3.Connection], bool] | None = None,
        refused: ErrorType = AUTH,
    ) -> ErrorType | None:
        """Write the record the decided change makes over the live row of its queue,
        then cache it. Caller holds the queue's lock."""
        if decision is None or isinstance(decision, ErrorType):
            return decision
        new = step(previous, decision)
        assert previous is not None and new is not None  # the rules changed a live queue
        return await self._update(new, previous, unless, refused)

    async def _update(
        self,
        new: QueueRecord,
        previous: QueueRecord,
        unless: Callable[[sqlite3.Connection], bool] | None,
        refused: ErrorType,
    ) -> ErrorType | None:
        row = _queue_row(new)
        sql = (
            f"UPDATE queues SET ({_QUEUE_COLUMNS}) = ({','.join('?' * len(row))}) "
            "WHERE recipient_id = ? AND deleted_at IS NULL"
        )

        def op(conn: sqlite3.Connection) -> ErrorType | None:
            if unless is not None and unless(conn):
                return refused
            if conn.execute(sql, (*row, new.recipient_id)).rowcount == 0:
                return AUTH  # the cache said live, the database says gone
            return None

        error = await self.db.write(op)
        if error is None:
            self._cache_put(new, previous)
        elif error is AUTH:
            self._cache_drop(new)
        return error


# --- message store -------------------------------------------------------------------


class SqliteMessageStore:
    """Undelivered messages in the `messages` table, ordered by `seq` within a queue."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def write_message(self, recipient_id: bytes, message: Message, quota: int) -> WriteResult:
        row = _message_row(recipient_id, message)
        marker = _message_row(recipient_id, Message(message.msg_id, message.ts, b"", b"", True))

        def op(conn: sqlite3.Connection) -> WriteResult:
            size, tail_is_marker = conn.execute(
                "SELECT count(*), (SELECT quota FROM messages WHERE recipient_id = ?1"
                " ORDER BY seq DESC LIMIT 1) FROM messages WHERE recipient_id = ?1",
                (recipient_id,),
            ).fetchone()
            if tail_is_marker:
                return WriteResult.QUOTA_EXCEEDED
            if size >= quota:
                conn.execute(_INSERT_MESSAGE, marker)
                return WriteResult.QUOTA_EXCEEDED
            conn.execute(_INSERT_MESSAGE, row)
            return WriteResult.STORED if size else WriteResult.STORED_INTO_EMPTY

        return await self.db.write(op)

    async def peek_message(self, recipient_id: bytes) -> Message | None:
        row = await self.db.read(lambda conn: conn.execute(_HEAD, (recipient_id,)).fetchone())
        return None if row is None else _message(row[1:])

    async def delete_message(
        self, recipient_id: bytes, msg_id: bytes
    ) -> tuple[bool, Message | None]:
        def op(conn: sqlite3.Connection) -> tuple[bool, Message | None]:
            head = conn.execute(_HEAD, (recipient_id,)).fetchone()
            if head is None:
                return False, None
            if head[1] != msg_id:
                return False, _message(head[1:])
            conn.execute("DELETE FROM messages WHERE seq = ?", (head[0],))
            nxt = conn.execute(_HEAD, (recipient_id,)).fetchone()
            return True, None if nxt is None else _message(nxt[1:])

        return await self.db.write(op)

    async def delete_queue_messages(self, recipient_id: bytes) -> int:
        sql = "DELETE FROM messages WHERE recipient_id = ?"
        return await self.db.write(lambda conn: conn.execute(sql, (recipient_id,)).rowcount)

    async def queue_size(self, recipient_id: bytes) -> int:
        sql = "SELECT count(*) FROM messages WHERE recipient_id = ?"
        return await self.db.read(lambda conn: conn.execute(sql, (recipient_id,)).fetchone()[0])

    async def expire_messages(self, recipient_id: bytes, before_ts: int) -> int:
        # Only the run of old messages at the head goes, as if popped one by one:
        # a newer message shields the ones behind it (same as the memory store).
        sql = (
            "DELETE FROM messages WHERE recipient_id = ?1 AND seq < coalesce("
            "(SELECT min(seq) FROM messages WHERE recipient_id = ?1 AND ts >= ?2), "
            "9223372036854775807)"
        )
        return await self.db.write(
            lambda conn: conn.execute(sql, (recipient_id, before_ts)).rowcount
        )

    async def queue_ids(self) -> AsyncIterator[bytes]:
        sql = "SELECT DISTINCT recipient_id FROM messages"
        rows = await self.db.read(lambda conn: conn.execute(sql).fetchall())
        for (rid,) in rows:
            yield rid

    async def iter_messages(self, recipient_id: bytes) -> AsyncIterator[Message]:
        last = -1
        while True:
            rows = await self.db.read(
                lambda conn, last=last: conn.execute(_MESSAGE_PAGE, (recipient_id, last)).fetchall()
            )
            for row in rows:
                yield _message(row[1:])
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    async def close(self) -> None:
        return None


# --- opening -----------------------------------------------------------------------------


@asynccontextmanager
async def open_sqlite_database(
    path: Path | str, *, fsync: FsyncPolicy | str = FsyncPolicy.BATCH
) -> AsyncIterator[SqliteDatabase]:
    db = SqliteDatabase(path, fsync=fsync)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def open_queue_store(
    db: SqliteDatabase,
    *,
    deleted_ttl: int = DEFAULT_DELETED_TTL,
    cache_size: int = DEFAULT_CACHE_SIZE,
    clock=time.time,
) -> SqliteQueueStore:
    """A queue store on `db`, with rows deleted longer than `deleted_ttl` ago removed."""
    store = SqliteQueueStore(db, deleted_ttl=deleted_ttl, cache_size=cache_size, clock=clock)
    await store.compact()
    await store.load_ids()
    return store
