"""The PostgreSQL schema, its versioned migrations, and the rows records and messages become.

The tables follow the reference router's (`msg_queues` with a soft delete,
`services`, `messages`), with two differences. A service's queue count and ids
hash (docs/protocol.md#services) are kept per side in `service_queues` by
triggers on `msg_queues`, so that every path that associates, releases or
deletes a queue (bulk import included) keeps them current. And a queue's message
count and its QUOTA state are kept in `message_queues`, whose row a message
write, ACK or expiry locks: the message store does not depend on the queue
store's rows, and no count ever scans `messages`.

`MIGRATIONS[n]` brings the schema from version n-1 to n; `schema_migrations`
records the versions applied. A database at a version above the last one here
was written by a newer router and is refused.
"""

from __future__ import annotations

from typing import Any

from ..interfaces import Message, NotifierCreds, Party, QueueLinkData, QueueRecord, QueueStatus

PAGE = 1000  # rows per worker call when iterating

MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""

_V1 = """
CREATE TABLE msg_queues (
    pk BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recipient_id BYTEA NOT NULL,
    recipient_keys BYTEA[] NOT NULL,
    rcv_dh_secret BYTEA NOT NULL,
    sender_id BYTEA NOT NULL,
    sender_key BYTEA,
    snd_secure BOOLEAN NOT NULL,
    status TEXT NOT NULL,
    queue_mode BYTEA,
    notifier_id BYTEA,
    notifier_key BYTEA,
    rcv_ntf_dh_secret BYTEA,
    rcv_service_id BYTEA,
    ntf_service_id BYTEA,
    link_id BYTEA,
    fixed_data BYTEA,
    user_data BYTEA,
    updated_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE UNIQUE INDEX idx_msg_queues_recipient_id ON msg_queues (recipient_id)
    WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX idx_msg_queues_sender_id ON msg_queues (sender_id)
    WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX idx_msg_queues_notifier_id ON msg_queues (notifier_id)
    WHERE deleted_at IS NULL AND notifier_id IS NOT NULL;
CREATE UNIQUE INDEX idx_msg_queues_link_id ON msg_queues (link_id)
    WHERE deleted_at IS NULL AND link_id IS NOT NULL;
CREATE INDEX idx_msg_queues_rcv_service_id ON msg_queues (rcv_service_id)
    WHERE deleted_at IS NULL AND rcv_service_id IS NOT NULL;
CREATE INDEX idx_msg_queues_ntf_service_id ON msg_queues (ntf_service_id)
    WHERE deleted_at IS NULL AND ntf_service_id IS NOT NULL;
CREATE INDEX idx_msg_queues_deleted_at ON msg_queues (deleted_at)
    WHERE deleted_at IS NOT NULL;

CREATE TABLE services (
    service_id BYTEA PRIMARY KEY,
    service_role TEXT NOT NULL,
    service_cert BYTEA NOT NULL,
    service_cert_hash BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (service_role, service_cert_hash)
);

-- side 'r': recipient ids of the queues whose recipient side the service covers;
-- side 'n': notifier ids of those whose notifier side it covers.
CREATE TABLE service_queues (
    service_id BYTEA NOT NULL,
    side "char" NOT NULL,
    queue_count BIGINT NOT NULL DEFAULT 0,
    queue_ids_hash BYTEA NOT NULL DEFAULT '\\x00000000000000000000000000000000',
    PRIMARY KEY (service_id, side)
);

CREATE TABLE messages (
    message_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recipient_id BYTEA NOT NULL,
    msg_id BYTEA NOT NULL,
    msg_ts BIGINT NOT NULL,
    msg_flags BYTEA NOT NULL,
    msg_body BYTEA NOT NULL,
    msg_quota BOOLEAN NOT NULL
);
CREATE INDEX idx_messages_recipient_id ON messages (recipient_id, message_id);

CREATE TABLE message_queues (
    recipient_id BYTEA PRIMARY KEY,
    msg_queue_size INTEGER NOT NULL DEFAULT 0,
    msg_quota_reached BOOLEAN NOT NULL DEFAULT FALSE
);

-- XOR of a 16-byte hash with the MD5 of an id.
CREATE FUNCTION xor_md5(p_hash BYTEA, p_id BYTEA) RETURNS BYTEA
LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT int8send(substring(x FROM 1 FOR 64)::bit(64)::bigint)
      || int8send(substring(x FROM 65 FOR 64)::bit(64)::bigint)
  FROM (SELECT ('x' || encode(p_hash, 'hex'))::bit(128) # ('x' || md5(p_id))::bit(128) AS x) s
$$;

CREATE FUNCTION service_queues_change(p_service_id BYTEA, p_side "char", p_id BYTEA,
                                      p_change INTEGER) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO service_queues (service_id, side, queue_count, queue_ids_hash)
  VALUES (p_service_id, p_side, p_change, xor_md5('\\x00000000000000000000000000000000', p_id))
  ON CONFLICT (service_id, side) DO UPDATE
  SET queue_count = service_queues.queue_count + p_change,
      queue_ids_hash = xor_md5(service_queues.queue_ids_hash, p_id);
END;
$$;

-- The side of a queue a service covers counts while the queue is live.
CREATE FUNCTION on_queue_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  old_rcv BYTEA; new_rcv BYTEA; old_ntf BYTEA; new_ntf BYTEA;
BEGIN
  IF TG_OP <> 'INSERT' AND OLD.deleted_at IS NULL THEN
    old_rcv := OLD.rcv_service_id;
    IF OLD.notifier_id IS NOT NULL THEN old_ntf := OLD.ntf_service_id; END IF;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.deleted_at IS NULL THEN
    new_rcv := NEW.rcv_service_id;
    IF NEW.notifier_id IS NOT NULL THEN new_ntf := NEW.ntf_service_id; END IF;
  END IF;
  IF old_rcv IS DISTINCT FROM new_rcv THEN
    IF old_rcv IS NOT NULL THEN
      PERFORM service_queues_change(old_rcv, 'r', OLD.recipient_id, -1);
    END IF;
    IF new_rcv IS NOT NULL THEN
      PERFORM service_queues_change(new_rcv, 'r', NEW.recipient_id, 1);
    END IF;
  END IF;
  IF old_ntf IS DISTINCT FROM new_ntf OR (old_ntf IS NOT NULL
      AND OLD.notifier_id IS DISTINCT FROM NEW.notifier_id) THEN
    IF old_ntf IS NOT NULL THEN
      PERFORM service_queues_change(old_ntf, 'n', OLD.notifier_id, -1);
    END IF;
    IF new_ntf IS NOT NULL THEN
      PERFORM service_queues_change(new_ntf, 'n', NEW.notifier_id, 1);
    END IF;
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER tr_queue_change AFTER INSERT OR UPDATE OR DELETE ON msg_queues
  FOR EACH ROW EXECUTE FUNCTION on_queue_change();

-- Lock the queue's message row (made on first use) and return its size and QUOTA state.
CREATE FUNCTION lock_message_queue(p_recipient_id BYTEA, OUT q_size INTEGER,
                                   OUT q_full BOOLEAN)
LANGUAGE plpgsql AS $$
BEGIN
  LOOP
    SELECT msg_queue_size, msg_quota_reached INTO q_size, q_full
    FROM message_queues WHERE recipient_id = p_recipient_id FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO message_queues (recipient_id) VALUES (p_recipient_id)
    ON CONFLICT (recipient_id) DO NOTHING;
  END LOOP;
END;
$$;

-- docs/protocol.md#behaviour: once `p_quota` messages are stored the QUOTA marker is
-- appended, and every write is refused until the queue is empty.
CREATE FUNCTION write_message(p_recipient_id BYTEA, p_msg_id BYTEA, p_ts BIGINT,
                              p_flags BYTEA, p_body BYTEA, p_quota INTEGER) RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
  q_size INTEGER; q_full BOOLEAN;
BEGIN
  SELECT * INTO q_size, q_full FROM lock_message_queue(p_recipient_id);
  IF q_full THEN
    RETURN 'quota-exceeded';
  END IF;
  IF q_size >= p_quota THEN
    INSERT INTO messages (recipient_id, msg_id, msg_ts, msg_flags, msg_body, msg_quota)
    VALUES (p_recipient_id, p_msg_id, p_ts, '', '', TRUE);
    UPDATE message_queues SET msg_queue_size = q_size + 1, msg_quota_reached = TRUE
    WHERE recipient_id = p_recipient_id;
    RETURN 'quota-exceeded';
  END IF;
  INSERT INTO messages (recipient_id, msg_id, msg_ts, msg_flags, msg_body, msg_quota)
  VALUES (p_recipient_id, p_msg_id, p_ts, p_flags, p_body, FALSE);
  UPDATE message_queues SET msg_queue_size = q_size + 1 WHERE recipient_id = p_recipient_id;
  RETURN CASE WHEN q_size = 0 THEN 'stored-into-empty' ELSE 'stored' END;
END;
$$;

-- ACK: delete the oldest message if its id is `p_msg_id`; return whether it was
-- deleted and the oldest message after.
CREATE FUNCTION delete_head(p_recipient_id BYTEA, p_msg_id BYTEA,
    OUT deleted BOOLEAN, OUT r_msg_id BYTEA, OUT r_ts BIGINT, OUT r_flags BYTEA,
    OUT r_body BYTEA, OUT r_quota BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
  q_size INTEGER; q_full BOOLEAN; head RECORD;
BEGIN
  deleted := FALSE;
  SELECT msg_queue_size, msg_quota_reached INTO q_size, q_full
  FROM message_queues WHERE recipient_id = p_recipient_id FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  SELECT message_id, msg_id INTO head FROM messages
  WHERE recipient_id = p_recipient_id ORDER BY message_id LIMIT 1;
  IF FOUND AND head.msg_id = p_msg_id THEN
    DELETE FROM messages WHERE message_id = head.message_id;
    deleted := TRUE;
    UPDATE message_queues SET msg_queue_size = greatest(q_size - 1, 0),
                              msg_quota_reached = q_full AND q_size > 1
    WHERE recipient_id = p_recipient_id;
  END IF;
  SELECT msg_id, msg_ts, msg_flags, msg_body, msg_quota
  INTO r_msg_id, r_ts, r_flags, r_body, r_quota FROM messages
  WHERE recipient_id = p_recipient_id ORDER BY message_id LIMIT 1;
END;
$$;

-- Only the run of old messages at the head goes, as if popped one by one: a newer
-- message shields the ones behind it.
CREATE FUNCTION expire_messages(p_recipient_id BYTEA, p_before_ts BIGINT) RETURNS INTEGER
LANGUAGE plpgsql AS $$
DECLARE
  q_size INTEGER; q_full BOOLEAN; keep_from BIGINT; removed INTEGER;
BEGIN
  SELECT msg_queue_size, msg_quota_reached INTO q_size, q_full
  FROM message_queues WHERE recipient_id = p_recipient_id FOR UPDATE;
  IF NOT FOUND OR q_size = 0 THEN
    RETURN 0;
  END IF;
  SELECT min(message_id) INTO keep_from FROM messages
  WHERE recipient_id = p_recipient_id AND msg_ts >= p_before_ts;
  DELETE FROM messages WHERE recipient_id = p_recipient_id
    AND message_id < coalesce(keep_from, 9223372036854775807);
  GET DIAGNOSTICS removed = ROW_COUNT;
  IF removed > 0 THEN
    UPDATE message_queues SET msg_queue_size = greatest(q_size - removed, 0),
                              msg_quota_reached = q_full AND q_size > removed
    WHERE recipient_id = p_recipient_id;
  END IF;
  RETURN removed;
END;
$$;
"""

