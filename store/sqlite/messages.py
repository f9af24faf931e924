"""The SQLite message store: one table, ordered per queue. `SqliteMessageStore`
keeps no cache: the head of a queue is one indexed read, and the heads of a
block's queues (`peek_messages`) one statement per chunk of ids, in one worker call."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Sequence

from ..interfaces import (
    Message,
    WriteResult,
)
from .database import SqliteDatabase
from .schema import (
    HEAD,
    INSERT_MESSAGE,
    MAX_IN_IDS,
    MESSAGE_PAGE,
    PAGE,
    heads_of,
    message_from_row,
    message_row,
)

# --- message store -------------------------------------------------------------------


class SqliteMessageStore:
    """Undelivered messages in the `messages` table, ordered by `seq` within a queue."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def write_message(self, recipient_id: bytes, message: Message, quota: int) -> WriteResult:
        row = message_row(recipient_id, message)
        marker = message_row(recipient_id, Message(message.msg_id, message.ts, b"", b"", True))

        def op(conn: sqlite3.Connection) -> WriteResult:
            size, tail_is_marker = conn.execute(
                "SELECT count(*), (SELECT quota FROM messages WHERE recipient_id = ?1"
                " ORDER BY seq DESC LIMIT 1) FROM messages WHERE recipient_id = ?1",
                (recipient_id,),
            ).fetchone()
            if tail_is_marker:
                return WriteResult.QUOTA_EXCEEDED
            if size >= quota:
                conn.execute(INSERT_MESSAGE, marker)
                return WriteResult.QUOTA_EXCEEDED
            conn.execute(INSERT_MESSAGE, row)
            return WriteResult.STORED if size else WriteResult.STORED_INTO_EMPTY

        return await self.db.write(op, adds=True)

    async def peek_message(self, recipient_id: bytes) -> Message | None:
        row = await self.db.read(lambda conn: conn.execute(HEAD, (recipient_id,)).fetchone())
        return None if row is None else message_from_row(row[1:])

    async def peek_messages(self, recipient_ids: Sequence[bytes]) -> list[Message | None]:
        ids = list(dict.fromkeys(recipient_ids))
        if not ids:
            return []

        def op(conn: sqlite3.Connection) -> dict[bytes, Message]:
            chunk = min(conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER), MAX_IN_IDS)
            heads = {}
            for start in range(0, len(ids), chunk):
                part = ids[start : start + chunk]
                for row in conn.execute(heads_of(len(part)), part):
                    heads[row[0]] = message_from_row(row[1:])
            return heads

        heads = await self.db.read(op)
        return [heads.get(rid) for rid in recipient_ids]

    async def delete_message(
        self, recipient_id: bytes, msg_id: bytes
    ) -> tuple[bool, Message | None]:
        def op(conn: sqlite3.Connection) -> tuple[bool, Message | None]:
            head = conn.execute(HEAD, (recipient_id,)).fetchone()
            if head is None:
                return False, None
            if head[1] != msg_id:
                return False, message_from_row(head[1:])
            conn.execute("DELETE FROM messages WHERE seq = ?", (head[0],))
            nxt = conn.execute(HEAD, (recipient_id,)).fetchone()
            return True, None if nxt is None else message_from_row(nxt[1:])

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
                lambda conn, last=last: conn.execute(MESSAGE_PAGE, (recipient_id, last)).fetchall()
            )
            for row in rows:
                yield message_from_row(row[1:])
            if len(rows) < PAGE:
                return
            last = rows[-1][0]

    async def close(self) -> None:
        return None
