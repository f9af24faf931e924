"""The database's tables, and the rows records and messages become."""

from __future__ import annotations

from typing import Any

from ..interfaces import (
    Message,
    NotifierCreds,
    Party,
    QueueRecord,
    QueueStatus,
)

SCHEMA_VERSION = 1
PAGE = 1000  # rows per worker call when iterating


SCHEMA = """
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



# --- rows ------------------------------------------------------------------------

QUEUE_COLUMNS = (
    "recipient_id, sender_id, recipient_key, rcv_dh_secret, sender_key, snd_secure, status, "
    "notifier_id, notifier_key, rcv_ntf_dh_secret, rcv_service_id, ntf_service_id, updated_at"
)
INSERT_QUEUE = f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
SELECT_QUEUE = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE deleted_at IS NULL"
LIVE_BY = {
    Party.RECIPIENT: SELECT_QUEUE + " AND recipient_id = ?",
    Party.SENDER: SELECT_QUEUE + " AND sender_id = ?",
    Party.NOTIFIER: SELECT_QUEUE + " AND notifier_id = ?",
}
MESSAGE_COLUMNS = "msg_id, ts, flags, body, quota"
INSERT_MESSAGE = (
    "INSERT INTO messages (recipient_id, msg_id, ts, flags, body, quota) VALUES (?,?,?,?,?,?)"
)
QUEUE_PAGE = (
    f"SELECT pk, {QUEUE_COLUMNS} FROM queues WHERE deleted_at IS NULL AND pk > ?"
    f" ORDER BY pk LIMIT {PAGE}"
)
MESSAGE_PAGE = (
    f"SELECT seq, {MESSAGE_COLUMNS} FROM messages WHERE recipient_id = ? AND seq > ?"
    f" ORDER BY seq LIMIT {PAGE}"
)
HEAD = f"SELECT seq, {MESSAGE_COLUMNS} FROM messages WHERE recipient_id = ? ORDER BY seq LIMIT 1"


def queue_row(r: QueueRecord) -> tuple[Any, ...]:
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


def record_from_row(row: tuple[Any, ...]) -> QueueRecord:
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


def message_row(rid: bytes, m: Message) -> tuple[Any, ...]:
    return (rid, m.msg_id, m.ts, m.flags, m.body, int(m.quota))


def message_from_row(row: tuple[Any, ...]) -> Message:
    msg_id, ts, flags, body, quota = row
    return Message(msg_id, ts, flags, body, bool(quota))
