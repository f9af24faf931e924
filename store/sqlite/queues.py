"""The SQLite queue store: the records in the database, their ids and a bounded
cache in memory.

`SqliteQueueStore` keeps two things in memory. An index of the ids of every
live queue (recipient, sender, notifier and link ids, nothing else) answers a lookup
of an id that does not exist without touching the database: otherwise such a
lookup would cost a read on the worker thread while an existing, cached queue
costs none, and the answer time would tell which queue ids exist
(docs/protocol.md, "Transmissions and authorization"). And a cache of queue
records (a `QueueTable`, store/queue_table.py, over an OrderedDict), bounded to
`cache_size` records with least-recently-used eviction, loaded on a miss and
always updated after the database commit, never before. Misses load under a
per-id lock with a second look into the cache after the lock is taken, so
concurrent misses for one queue read the database once. A block's lookups
(`get_queues`) read every uncached record in one worker call (`SELECT ... WHERE
id IN (...)`, in chunks under SQLite's variable limit): a reconnect storm costs one
read per block, not one per queue, so the store needs no warm cache to take its
clients back (bench/RESULTS.md, "Reconnect storm"). Deleting a queue is a soft delete (the row
gets `deleted_at`); `compact()` removes rows deleted longer than
`deleted_ttl` ago, and runs when the store opens.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import trio

from router.protocol.types import AUTH, ErrorType

from ..interfaces import (
    DUPLICATE,
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    ServiceQueues,
    ServiceRecord,
    StoreError,
)
from ..queue_table import (
    Decision,
    DeleteLink,
    QueueTable,
    SetLink,
    check_recipient_keys,
    check_service_party,
    decide_add_notifier,
    decide_create,
    decide_delete_link,
    decide_delete_notifier,
    decide_secure,
    decide_set_link,
    decide_set_recipient_keys,
    decide_set_service,
    decide_suspend,
    service_changes,
    step,
)
from .database import SqliteDatabase
from .schema import (
    INSERT_QUEUE,
    INSERT_SERVICE,
    LINK_OF,
    LINK_PAGE,
    LIVE_BY,
    MAX_IN_IDS,
    PAGE,
    QUEUE_COLUMN_COUNT,
    QUEUE_COLUMNS,
    QUEUE_PAGE,
    SERVICE_BY_CERT,
    SERVICE_FIGURES,
    SERVICE_PAGE,
    SERVICE_PAGE_BY_ID,
    change_service_figures,
    insert_row,
    live_in,
    queue_row,
    record_from_row,
    service_from_row,
    service_row,
)

log = logging.getLogger(__name__)

# --- queue store -------------------------------------------------------------------

DEFAULT_DELETED_TTL = 24 * 3600  # seconds a soft-deleted queue row is kept
DEFAULT_CACHE_SIZE = 16_384  # queue records kept in memory (about 0.6 KB each)
# Reads of a block's records that a write straddled before its uncached records are
# looked up one by one (a write between the read and the cache fill may be newer).
_BATCH_ATTEMPTS = 3


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
    """The ids of every live queue, per party (recipient, sender, notifier, link), nothing else."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[Party, set[bytes]] = {party: set() for party in Party}

    def taken(self, party: Party, entity_id: bytes) -> bool:
        return entity_id in self._ids[party]

    def of(self, party: Party) -> set[bytes]:
        """The ids of `party` (to be read, not changed)."""
        return self._ids[party]

    def add(self, rid: bytes, sid: bytes, nid: bytes | None, lid: bytes | None = None) -> None:
        self._ids[Party.RECIPIENT].add(rid)
        self._ids[Party.SENDER].add(sid)
        if nid is not None:
            self._ids[Party.NOTIFIER].add(nid)
        if lid is not None:
            self._ids[Party.LINK].add(lid)

    def discard(self, party: Party, entity_id: bytes) -> None:
        self._ids[party].discard(entity_id)

    def index(self, rec: QueueRecord) -> None:
        self.add(rec.recipient_id, rec.sender_id, _notifier_id(rec), rec.link_id)

    def unindex(self, rec: QueueRecord) -> None:
        self.discard(Party.RECIPIENT, rec.recipient_id)
        self.discard(Party.SENDER, rec.sender_id)
        if rec.notifier is not None:
            self.discard(Party.NOTIFIER, rec.notifier.notifier_id)
        if rec.link_id is not None:
            self.discard(Party.LINK, rec.link_id)


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
        # The cached records, indexed as every table (a cache cannot keep services' figures).
        self._cache = QueueTable(self._lru, services=False)
        self._ids = _LiveIds()  # a lookup of any other id is a miss without the database
        self._locks = _KeyedLocks()
        self._deletes = 0  # bumped on every delete: a load that straddles one is discarded
        self._writes = 0  # bumped on every change of a stored record: the same, for a batch

    async def load_ids(self) -> None:
        """Read the ids of every live queue into the index (when the store opens)."""
        sql = (
            "SELECT recipient_id, sender_id, notifier_id, link_id FROM queues"
            " WHERE deleted_at IS NULL"
        )
        rows = await self.db.read(lambda conn: conn.execute(sql).fetchall())
        for ids in rows:
            self._ids.add(*ids)

    def cached_count(self) -> int:
        return len(self._cache.queues)

    async def bulk_import(
        self,
        queues: Iterable[QueueRecord],
        messages: Iterable[tuple[bytes, Message]] = (),
        links: Iterable[tuple[bytes, QueueLinkData]] = (),
    ) -> tuple[int, int]:
        """`SqliteDatabase.bulk_import`, with the imported queues' ids indexed."""
        queues = list(queues)
        counts = await self.db.bulk_import(queues, messages, links)
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
        if old is not None and old.link_id is not None and old.link_id != rec.link_id:
            self._ids.discard(Party.LINK, old.link_id)
        self._ids.index(rec)
        self._cache.put(rec)  # the most recently used: put moves it to the end
        while len(self._cache.queues) > self.cache_size:
            # Forget the record, not the queue: its ids stay in the index.
            self._cache.drop(next(iter(self._cache.queues)))

    def _cache_loaded(self, rec: QueueRecord) -> None:
        """Cache a record just read from the database, of a queue not cached: its ids are
        indexed already (every live queue's are), so this is `_cache_put` without the
        index's work, which a reconnect storm would do for every record it reads."""
        queues = self._cache.queues
        self._cache.put(rec)
        if len(queues) > self.cache_size:
            self._cache.drop(next(iter(queues)))

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
                    lambda conn: conn.execute(LIVE_BY[party], (entity_id,)).fetchone()
                )
                if deletes != self._deletes:
                    continue  # a delete committed meanwhile: the row may be stale
                if row is None:
                    return None
                rec = record_from_row(row)
                cached = self._cache.queues.get(rec.recipient_id)
                if cached is not None:
                    return cached if self._cached(party, entity_id) is cached else None
                self._cache_loaded(rec)
                return rec

    async def _load_many(
        self, party: Party, entity_ids: list[bytes], found: dict[bytes, QueueRecord | None]
    ) -> None:
        """Fill `found` with the records of `entity_ids` (live, uncached, distinct): one
        worker call for all of them, cached as `_load` caches one."""
        for _ in range(_BATCH_ATTEMPTS):
            writes = self._writes
            rows = await self.db.read(partial(_select_live, party=party, entity_ids=entity_ids))
            if writes == self._writes:
                break
            # A change committed meanwhile: its record may be newer than the row read.
            entity_ids = self._still_wanted(party, entity_ids, found)
            if not entity_ids:
                return
        else:
            for entity_id in entity_ids:
                found[entity_id] = await self._load(party, entity_id)
            return
        for entity_id in entity_ids:
            found[entity_id] = None  # unless a row says otherwise below
        key_of = _PARTY_KEY[party]
        for row in rows:
            rec = record_from_row(row)
            entity_id = key_of(rec)
            cached = self._cache.queues.get(rec.recipient_id)
            if cached is None:
                self._cache_loaded(rec)
            elif self._cached(party, entity_id) is not cached:
                continue  # the cached record, newer, no longer has this id
            else:
                rec = cached
            found[entity_id] = rec

    def _still_wanted(
        self, party: Party, entity_ids: list[bytes], found: dict[bytes, QueueRecord | None]
    ) -> list[bytes]:
        """The ids of `entity_ids` that are neither cached nor gone now (the others go
        into `found`)."""
        wanted = []
        cached, live = self._cache.get, self._ids.of(party)  # per id of a storm's blocks
        for entity_id in entity_ids:
            rec = cached(party, entity_id)
            if rec is not None:
                self._lru.move_to_end(rec.recipient_id)
                found[entity_id] = rec
            elif entity_id in live:
                wanted.append(entity_id)
            else:
                found[entity_id] = None
        return wanted

    def _now(self) -> int:
        return int(self._clock())

    # --- QueueStore ------------------------------------------------------------

    async def add_queue(
        self, record: QueueRecord, link: QueueLinkData | None = None
    ) -> ErrorType | None:
        row = insert_row(record, link)

        changes = service_changes(None, record)

        def op(conn: sqlite3.Connection) -> bool:
            try:
                conn.execute(INSERT_QUEUE, row)
            except sqlite3.IntegrityError:
                return False
            change_service_figures(conn, changes)
            return True

        if isinstance(decide_create(self._ids, record, link), ErrorType):
            return DUPLICATE
        async with self._locks.hold(record.recipient_id):
            if not await self.db.write(op, adds=True):
                return DUPLICATE  # taken by a queue created meanwhile
            self._cache_put(record)
        return None

    async def get_queue(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        return await self._load(party, entity_id)

    async def get_queues(
        self, party: Party, entity_ids: Sequence[bytes]
    ) -> list[QueueRecord | None]:
        """Cached and unknown ids as `get_queue` answers them (no database read), every
        other one in a single worker call."""
        found: dict[bytes, QueueRecord | None] = {}
        wanted = self._still_wanted(party, list(dict.fromkeys(entity_ids)), found)
        if wanted:
            await self._load_many(party, wanted, found)
        return [found[entity_id] for entity_id in entity_ids]

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

    async def set_recipient_keys(
        self, recipient_id: bytes, keys: tuple[bytes, ...]
    ) -> ErrorType | None:
        check_recipient_keys(keys)  # before any I/O
        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            return await self._make(rec, decide_set_recipient_keys(rec, keys, self._now()))

    async def get_link(self, recipient_id: bytes) -> QueueLinkData | None:
        rec = await self._load(Party.RECIPIENT, recipient_id)
        if rec is None or rec.link_id is None:
            return None  # no database read for a queue without a link
        return await self._read_link(recipient_id)

    async def _read_link(self, recipient_id: bytes) -> QueueLinkData | None:
        row = await self.db.read(lambda conn: conn.execute(LINK_OF, (recipient_id,)).fetchone())
        return None if row is None else QueueLinkData(*row)

    async def set_link(self, recipient_id: bytes, link: QueueLinkData) -> ErrorType | None:
        lid = link.link_id

        def taken(conn: sqlite3.Connection) -> bool:  # by a queue changed meanwhile
            sql = (
                "SELECT 1 FROM queues WHERE link_id = ? AND deleted_at IS NULL"
                " AND recipient_id != ?"
            )
            return conn.execute(sql, (lid, recipient_id)).fetchone() is not None

        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            has_link = rec is not None and rec.link_id is not None
            current = await self._read_link(recipient_id) if has_link else None
            decision = decide_set_link(self._ids, rec, current, link, self._now())
            return await self._make(rec, decision, unless=taken)

    async def delete_link(self, recipient_id: bytes) -> ErrorType | None:
        async with self._locks.hold(recipient_id):
            rec = await self._load(Party.RECIPIENT, recipient_id)
            return await self._make(rec, decide_delete_link(rec, self._now()))

    async def iter_links(self) -> AsyncIterator[tuple[bytes, QueueLinkData]]:
        last = 0
        while True:
            rows = await self.db.read(
                lambda conn, last=last: conn.execute(LINK_PAGE, (last,)).fetchall()
            )
            for _pk, rid, lid, fixed, user in rows:
                yield rid, QueueLinkData(lid, fixed, user)
            if len(rows) < PAGE:
                return
            last = rows[-1][0]

    async def iter_services(self) -> AsyncIterator[ServiceRecord]:
        after = b""  # every id sorts after it
        while True:
            rows = await self.db.read(
                lambda conn, after=after: conn.execute(SERVICE_PAGE_BY_ID, (after,)).fetchall()
            )
            for row in rows:
                yield service_from_row(row)
            if len(rows) < PAGE:
                return
            after = rows[-1][0]

    async def service_queue_page(
        self, service_id: bytes, party: Party, after: bytes | None, limit: int
    ) -> list[bytes]:
        check_service_party(party)
        sql = SERVICE_PAGE[party]
        args = (service_id, b"" if after is None else after, limit)  # every id sorts after b""
        rows = await self.db.read(lambda conn: conn.execute(sql, args).fetchall())
        return [row[0] for row in rows]

    async def set_queues_service(
        self, recipient_ids: Sequence[bytes], party: Party, service_id: bytes | None
    ) -> list[ErrorType | None]:
        check_service_party(party)
        # The queues' locks in one order, so that two blocks never wait for each other.
        async with AsyncExitStack() as locks:
            for rid in sorted(set(recipient_ids)):
                await locks.enter_async_context(self._locks.hold(rid))
            return await self._set_queues_service(recipient_ids, party, service_id)

    async def _set_queues_service(
        self, recipient_ids: Sequence[bytes], party: Party, service_id: bytes | None
    ) -> list[ErrorType | None]:
        now = self._now()
        results: list[ErrorType | None] = []
        updates: dict[bytes, tuple[QueueRecord, QueueRecord]] = {}  # rid -> (before, after)
        for rid in recipient_ids:
            before = updates[rid][1] if rid in updates else await self._load(Party.RECIPIENT, rid)
            decision = decide_set_service(before, party, service_id, now)
            if isinstance(decision, ErrorType):
                results.append(decision)
                continue
            results.append(None)
            if decision.changes_anything(before):
                after = step(before, decision)
                assert before is not None and after is not None
                first = updates[rid][0] if rid in updates else before
                updates[rid] = (first, after)
        if not updates:
            return results
        sql = (
            f"UPDATE queues SET ({QUEUE_COLUMNS}) = ({','.join('?' * QUEUE_COLUMN_COUNT)}) "
            "WHERE recipient_id = ? AND deleted_at IS NULL"
        )

        def op(conn: sqlite3.Connection) -> set[bytes]:
            gone = set()
            for rid, (before, after) in updates.items():
                if conn.execute(sql, (*queue_row(after), rid)).rowcount == 0:
                    gone.add(rid)  # the cache said live, the database says gone
                    continue
                change_service_figures(conn, service_changes(before, after))
            return gone

        gone = await self.db.write(op)  # one transaction for the block
        self._writes += 1
        for rid, (before, after) in updates.items():
            if rid in gone:
                self._cache_drop(after)
            else:
                self._cache_put(after, before)
        pairs = zip(recipient_ids, results, strict=True)
        return [AUTH if rid in gone else result for rid, result in pairs]

    async def add_service(self, record: ServiceRecord) -> ServiceRecord:
        key = (record.role, record.cert_hash)

        def op(conn: sqlite3.Connection) -> tuple[Any, ...]:
            conn.execute(INSERT_SERVICE, service_row(record))
            return conn.execute(SERVICE_BY_CERT, key).fetchone()

        stored = await self.db.read(lambda conn: conn.execute(SERVICE_BY_CERT, key).fetchone())
        if stored is None:
            stored = await self.db.write(op)
        return service_from_row(stored)

    async def service_summary(self, service_id: bytes, party: Party) -> ServiceQueues:
        check_service_party(party)
        key = (service_id, party.value)
        row = await self.db.read(lambda conn: conn.execute(SERVICE_FIGURES, key).fetchone())
        return ServiceQueues() if row is None else ServiceQueues(row[0], row[1])

    async def delete_queue(self, recipient_id: bytes) -> QueueRecord | ErrorType:
        now = self._now()

        def op(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row = conn.execute(LIVE_BY[Party.RECIPIENT], (recipient_id,)).fetchone()
            if row is not None:
                conn.execute(
                    "UPDATE queues SET deleted_at = ? WHERE recipient_id = ?"
                    " AND deleted_at IS NULL",
                    (now, recipient_id),
                )
                change_service_figures(conn, service_changes(record_from_row(row), None))
            return row

        async with self._locks.hold(recipient_id):
            row = await self.db.write(op)
            if row is None:
                return AUTH
            self._deletes += 1
            self._writes += 1
            rec = self._cache.queues.get(recipient_id) or record_from_row(row)
            self._cache_drop(rec)
            return rec

    async def iter_queues(self) -> AsyncIterator[QueueRecord]:
        last = 0
        while True:
            rows = await self.db.read(
                lambda conn, last=last: conn.execute(QUEUE_PAGE, (last,)).fetchall()
            )
            for row in rows:
                yield record_from_row(row[1:])
            if len(rows) < PAGE:
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
        self._cache = QueueTable(self._lru, services=False)
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
        return await self._update(new, previous, unless, refused, _link_columns(decision))

    async def _update(
        self,
        new: QueueRecord,
        previous: QueueRecord,
        unless: Callable[[sqlite3.Connection], bool] | None,
        refused: ErrorType,
        link: tuple[bytes | None, bytes | None] | None = None,
    ) -> ErrorType | None:
        row = queue_row(new)
        columns = QUEUE_COLUMNS
        if link is not None:  # the change sets or removes the link's data too
            row, columns = (*row, *link), columns + ", link_fixed, link_user"
        sql = (
            f"UPDATE queues SET ({columns}) = ({','.join('?' * len(row))}) "
            "WHERE recipient_id = ? AND deleted_at IS NULL"
        )
        changes = service_changes(previous, new)

        def op(conn: sqlite3.Connection) -> ErrorType | None:
            if unless is not None and unless(conn):
                return refused
            if conn.execute(sql, (*row, new.recipient_id)).rowcount == 0:
                return AUTH  # the cache said live, the database says gone
            change_service_figures(conn, changes)
            return None

        error = await self.db.write(op)
        self._writes += 1
        if error is None:
            self._cache_put(new, previous)
        elif error is AUTH:
            self._cache_drop(new)
        return error



_PARTY_KEY: dict[Party, Callable[[QueueRecord], bytes | None]] = {
    Party.RECIPIENT: lambda rec: rec.recipient_id,
    Party.SENDER: lambda rec: rec.sender_id,
    Party.NOTIFIER: _notifier_id,
    Party.LINK: lambda rec: rec.link_id,
}


def _select_live(
    conn: sqlite3.Connection, *, party: Party, entity_ids: list[bytes]
) -> list[tuple[Any, ...]]:
    """The live rows with these ids of `party`, in as few statements as SQLite's limit
    on a statement's variables allows."""
    chunk = min(conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER), MAX_IN_IDS)
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(entity_ids), chunk):
        ids = entity_ids[start : start + chunk]
        rows += conn.execute(live_in(party, len(ids)), ids).fetchall()
    return rows


def _link_columns(decision: Decision) -> tuple[bytes | None, bytes | None] | None:
    """(link_fixed, link_user) a change writes, or None when it leaves the link as it is."""
    if isinstance(decision, SetLink):
        return decision.link.fixed_data, decision.link.user_data
    if isinstance(decision, DeleteLink):
        return None, None
    return None


async def open_queue_store(
    db: SqliteDatabase,
    *,
    deleted_ttl: int = DEFAULT_DELETED_TTL,
    cache_size: int = DEFAULT_CACHE_SIZE,
    clock=time.time,
) -> SqliteQueueStore:
    """A queue store on `db`, with rows deleted longer than `deleted_ttl` ago removed."""
    store = SqliteQueueStore(db, deleted_ttl=deleted_ttl, cache_size=cache_size, clock=clock)
    try:
        await store.compact()
    except StoreError as e:  # a full disk: the rows are removed at the next start
        log.warning("%s: deleted queues not compacted: %s", db.path, e)
    await store.load_ids()
    return store
