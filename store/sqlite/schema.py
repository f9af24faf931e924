"""The database's tables, and the rows records and messages become."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from router.protocol.ids_hash import ids_hash_bytes, ids_hash_int

from ..interfaces import (
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    ServiceRecord,
)

SCHEMA_VERSION = 5
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
"""  # version 1; MIGRATIONS bring it up to SCHEMA_VERSION

# What each schema version adds to the one before: a database of an older
# version is brought up to date when it opens (a fresh one passes through all).
MIGRATIONS = {
    2: """
ALTER TABLE queues ADD COLUMN queue_mode BLOB;
ALTER TABLE queues ADD COLUMN link_id BLOB;
ALTER TABLE queues ADD COLUMN link_fixed BLOB;
ALTER TABLE queues ADD COLUMN link_user BLOB;
CREATE UNIQUE INDEX IF NOT EXISTS queues_link ON queues(link_id)
    WHERE deleted_at IS NULL AND link_id IS NOT NULL;
""",  # short links (v15): the queue mode and the queue's link
    3: """
ALTER TABLE queues ADD COLUMN more_recipient_keys BLOB;
""",  # RKEY: the recipient keys after the first (`pack_keys`), NULL for none
    4: """
CREATE TABLE IF NOT EXISTS services (
    service_id BLOB PRIMARY KEY,
    role BLOB NOT NULL,
    cert BLOB NOT NULL,
    cert_hash BLOB NOT NULL,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS services_cert ON services(role, cert_hash);
CREATE TABLE IF NOT EXISTS service_queues (
    service_id BLOB NOT NULL,
    party TEXT NOT NULL,
    queue_count INTEGER NOT NULL,
    ids_hash BLOB NOT NULL,
    PRIMARY KEY (service_id, party)
) WITHOUT ROWID;
UPDATE queues SET rcv_service_id = NULL, ntf_service_id = NULL
    WHERE rcv_service_id IS NOT NULL OR ntf_service_id IS NOT NULL;
""",  # services by certificate (docs/protocol.md#services) with their queues' count and
    # ids hash; associations made before have no service record behind them, so they
    # are released (their services subscribe the queues again).
    5: """
DROP INDEX IF EXISTS queues_rcv_service;
DROP INDEX IF EXISTS queues_ntf_service;
CREATE INDEX IF NOT EXISTS queues_rcv_service_ids ON queues(rcv_service_id, recipient_id)
    WHERE deleted_at IS NULL AND rcv_service_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS queues_ntf_service_ids ON queues(ntf_service_id, notifier_id)
    WHERE deleted_at IS NULL AND ntf_service_id IS NOT NULL;
""",  # a service's queues by pages in id order (`service_queue_page`), off the index alone
}

# --- rows ------------------------------------------------------------------------