# version -> (name, SQL); applied in order, each in one transaction with its record.
# A service's queues by pages in id order (`service_queue_page`), off the index alone.
_V2 = """
DROP INDEX IF EXISTS idx_msg_queues_rcv_service_id;
DROP INDEX IF EXISTS idx_msg_queues_ntf_service_id;
CREATE INDEX idx_msg_queues_rcv_service_ids ON msg_queues (rcv_service_id, recipient_id)
    WHERE deleted_at IS NULL AND rcv_service_id IS NOT NULL;
CREATE INDEX idx_msg_queues_ntf_service_ids ON msg_queues (ntf_service_id, notifier_id)
    WHERE deleted_at IS NULL AND ntf_service_id IS NOT NULL;
"""

MIGRATIONS: dict[int, tuple[str, str]] = {
    1: ("queues, links, services and messages", _V1),
    2: ("a service's queues indexed by id", _V2),
}
SCHEMA_VERSION = max(MIGRATIONS)


# --- rows ------------------------------------------------------------------------

QUEUE_COLUMNS = (
    "recipient_id, recipient_keys, rcv_dh_secret, sender_id, sender_key, snd_secure, status, "
    "queue_mode, notifier_id, notifier_key, rcv_ntf_dh_secret, rcv_service_id, ntf_service_id, "
    "link_id, updated_at"
)
LINK_COLUMNS = "fixed_data, user_data"
INSERT_QUEUE = (
    f"INSERT INTO msg_queues ({QUEUE_COLUMNS}, {LINK_COLUMNS})"
    f" VALUES ({', '.join(['%s'] * 17)})"
)
SELECT_QUEUE = f"SELECT {QUEUE_COLUMNS} FROM msg_queues WHERE deleted_at IS NULL"
PARTY_COLUMN = {
    Party.RECIPIENT: "recipient_id",
    Party.SENDER: "sender_id",
    Party.NOTIFIER: "notifier_id",
    Party.LINK: "link_id",
}
LIVE_BY = {party: f"{SELECT_QUEUE} AND {column} = %s" for party, column in PARTY_COLUMN.items()}
LIVE_BY_ANY = {
    party: f"SELECT {column}, {QUEUE_COLUMNS} FROM msg_queues"
    f" WHERE deleted_at IS NULL AND {column} = ANY(%s)"
    for party, column in PARTY_COLUMN.items()
}
SERVICE_PAGE_BY_ID = (
    "SELECT service_id, service_role, service_cert, service_cert_hash, created_at FROM services"
    f" WHERE service_id > %s ORDER BY service_id LIMIT {PAGE}"
)
# A page of a service's queues: (service id, after, limit).
SERVICE_PAGE = {
    Party.RECIPIENT: "SELECT recipient_id FROM msg_queues WHERE deleted_at IS NULL"
    " AND rcv_service_id = %s AND recipient_id > %s ORDER BY recipient_id LIMIT %s",
    Party.NOTIFIER: "SELECT notifier_id FROM msg_queues WHERE deleted_at IS NULL"
    " AND ntf_service_id = %s AND notifier_id > %s ORDER BY notifier_id LIMIT %s",
}
QUEUE_PAGE = (
    f"SELECT pk, {QUEUE_COLUMNS} FROM msg_queues WHERE deleted_at IS NULL AND pk > %s"
    f" ORDER BY pk LIMIT {PAGE}"
)
LINK_OF = (
    "SELECT link_id, fixed_data, user_data FROM msg_queues"
    " WHERE recipient_id = %s AND deleted_at IS NULL AND link_id IS NOT NULL"
)
LINK_PAGE = (
    "SELECT pk, recipient_id, link_id, fixed_data, user_data FROM msg_queues"
    f" WHERE deleted_at IS NULL AND link_id IS NOT NULL AND pk > %s ORDER BY pk LIMIT {PAGE}"
)
MESSAGE_COLUMNS = "msg_id, msg_ts, msg_flags, msg_body, msg_quota"
HEADS = (
    f"SELECT DISTINCT ON (recipient_id) recipient_id, {MESSAGE_COLUMNS} FROM messages"
    " WHERE recipient_id = ANY(%s) ORDER BY recipient_id, message_id"
)
HEAD = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE recipient_id = %s"
    " ORDER BY message_id LIMIT 1"
)
# A block's SENDs (ACKs) in one statement: one round trip, one transaction. The
# functions are volatile, so PostgreSQL evaluates them after the ORDER BY, in the
# block's order (the SELECT reference, "ORDER BY"): writes of one queue keep their order.
# The arrays go in binary (%b): a block's bodies as a text bytea[] literal cost the
# database more to parse than the writes themselves (bench/RESULTS.md, "Store kinds
# side by side, PostgreSQL included").
WRITES = (
    "SELECT write_message(rid, mid, ts, flags, body, %b) FROM unnest("
    "%b::bytea[], %b::bytea[], %b::bigint[], %b::bytea[], %b::bytea[])"
    " WITH ORDINALITY AS t(rid, mid, ts, flags, body, n) ORDER BY n"
)
# The CTE is materialized, so that each delete_head runs once per row, not once per
# field of its result.
DELETES = (
    "WITH r AS MATERIALIZED (SELECT n, delete_head(rid, mid) AS d FROM unnest("
    "%b::bytea[], %b::bytea[]) WITH ORDINALITY AS t(rid, mid, n) ORDER BY n)"
    " SELECT (d).deleted, (d).r_msg_id, (d).r_ts, (d).r_flags, (d).r_body, (d).r_quota"
    " FROM r ORDER BY n"
)
MESSAGE_PAGE = (
    f"SELECT message_id, {MESSAGE_COLUMNS} FROM messages WHERE recipient_id = %s"
    f" AND message_id > %s ORDER BY message_id LIMIT {PAGE}"
)


