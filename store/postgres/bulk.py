"""Many rows into the schema and out of it by binary COPY: what `migrate-store` (and
`database import|export`, its reference names) moves into and out of PostgreSQL.

Binary COPY carries each value as its length and its bytes, so no byte of an
id, a key, a link or a message body (tab, newline, backslash, NUL, a quote)
is escaped or read as the end of a field or a row: the reference router's
import writes CSV without escaping and is correct only while no value holds
one of CSV's characters (shared/seeds/postgres-queue-store-notes.txt). Both
directions name their columns from the one list in store/postgres/schema.py,
so the rows cannot drift from the table.

An import is one transaction: all of it is stored, or nothing. An export reads
pages of `PAGE_ROWS` rows in the table's order (a page a call, keyed on the
last row seen), so a schema of any size is read in bounded memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from ..interfaces import Message, QueueLinkData, QueueRecord
from .database import PostgresDatabase
from .schema import QUEUE_COLUMNS, insert_row, record_from_row

PAGE_ROWS = 5000  # rows a page of an export

QUEUE_TYPES = [
    "bytea", "bytea[]", "bytea", "bytea", "bytea", "bool", "text", "bytea", "bytea", "bytea",
    "bytea", "bytea", "bytea", "bytea", "int8",
]
LINK_TYPES = ["bytea", "bytea"]  # fixed_data, user_data
MESSAGE_COLUMNS = "recipient_id, msg_id, msg_ts, msg_flags, msg_body, msg_quota"
MESSAGE_TYPES = ["bytea", "bytea", "int8", "bytea", "bytea", "bool"]

COPY_QUEUES_IN = (
    f"COPY msg_queues ({QUEUE_COLUMNS}, fixed_data, user_data) FROM STDIN (FORMAT BINARY)"
)
COPY_MESSAGES_IN = f"COPY messages ({MESSAGE_COLUMNS}) FROM STDIN (FORMAT BINARY)"
# The message counters of the queues an import wrote messages into, from their rows.
RECOUNT = """
INSERT INTO message_queues (recipient_id, msg_queue_size, msg_quota_reached)
SELECT recipient_id, count(*),
       (array_agg(msg_quota ORDER BY message_id DESC))[1]
FROM messages WHERE recipient_id = ANY(%s) GROUP BY recipient_id
ON CONFLICT (recipient_id) DO UPDATE
SET msg_queue_size = EXCLUDED.msg_queue_size, msg_quota_reached = EXCLUDED.msg_quota_reached
"""
# COPY takes no parameters of its own: psycopg binds these on the client, as literals.
COPY_QUEUES_OUT = (
    f"COPY (SELECT pk, {QUEUE_COLUMNS}, fixed_data, user_data FROM msg_queues"
    " WHERE deleted_at IS NULL AND pk > {after} ORDER BY pk LIMIT {limit})"
    " TO STDOUT (FORMAT BINARY)"
)
COPY_MESSAGES_OUT = (
    f"COPY (SELECT message_id, {MESSAGE_COLUMNS} FROM messages"
    " WHERE (recipient_id, message_id) > ({rid}, {after})"
    " ORDER BY recipient_id, message_id LIMIT {limit}) TO STDOUT (FORMAT BINARY)"
)


def copy_in(
    conn: psycopg.Connection,
    queues: Sequence[QueueRecord],
    links: dict[bytes, QueueLinkData],
    messages: Sequence[tuple[bytes, Message]],
) -> None:
    """Write the queues (with their links, by recipient id) and messages (each queue's
    oldest first) into the tables, and the counters of the queues written into; the
    caller's transaction makes it all or nothing."""
    with conn.cursor() as cur:
        if queues:
            with cur.copy(COPY_QUEUES_IN) as copy:
                copy.set_types(QUEUE_TYPES + LINK_TYPES)
                for rec in queues:
                    copy.write_row(insert_row(rec, links.get(rec.recipient_id)))
        if messages:
            with cur.copy(COPY_MESSAGES_IN) as copy:
                copy.set_types(MESSAGE_TYPES)
                for rid, m in messages:
                    copy.write_row((rid, m.msg_id, m.ts, m.flags, m.body, m.quota))
            cur.execute(RECOUNT, (list({rid for rid, _ in messages}),))


class PostgresExport:
    """The live queues (each with its link) and the messages of a schema, page by page."""

    def __init__(self, db: PostgresDatabase, page_rows: int = PAGE_ROWS) -> None:
        self.db = db
        self.page_rows = page_rows

    async def queue_pages(
        self,
    ) -> AsyncIterator[list[tuple[QueueRecord, QueueLinkData | None]]]:
        after = 0
        while True:
            rows = await self.db.run(lambda conn, after=after: self._queue_page(conn, after))
            if rows:
                yield [(record_from_row(row[1:16]), _link(row)) for row in rows]
            if len(rows) < self.page_rows:
                return
            after = rows[-1][0]

    async def message_pages(self) -> AsyncIterator[list[tuple[bytes, Message]]]:
        """Every message, queue by queue (in recipient id order), each queue's oldest first."""
        after: tuple[bytes, int] = (b"", 0)
        while True:
            rows = await self.db.run(lambda conn, after=after: self._message_page(conn, *after))
            if rows:
                yield [(row[1], Message(row[2], row[3], row[4], row[5], row[6])) for row in rows]
            if len(rows) < self.page_rows:
                return
            after = (rows[-1][1], rows[-1][0])

    async def message_count(self) -> int:
        """The stored messages, from the queues' counters (no count of the table)."""
        query = "SELECT coalesce(sum(msg_queue_size), 0)::bigint FROM message_queues"
        return await self.db.run(lambda conn: conn.execute(query).fetchone()[0])

    async def queue_sizes(self, recipient_ids: Sequence[bytes]) -> list[int]:
        """The message counts of the queues `recipient_ids`, in one query."""
        ids = list(recipient_ids)
        query = (
            "SELECT recipient_id, msg_queue_size FROM message_queues"
            " WHERE recipient_id = ANY(%s)"
        )
        rows = await self.db.run(lambda conn: conn.execute(query, (ids,)).fetchall())
        sizes = {rid: size for rid, size in rows}
        return [sizes.get(rid, 0) for rid in ids]

    def _queue_page(self, conn: psycopg.Connection, after: int) -> list[tuple[Any, ...]]:
        statement = sql.SQL(COPY_QUEUES_OUT).format(
            after=sql.Literal(after), limit=sql.Literal(self.page_rows)
        )
        with conn.cursor() as cur, cur.copy(statement) as copy:
            copy.set_types(["int8", *QUEUE_TYPES, *LINK_TYPES])
            return list(copy.rows())

    def _message_page(
        self, conn: psycopg.Connection, rid: bytes, after: int
    ) -> list[tuple[Any, ...]]:
        statement = sql.SQL(COPY_MESSAGES_OUT).format(
            rid=sql.Literal(rid), after=sql.Literal(after),
            limit=sql.Literal(self.page_rows),
        )
        with conn.cursor() as cur, cur.copy(statement) as copy:
            copy.set_types(["int8", *MESSAGE_TYPES])
            return list(copy.rows())


def _link(row: tuple[Any, ...]) -> QueueLinkData | None:
    link_id, fixed, user = row[14], row[16], row[17]
    return None if link_id is None else QueueLinkData(link_id, fixed, user)