QUEUE_COLUMNS = (  # a record's columns; the link's data (link_fixed, link_user) is apart
    "recipient_id, sender_id, recipient_key, rcv_dh_secret, sender_key, snd_secure, status, "
    "notifier_id, notifier_key, rcv_ntf_dh_secret, rcv_service_id, ntf_service_id, updated_at, "
    "queue_mode, link_id, more_recipient_keys"
)
QUEUE_COLUMN_COUNT = QUEUE_COLUMNS.count(",") + 1
INSERT_QUEUE = (
    f"INSERT INTO queues ({QUEUE_COLUMNS}, link_fixed, link_user)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
SELECT_QUEUE = f"SELECT {QUEUE_COLUMNS} FROM queues WHERE deleted_at IS NULL"
LIVE_BY = {
    Party.RECIPIENT: SELECT_QUEUE + " AND recipient_id = ?",
    Party.SENDER: SELECT_QUEUE + " AND sender_id = ?",
    Party.NOTIFIER: SELECT_QUEUE + " AND notifier_id = ?",
    Party.LINK: SELECT_QUEUE + " AND link_id = ?",
}
_PARTY_COLUMN = {
    Party.RECIPIENT: "recipient_id",
    Party.SENDER: "sender_id",
    Party.NOTIFIER: "notifier_id",
    Party.LINK: "link_id",
}
# A page of a service's queues (`service_queue_page`): (service id, after, limit), read
# off the indexes of schema version 5 alone.
SERVICE_PAGE = {
    Party.RECIPIENT: "SELECT recipient_id FROM queues WHERE deleted_at IS NULL"
    " AND rcv_service_id = ? AND recipient_id > ? ORDER BY recipient_id LIMIT ?",
    Party.NOTIFIER: "SELECT notifier_id FROM queues WHERE deleted_at IS NULL"
    " AND ntf_service_id = ? AND notifier_id > ? ORDER BY notifier_id LIMIT ?",
}
# Ids in one `IN (...)` (SQLite's own limit may be lower: SQLITE_LIMIT_VARIABLE_NUMBER).
MAX_IN_IDS = 999


def live_in(party: Party, count: int) -> str:
    """The live rows whose `party` id is one of `count` ids (a block's lookups)."""
    return f"{SELECT_QUEUE} AND {_PARTY_COLUMN[party]} IN ({','.join('?' * count)})"


def heads_of(count: int) -> str:
    """The head of each of `count` queues that has one: (recipient id, message columns)."""
    ids = ",".join(["(?)"] * count)
    return (
        f"WITH ids(rid) AS (VALUES {ids}) SELECT ids.rid, {_HEAD_COLUMNS} FROM ids"
        " JOIN messages m ON m.seq = (SELECT seq FROM messages WHERE recipient_id = ids.rid"
        " ORDER BY seq LIMIT 1)"
    )


LINK_OF = (
    "SELECT link_id, link_fixed, link_user FROM queues"
    " WHERE recipient_id = ? AND deleted_at IS NULL AND link_id IS NOT NULL"
)
LINK_PAGE = (
    "SELECT pk, recipient_id, link_id, link_fixed, link_user FROM queues"
    f" WHERE deleted_at IS NULL AND link_id IS NOT NULL AND pk > ? ORDER BY pk LIMIT {PAGE}"
)
MESSAGE_COLUMNS = "msg_id, ts, flags, body, quota"
_HEAD_COLUMNS = "m.msg_id, m.ts, m.flags, m.body, m.quota"
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
        r.queue_mode,
        r.link_id,
        pack_keys(r.more_recipient_keys),
    )


def insert_row(r: QueueRecord, link: QueueLinkData | None) -> tuple[Any, ...]:
    """The values of INSERT_QUEUE: the record's row, then its link's two parts."""
    return (*queue_row(r), *((link.fixed_data, link.user_data) if link else (None, None)))


_STATUS_OF = {status.value: status for status in QueueStatus}
# A frozen dataclass's __init__ sets every field with object.__setattr__; a row becomes
# its record through the fields' own slots instead, ~2x quicker: a reconnect storm turns
# a block's ~100 rows into records on the event loop (bench/RESULTS.md, "Reconnect storm").
# The names are checked here so that a new field of QueueRecord fails at import, not later.
if [f.name for f in fields(QueueRecord)] != [
    "recipient_id", "sender_id", "recipient_key", "rcv_dh_secret", "sender_key", "snd_secure",
    "status", "notifier", "rcv_service_id", "ntf_service_id", "updated_at", "queue_mode",
    "link_id", "more_recipient_keys",
]:
    raise TypeError("record_from_row sets QueueRecord's fields one by one: add the new one there")
(
    _set_rid, _set_sid, _set_rkey, _set_rdh, _set_skey, _set_secure, _set_status,
    _set_notifier, _set_rsvc, _set_nsvc, _set_updated, _set_mode, _set_lid, _set_more_keys,
) = (QueueRecord.__dict__[f.name].__set__ for f in fields(QueueRecord))
_new = object.__new__


