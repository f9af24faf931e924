"""The PostgreSQL message store: `messages`, ordered per queue, with each queue's
count and QUOTA state in `message_queues`.

A write, an ACK and an expiry are each one call of a database function that
locks the queue's `message_queues` row first (store/postgres/schema.py), so
concurrent writers and readers of one queue are serialized by the database
and each costs one round trip. A block of SUBs reads the head of every queue
in one query (`peek_messages`); a block's run of SENDs writes in one statement
(`write_messages`), a run of ACKs deletes in one (`delete_messages`): one round
trip and one transaction each, so either all of the run is committed or none.

The database serializes them, but in whichever order the worker threads reach
it; the router expects a queue's writes in the order it made them (a block of
pipelined SENDs), so the changes of one queue also wait for each other here,
first come first served (a Trio lock per queue, dropped when no one holds it).
Reads of a queue's head wait too: a peek made before an ACK must not answer
after it with the message the ACK removed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

import trio

from ..interfaces import Message, WriteResult
from .database import PostgresDatabase
from .schema import DELETES, HEAD, HEADS, MESSAGE_PAGE, PAGE, WRITES, message_from_row


class _QueueLocks:
    """A FIFO trio.Lock per queue, dropped when nobody holds or waits for it."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[bytes, list] = {}  # recipient id -> [lock, users]

    @asynccontextmanager
    async def hold(self, recipient_id: bytes) -> AsyncIterator[None]:
        entry = self._locks.get(recipient_id)
        if entry is None:
            entry = self._locks[recipient_id] = [trio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[recipient_id]

    def __len__(self) -> int:
        return len(self._locks)


class PostgresMessageStore:
    """Undelivered messages in the `messages` table."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._locks = _QueueLocks()

    async def write_message(self, recipient_id: bytes, message: Message, quota: int) -> WriteResult:
        query = "SELECT write_message(%s, %s, %s, %s, %s, %s)"
        params = (recipient_id, message.msg_id, message.ts, message.flags, message.body, quota)
        async with self._locks.hold(recipient_id):
            row = await self.db.run(lambda conn: conn.execute(query, params).fetchone())
        return WriteResult(row[0])

    async def write_messages(
        self, writes: Sequence[tuple[bytes, Message]], quota: int
    ) -> list[WriteResult]:
        """`write_message` of each (recipient id, message), in order, in one statement:
        all committed, or none (StoreError)."""
        if not writes:
            return []
        params = (quota, [rid for rid, _ in writes], [m.msg_id for _, m in writes],
                  [m.ts for _, m in writes], [m.flags for _, m in writes],
                  [m.body for _, m in writes])
        async with self._holding({rid for rid, _ in writes}):
            rows = await self.db.run(lambda conn: conn.execute(WRITES, params).fetchall())
        return [WriteResult(row[0]) for row in rows]

    async def delete_messages(
        self, deletes: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[bool, Message | None]]:
        """`delete_message` of each (recipient id, message id) of distinct queues, in one
        statement: all committed, or none (StoreError)."""
        if not deletes:
            return []
        params = ([rid for rid, _ in deletes], [mid for _, mid in deletes])
        async with self._holding({rid for rid, _ in deletes}):
            rows = await self.db.run(lambda conn: conn.execute(DELETES, params).fetchall())
        return [(bool(deleted), None if head[0] is None else message_from_row(head))
                for deleted, *head in rows]

    @asynccontextmanager
    async def _holding(self, recipient_ids: set[bytes]) -> AsyncIterator[None]:
        """The locks of several queues, taken in one order: no two callers wait in a ring."""
        async with AsyncExitStack() as held:
            for rid in sorted(recipient_ids):
                await held.enter_async_context(self._locks.hold(rid))
            yield

    async def peek_message(self, recipient_id: bytes) -> Message | None:
        async with self._locks.hold(recipient_id):
            row = await self.db.run(lambda conn: conn.execute(HEAD, (recipient_id,)).fetchone())
        return None if row is None else message_from_row(row)

    async def peek_messages(self, recipient_ids: Sequence[bytes]) -> list[Message | None]:
        if not recipient_ids:
            return []
        ids = sorted(set(recipient_ids))
        async with self._holding(set(ids)):
            rows = await self.db.run(lambda conn: conn.execute(HEADS, (ids,)).fetchall())
        heads = {row[0]: message_from_row(row[1:]) for row in rows}
        return [heads.get(rid) for rid in recipient_ids]

    async def delete_message(
        self, recipient_id: bytes, msg_id: bytes
    ) -> tuple[bool, Message | None]:
        query = "SELECT * FROM delete_head(%s, %s)"
        async with self._locks.hold(recipient_id):
            row = await self.db.run(
                lambda conn: conn.execute(query, (recipient_id, msg_id)).fetchone()
            )
        deleted, *head = row
        return bool(deleted), None if head[0] is None else message_from_row(head)

    async def delete_queue_messages(self, recipient_id: bytes) -> int:
        def op(conn) -> int:
            conn.execute(
                "SELECT 1 FROM message_queues WHERE recipient_id = %s FOR UPDATE", (recipient_id,)
            )
            removed = conn.execute(
                "DELETE FROM messages WHERE recipient_id = %s", (recipient_id,)
            ).rowcount
            conn.execute("DELETE FROM message_queues WHERE recipient_id = %s", (recipient_id,))
            return removed

        async with self._locks.hold(recipient_id):
            return await self.db.run(op, transaction=True)

    async def queue_size(self, recipient_id: bytes) -> int:
        query = "SELECT msg_queue_size FROM message_queues WHERE recipient_id = %s"
        row = await self.db.run(lambda conn: conn.execute(query, (recipient_id,)).fetchone())
        return 0 if row is None else row[0]

    async def expire_messages(self, recipient_id: bytes, before_ts: int) -> int:
        query = "SELECT expire_messages(%s, %s)"
        async with self._locks.hold(recipient_id):
            row = await self.db.run(
                lambda conn: conn.execute(query, (recipient_id, before_ts)).fetchone()
            )
        return row[0]

    async def queue_ids(self) -> AsyncIterator[bytes]:
        last = b""
        query = (
            "SELECT recipient_id FROM message_queues WHERE msg_queue_size > 0"
            f" AND recipient_id > %s ORDER BY recipient_id LIMIT {PAGE}"
        )
        while True:
            rows = await self.db.run(
                lambda conn, last=last: conn.execute(query, (last,)).fetchall()
            )
            for (rid,) in rows:
                yield rid
            if len(rows) < PAGE:
                return
            last = rows[-1][0]

    async def iter_messages(self, recipient_id: bytes) -> AsyncIterator[Message]:
        last = 0
        while True:
            rows = await self.db.run(
                lambda conn, last=last: conn.execute(
                    MESSAGE_PAGE, (recipient_id, last)
                ).fetchall()
            )
            for row in rows:
                yield message_from_row(row[1:])
            if len(rows) < PAGE:
                return
            last = rows[-1][0]

    async def message_count_estimate(self) -> int:
        """The catalog's estimate of the stored messages (no count of the table)."""
        query = (
            "SELECT greatest(reltuples, 0)::bigint FROM pg_class"
            " WHERE oid = to_regclass('messages')"
        )
        row = await self.db.run(lambda conn: conn.execute(query).fetchone())
        return 0 if row is None or row[0] is None else row[0]

    async def close(self) -> None:
        return None