def queue_row(r: QueueRecord) -> tuple[Any, ...]:
    n = r.notifier
    return (
        r.recipient_id,
        list(r.recipient_keys),
        r.rcv_dh_secret,
        r.sender_id,
        r.sender_key,
        r.snd_secure,
        r.status.value,
        r.queue_mode,
        n.notifier_id if n else None,
        n.notifier_key if n else None,
        n.rcv_ntf_dh_secret if n else None,
        r.rcv_service_id,
        r.ntf_service_id,
        r.link_id,
        r.updated_at,
    )


def insert_row(r: QueueRecord, link: QueueLinkData | None) -> tuple[Any, ...]:
    """The values of INSERT_QUEUE: the record's row, then its link's two parts."""
    return (*queue_row(r), *((link.fixed_data, link.user_data) if link else (None, None)))


def record_from_row(row: tuple[Any, ...] | Any) -> QueueRecord:
    (rid, rkeys, rdh, sid, skey, secure, status, mode, nid, nkey, ndh, rsvc, nsvc, lid,
     updated) = row
    return QueueRecord(
        recipient_id=rid,
        sender_id=sid,
        recipient_key=rkeys[0],
        rcv_dh_secret=rdh,
        sender_key=skey,
        snd_secure=secure,
        status=QueueStatus(status),
        notifier=None if nid is None else NotifierCreds(nid, nkey, ndh),
        rcv_service_id=rsvc,
        ntf_service_id=nsvc,
        updated_at=updated,
        queue_mode=mode,
        link_id=lid,
        more_recipient_keys=tuple(rkeys[1:]),
    )


def message_from_row(row: tuple[Any, ...] | Any) -> Message:
    msg_id, ts, flags, body, quota = row
    return Message(msg_id, ts, flags, body, quota)
