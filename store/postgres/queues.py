"""The PostgreSQL queue store: every record in `msg_queues`, no cache.

Every lookup is one indexed query, whether the queue exists or not, so an
answer's time does not tell which ids exist and there is no cache to be stale
(docs/protocol.md, "Transmissions and authorization"). A change is one
transaction on one connection: the queue's row is locked (`FOR UPDATE`), the
shared rules of store/queue_table.py decide on the record as it is, and the
row is updated; a unique index that refuses the change (an id taken by a
concurrent change) makes the answer DUPLICATE or AUTH, as the rules would have.
A queue's link lives in its row and goes with it. Deleting a queue is a soft
delete (`deleted_at`); `compact()` removes rows deleted longer than
`deleted_ttl` ago. Services' queue counts and ids hashes are kept by the
database's triggers (store/postgres/schema.py).

The number of live queues is counted once when the store opens and then kept
as queues are added and deleted, so metrics and the control port never count
the table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from router.protocol.types import AUTH, ErrorType

from ..interfaces import (
    DUPLICATE,
    EMPTY_IDS_HASH,
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    ServiceQueues,
    ServiceRecord,
)
from ..queue_table import (
    Decision,
    DeleteLink,
    SetLink,
    check_link_id,
    check_service_party,
    decide_add_notifier,
    decide_delete_link,
    decide_delete_notifier,
    decide_secure,
    decide_set_link,
    decide_set_service,
    decide_suspend,
    step,
)
from .bulk import copy_in
from .database import PostgresDatabase
from .schema import (
    INSERT_QUEUE,
    LINK_OF,
    LINK_PAGE,
    LIVE_BY,
    LIVE_BY_ANY,
    PAGE,
    PARTY_COLUMN,
    QUEUE_COLUMNS,
    QUEUE_PAGE,
    SELECT_QUEUE,
    SERVICE_PAGE,
    SERVICE_PAGE_BY_ID,
    insert_row,
    queue_row,
    record_from_row,
)

log = logging.getLogger(__name__)

DEFAULT_DELETED_TTL = 21 * 24 * 3600  # seconds a soft-deleted row is kept (the reference's 21 days)
LOCK_LIVE = f"{SELECT_QUEUE} AND recipient_id = %s FOR UPDATE"
UPDATE_QUEUE = (
    f"UPDATE msg_queues SET ({QUEUE_COLUMNS}) = ({', '.join(['%s'] * 15)})"
    " WHERE recipient_id = %s AND deleted_at IS NULL"
)
UPDATE_QUEUE_AND_LINK = (
    f"UPDATE msg_queues SET ({QUEUE_COLUMNS}, fixed_data, user_data) ="
    f" ({', '.join(['%s'] * 17)}) WHERE recipient_id = %s AND deleted_at IS NULL"
)
SIDE = {Party.RECIPIENT: "r", Party.NOTIFIER: "n"}


class _TakenIn:
    """The rules' view of which ids are taken: a look at the live rows, in the
    transaction that makes the change."""

    __slots__ = ("conn",)

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def taken(self, party: Party, entity_id: bytes) -> bool:
        query = f"SELECT 1 FROM msg_queues WHERE deleted_at IS NULL AND {PARTY_COLUMN[party]} = %s"
        return self.conn.execute(query, (entity_id,)).fetchone() is not None


class PostgresQueueStore:
    """Queue records in `msg_queues`, read and changed in the database only."""

    def __init__(
        self, db: PostgresDatabase, *, deleted_ttl: int = DEFAULT_DELETED_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.deleted_ttl = deleted_ttl
        self._clock = clock
        self._count = 0

    def _now(self) -> int:
        return int(self._clock())

    async def load_count(self) -> None:
        """Count the live queues once (when the store opens)."""
        query = "SELECT count(*) FROM msg_queues WHERE deleted_at IS NULL"
        self._count = await self.db.run(lambda conn: conn.execute(query).fetchone()[0])

    # --- reads ---------------------------------------------------------------

    async def get_queue(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        query = LIVE_BY[party]
        row = await self.db.run(lambda conn: conn.execute(query, (entity_id,)).fetchone())
        return None if row is None else record_from_row(row)

    async def get_queues(
        self, party: Party, entity_ids: Sequence[bytes]
    ) -> list[QueueRecord | None]:
        if not entity_ids:
            return []
        query, ids = LIVE_BY_ANY[party], list(entity_ids)
        rows = await self.db.run(lambda conn: conn.execute(query, (ids,)).fetchall())
        found = {row[0]: record_from_row(row[1:]) for row in rows}
        return [found.get(entity_id) for entity_id in entity_ids]

    async def get_link(self, recipient_id: bytes) -> QueueLinkData | None:
        row = await self.db.run(lambda conn: conn.execute(LINK_OF, (recipient_id,)).fetchone())
        return None if row is None else QueueLinkData(*row)

    async def iter_services(self) -> AsyncIterator[ServiceRecord]:
        after = b""  # every id sorts after it
        while True:
            rows = await self.db.run(
                lambda conn, after=after: conn.execute(SERVICE_PAGE_BY_ID, (after,)).fetchall()
            )
            for sid, role, cert, cert_hash, created in rows:
                yield ServiceRecord(
                    bytes(sid), role.encode(), bytes(cert), bytes(cert_hash), created
                )
            if len(rows) < PAGE:
                return
            after = bytes(rows[-1][0])

    async def service_queue_page(
        self, service_id: bytes, party: Party, after: bytes | None, limit: int
    ) -> list[bytes]:
        check_service_party(party)
        query = SERVICE_PAGE[party]
        args = (service_id, b"" if after is None else after, limit)  # every id sorts after b""
        rows = await self.db.run(lambda conn: conn.execute(query, args).fetchall())
        return [bytes(row[0]) for row in rows]

    async def service_summary(self, service_id: bytes, party: Party) -> ServiceQueues:
        check_service_party(party)
        query = (
            "SELECT queue_count, queue_ids_hash FROM service_queues"
            " WHERE service_id = %s AND side = %s"
        )
        side = SIDE[party]
        row = await self.db.run(lambda conn: conn.execute(query, (service_id, side)).fetchone())
        if row is None or row[0] == 0:
            return ServiceQueues(0, EMPTY_IDS_HASH)
        return ServiceQueues(row[0], bytes(row[1]))

    async def iter_queues(self) -> AsyncIterator[QueueRecord]:
        last = 0
        while True:
            rows = await self.db.run(
                lambda conn, last=last: conn.execute(QUEUE_PAGE, (last,)).fetchall()
            )
            for row in rows:
                yield record_from_row(row[1:])
            if len(rows) < PAGE:
                return
            last = rows[-1][0]

    async def iter_links(self) -> AsyncIterator[tuple[bytes, QueueLinkData]]:
        last = 0
        while True:
            rows = await self.db.run(
                lambda conn, last=last: conn.execute(LINK_PAGE, (last,)).fetchall()
            )
            for _pk, rid, lid, fixed, user in rows:
                yield rid, QueueLinkData(lid, fixed, user)
            if len(rows) < PAGE:
                return
            last = rows[-1][0]

    async def queue_count(self) -> int:
        return self._count

    # --- changes ---------------------------------------------------------------

    async def add_queue(
        self, record: QueueRecord, link: QueueLinkData | None = None
    ) -> ErrorType | None:
        check_link_id(record, link)
        row = insert_row(record, link)

        def op(conn: psycopg.Connection) -> ErrorType | None:
            try:
                conn.execute(INSERT_QUEUE, row)
            except pg_errors.UniqueViolation:
                return DUPLICATE
            return None

        error = await self.db.run(op)
        if error is None:
            self._count += 1
        return error

    async def secure_queue(self, recipient_id: bytes, sender_key: bytes) -> ErrorType | None:
        now = self._now()
        return await self._change(recipient_id, lambda _t, rec: decide_secure(rec, sender_key, now))

    async def add_notifier(self, recipient_id: bytes, creds: NotifierCreds) -> ErrorType | None:
        now = self._now()
        return await self._change(
            recipient_id, lambda taken, rec: decide_add_notifier(taken, rec, creds, now),
            refused=DUPLICATE,
        )

    async def delete_notifier(self, recipient_id: bytes) -> NotifierCreds | None:
        now = self._now()
        removed: list[NotifierCreds | None] = [None]

        def decide(_taken: _TakenIn, rec: QueueRecord | None) -> Decision:
            removed[0] = None if rec is None else rec.notifier
            return decide_delete_notifier(rec, now)

        if await self._change(recipient_id, decide) is not None:
            return None
        return removed[0]

    async def suspend_queue(self, recipient_id: bytes) -> ErrorType | None:
        now = self._now()
        return await self._change(recipient_id, lambda _t, rec: decide_suspend(rec, now))

    async def set_service(
        self, recipient_id: bytes, party: Party, service_id: bytes | None
    ) -> ErrorType | None:
        check_service_party(party)
        now = self._now()
        return await self._change(
            recipient_id, lambda _t, rec: decide_set_service(rec, party, service_id, now)
        )

    async def set_queues_service(
        self, recipient_ids: Sequence[bytes], party: Party, service_id: bytes | None
    ) -> list[ErrorType | None]:
        check_service_party(party)
        now = self._now()
        ids = list(recipient_ids)

        def op(conn: psycopg.Connection) -> list[ErrorType | None]:
            # Rows are locked in one order, so two blocks never wait for each other.
            query = f"{SELECT_QUEUE} AND recipient_id = ANY(%s) ORDER BY recipient_id FOR UPDATE"
            found = {row[0]: record_from_row(row) for row in conn.execute(query, (ids,))}
            results: list[ErrorType | None] = []
            updates: list[tuple[Any, ...]] = []
            for rid in ids:
                rec = found.get(rid)
                decision = decide_set_service(rec, party, service_id, now)
                if isinstance(decision, ErrorType):
                    results.append(decision)
                    continue
                new = step(rec, decision)
                assert new is not None
                found[rid] = new  # a queue named twice in a block: its second change sees the first
                updates.append((*queue_row(new), rid))
                results.append(None)
            if updates:
                with conn.cursor() as cur:
                    cur.executemany(UPDATE_QUEUE, updates)
            return results

        return await self.db.run(op, transaction=True)

    async def add_service(self, record: ServiceRecord) -> ServiceRecord:
        def op(conn: psycopg.Connection) -> ServiceRecord:
            conn.execute(
                "INSERT INTO services (service_id, service_role, service_cert, service_cert_hash,"
                " created_at) VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (service_role, service_cert_hash) DO NOTHING",
                (record.service_id, record.role.decode(), record.cert, record.cert_hash,
                 record.created_at),
            )
            row = conn.execute(
                "SELECT service_id, service_role, service_cert, service_cert_hash, created_at"
                " FROM services WHERE service_role = %s AND service_cert_hash = %s",
                (record.role.decode(), record.cert_hash),
            ).fetchone()
            sid, role, cert, cert_hash, created = row
            return ServiceRecord(sid, role.encode(), cert, cert_hash, created)

        stored = await self.db.run(op, transaction=True)
        return record if stored == record else stored

    async def set_recipient_keys(
        self, recipient_id: bytes, keys: tuple[bytes, ...]
    ) -> ErrorType | None:
        if not keys:
            raise ValueError("a queue has at least one recipient key")
        now = self._now()

        def decide(_taken: _TakenIn, rec: QueueRecord | None) -> Decision:
            if rec is None:
                return AUTH
            return _SetRecipientKeys(now, rec.recipient_id, keys)

        return await self._change(recipient_id, decide)

    async def set_link(self, recipient_id: bytes, link: QueueLinkData) -> ErrorType | None:
        now = self._now()

        def decide(taken: _TakenIn, rec: QueueRecord | None) -> Decision:
            current = None
            if rec is not None and rec.link_id is not None:
                row = taken.conn.execute(LINK_OF, (recipient_id,)).fetchone()
                current = None if row is None else QueueLinkData(*row)
            return decide_set_link(taken, rec, current, link, now)

        return await self._change(recipient_id, decide)

    async def delete_link(self, recipient_id: bytes) -> ErrorType | None:
        now = self._now()
        return await self._change(recipient_id, lambda _t, rec: decide_delete_link(rec, now))

    async def delete_queue(self, recipient_id: bytes) -> QueueRecord | ErrorType:
        now = self._now()
        query = (
            f"UPDATE msg_queues SET deleted_at = %s WHERE recipient_id = %s"
            f" AND deleted_at IS NULL RETURNING {QUEUE_COLUMNS}"
        )
        row = await self.db.run(lambda conn: conn.execute(query, (now, recipient_id)).fetchone())
        if row is None:
            return AUTH
        self._count -= 1
        return record_from_row(row)

    async def compact(self, deleted_before: int | None = None) -> int:
        """Hard-delete rows soft-deleted before `deleted_before` (default: now minus
        `deleted_ttl`); returns how many rows were removed."""
        cutoff = self._now() - self.deleted_ttl if deleted_before is None else deleted_before
        query = "DELETE FROM msg_queues WHERE deleted_at IS NOT NULL AND deleted_at < %s"
        return await self.db.run(lambda conn: conn.execute(query, (cutoff,)).rowcount)

    async def bulk_import(
        self,
        queues: Iterable[QueueRecord],
        messages: Iterable[tuple[bytes, Message]] = (),
        links: Iterable[tuple[bytes, QueueLinkData]] = (),
    ) -> tuple[int, int]:
        """Insert many queues (with their links: recipient id, link) and messages (each
        queue's oldest first) in one transaction, by binary COPY (store/postgres/bulk.py);
        returns (queues, messages) inserted. Any duplicate id fails it all."""
        queues, messages = list(queues), list(messages)
        by_queue = dict(links)
        for rec in queues:
            check_link_id(rec, by_queue.get(rec.recipient_id))

        def op(conn: psycopg.Connection) -> tuple[int, int]:
            copy_in(conn, queues, by_queue, messages)
            return len(queues), len(messages)

        counts = await self.db.run(op, transaction=True)
        self._count += counts[0]
        return counts

    async def close(self) -> None:
        return None

    # --- internals ---------------------------------------------------------------

    async def _change(
        self,
        recipient_id: bytes,
        decide: Callable[[_TakenIn, QueueRecord | None], Decision],
        *,
        refused: ErrorType = AUTH,
    ) -> ErrorType | None:
        """Lock the queue's live row, decide on it, write what the decision makes of it;
        a unique index refusing the write is `refused`."""

        def op(conn: psycopg.Connection) -> ErrorType | None:
            with conn.transaction():
                row = conn.execute(LOCK_LIVE, (recipient_id,)).fetchone()
                rec = None if row is None else record_from_row(row)
                decision = decide(_TakenIn(conn), rec)
                if decision is None or isinstance(decision, ErrorType):
                    return decision
                new = step(rec, decision)
                assert rec is not None and new is not None  # the rules changed a live queue
                link = _link_columns(decision)
                if link is None:
                    conn.execute(UPDATE_QUEUE, (*queue_row(new), recipient_id))
                else:
                    conn.execute(UPDATE_QUEUE_AND_LINK, (*queue_row(new), *link, recipient_id))
                return None

        def guarded(conn: psycopg.Connection) -> ErrorType | None:
            try:
                return op(conn)
            except pg_errors.UniqueViolation:
                return refused  # an id taken by a change that committed meanwhile

        return await self.db.run(guarded)


class _SetRecipientKeys:
    """RKEY (docs/protocol.md#rkey): the queue's recipient keys replaced; the first
    stays `recipient_key`."""

    __slots__ = ("ts", "recipient_id", "keys")
    sets_link = False

    def __init__(self, ts: int, recipient_id: bytes, keys: tuple[bytes, ...]) -> None:
        self.ts, self.recipient_id, self.keys = ts, recipient_id, keys

    def after(self, old: QueueRecord | None) -> QueueRecord | None:
        if old is None:
            return None
        return replace(old, recipient_key=self.keys[0], more_recipient_keys=tuple(self.keys[1:]),
                       updated_at=self.ts)


def _link_columns(decision: Decision) -> tuple[bytes | None, bytes | None] | None:
    """(fixed_data, user_data) a change writes, or None when it leaves the link as it is."""
    if isinstance(decision, SetLink):
        return decision.link.fixed_data, decision.link.user_data
    if isinstance(decision, DeleteLink):
        return None, None
    return None


async def open_queue_store(
    db: PostgresDatabase, *, deleted_ttl: int = DEFAULT_DELETED_TTL, clock=time.time
) -> PostgresQueueStore:
    """A queue store on `db`, with rows deleted longer than `deleted_ttl` ago removed."""
    store = PostgresQueueStore(db, deleted_ttl=deleted_ttl, clock=clock)
    removed = await store.compact()
    if removed:
        log.info("%s: %d deleted queues removed", db.where, removed)
    await store.load_count()
    return store