def record_from_row(row: tuple[Any, ...]) -> QueueRecord:
    """The record of a row of QUEUE_COLUMNS (equal to the record `queue_row` was given)."""
    (
        rid, sid, rkey, rdh, skey, secure, status, nid, nkey, ndh, rsvc, nsvc, updated, mode, lid,
        more_keys,
    ) = row
    rec = _new(QueueRecord)
    _set_rid(rec, rid)
    _set_sid(rec, sid)
    _set_rkey(rec, rkey)
    _set_rdh(rec, rdh)
    _set_skey(rec, skey)
    _set_secure(rec, bool(secure))
    _set_status(rec, _STATUS_OF[status])
    _set_notifier(rec, None if nid is None else NotifierCreds(nid, nkey, ndh))
    _set_rsvc(rec, rsvc)
    _set_nsvc(rec, nsvc)
    _set_updated(rec, updated)
    _set_mode(rec, mode)
    _set_lid(rec, lid)
    _set_more_keys(rec, () if more_keys is None else unpack_keys(more_keys))
    return rec


def pack_keys(keys: tuple[bytes, ...]) -> bytes | None:
    """Keys as one BLOB: each a 2-byte big-endian length and its bytes; None for none."""
    if not keys:
        return None
    return b"".join(len(k).to_bytes(2, "big") + k for k in keys)


def unpack_keys(blob: bytes | None) -> tuple[bytes, ...]:
    keys, i = [], 0
    while blob and i < len(blob):
        n = int.from_bytes(blob[i : i + 2], "big")
        keys.append(bytes(blob[i + 2 : i + 2 + n]))
        i += 2 + n
    return tuple(keys)


SERVICE_COLUMNS = "service_id, role, cert, cert_hash, created_at"
INSERT_SERVICE = (
    f"INSERT INTO services ({SERVICE_COLUMNS}) VALUES (?,?,?,?,?)"
    " ON CONFLICT DO NOTHING"
)
SERVICE_BY_CERT = f"SELECT {SERVICE_COLUMNS} FROM services WHERE role = ? AND cert_hash = ?"
SERVICE_PAGE_BY_ID = (
    f"SELECT {SERVICE_COLUMNS} FROM services WHERE service_id > ? ORDER BY service_id LIMIT {PAGE}"
)
SERVICE_FIGURES = (
    "SELECT queue_count, ids_hash FROM service_queues WHERE service_id = ? AND party = ?"
)


def service_row(s: ServiceRecord) -> tuple[Any, ...]:
    return (s.service_id, s.role, s.cert, s.cert_hash, s.created_at)


def service_from_row(row: tuple[Any, ...]) -> ServiceRecord:
    return ServiceRecord(*row)


def change_service_figures(
    conn: sqlite3.Connection, changes: Iterable[tuple[Party, bytes, int, int]]
) -> None:
    """Apply `queue_table.service_changes` to the `service_queues` rows, in the
    transaction that changes the queues (one row per service and side)."""
    for party, service_id, delta, digest in changes:
        key = (service_id, party.value)
        row = conn.execute(SERVICE_FIGURES, key).fetchone()
        count, value = (0, 0) if row is None else (row[0], ids_hash_int(row[1]))
        count, value = count + delta, value ^ digest
        if count:
            conn.execute(
                "INSERT INTO service_queues (service_id, party, queue_count, ids_hash)"
                " VALUES (?,?,?,?) ON CONFLICT DO UPDATE SET"
                " queue_count = excluded.queue_count, ids_hash = excluded.ids_hash",
                (*key, count, ids_hash_bytes(value)),
            )
        elif row is not None:
            conn.execute("DELETE FROM service_queues WHERE service_id = ? AND party = ?", key)


def message_row(rid: bytes, m: Message) -> tuple[Any, ...]:
    return (rid, m.msg_id, m.ts, m.flags, m.body, int(m.quota))


def message_from_row(row: tuple[Any, ...]) -> Message:
    msg_id, ts, flags, body, quota = row
    return Message(msg_id, ts, flags, body, bool(quota))
