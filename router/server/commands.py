"""One handler per verified command (docs/protocol.md#command-table, #behaviour).

Each handler gets the connection and the `Verified` command (with the queue
record looked up while verifying it) and returns the transmissions to send,
normally one response with the command's corrId; SUB may add a pushed MSG.
Protocol failures are `ErrorType` values turned into `ERR` here; the stores
report theirs the same way.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from router.protocol.codec import MAX_MESSAGE_LENGTH, encode_response_transmission
from router.protocol.crypto import box_key, new_x25519
from router.protocol.types import (
    ACK,
    AUTH,
    CMD_PROHIBITED,
    DEL,
    GET,
    IDS,
    INFO,
    INTERNAL,
    KEY,
    LARGE_MSG,
    NDEL,
    NEW,
    NID,
    NKEY,
    NO_MSG,
    NSUB,
    NSUBS,
    OFF,
    OK,
    PFWD,
    PING,
    PONG,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    PRXY,
    QUE,
    QUOTA,
    SEND,
    SKEY,
    SOKS,
    SUB,
    SUBS,
    ErrorType,
    Response,
)
from store.interfaces import (
    DUPLICATE,
    Message,
    NotifierCreds,
    Party,
    QueueRecord,
    QueueStatus,
    StoreError,
    WriteResult,
)

from .dispatch import Verified, error_transmission
from .limits import MEMORY_FULL, NEW_RATE_LIMITED, TokenBucket
from .subscriptions import Event, Sub

if TYPE_CHECKING:
    from .connection import Connection
    from .router import Router

ID_SIZE = 24  # queue ids and message ids (docs/protocol.md#limits)
_ID_ATTEMPTS = 3  # fresh ids after a DUPLICATE before giving up with INTERNAL
_OK, _PONG = OK(), PONG()

Handler = Callable[["Connection", Verified], Awaitable[list[bytes]]]


def _reply(v: Verified, resp: Response | ErrorType) -> list[bytes]:
    if isinstance(resp, ErrorType):
        return [error_transmission(v.corr_id, v.entity_id, resp)]
    return [encode_response_transmission(v.corr_id, v.entity_id, resp)]


def _queue(v: Verified) -> QueueRecord:
    assert v.queue is not None  # every handler below PING/NEW ran after a queue lookup
    return v.queue


class Commands:
    def __init__(self, router: Router) -> None:
        self._r = router
        self._handlers: dict[type, Handler] = {
            PING: self._ping, NEW: self._new, SUB: self._sub, KEY: self._key,
            SKEY: self._skey, SEND: self._send, ACK: self._ack, GET: self._get,
            OFF: self._off, DEL: self._del, QUE: self._que, NKEY: self._nkey,
            NDEL: self._ndel, NSUB: self._nsub, SUBS: self._subs, NSUBS: self._nsubs,
            PRXY: self._prxy, PFWD: self._pfwd,
        }
        # NEW rate limits (limits.py), forgotten with their connection.
        self._new_buckets: WeakKeyDictionary[Connection, TokenBucket] = WeakKeyDictionary()

    async def execute(self, conn: Connection, v: Verified) -> list[bytes]:
        blocked = self._r.blocked.reasons  # a plain dict: empty on most routers
        if blocked and v.queue is not None and type(v.command) is not DEL:
            reason = blocked.get(v.queue.recipient_id)
            if reason is not None:  # blocked from the control port; only DEL still works
                return _reply(v, blocked_error(reason))
        return await self._handlers[type(v.command)](conn, v)

    # --- no queue -------------------------------------------------------------

    async def _ping(self, conn: Connection, v: Verified) -> list[bytes]:
        return _reply(v, _PONG)

    async def _prxy(self, conn: Connection, v: Verified) -> list[bytes]:
        return _reply(v, PROXY_BASIC_AUTH)  # what the reference says when it does not proxy

    async def _pfwd(self, conn: Connection, v: Verified) -> list[bytes]:
        return _reply(v, PROXY_NO_SESSION)

    # --- service subscriptions (services.py) ------------------------------------------

    async def _subs(self, conn: Connection, v: Verified) -> list[bytes]:
        """SOKS n now; the messages follow from the delivery task, then ALLS."""
        return _reply(v, SOKS(await self._r.services.subscribe_queues(conn)))

    async def _nsubs(self, conn: Connection, v: Verified) -> list[bytes]:
        return _reply(v, SOKS(await self._r.services.subscribe_notifiers(conn)))

    # --- creating and securing ------------------------------------------------------

    async def _new(self, conn: Connection, v: Verified) -> list[bytes]:
        cmd: NEW = v.command  # type: ignore[assignment]
        config = self._r.config
        if not config.allow_new_queues or not _password_ok(config.password, cmd.basic_auth):
            return _reply(v, AUTH)
        if not self._new_queue_allowed(conn):
            self._r.counters.new_queues_rate_limited += 1
            return _reply(v, NEW_RATE_LIMITED)
        srv_priv, srv_pub = new_x25519()
        secret = box_key(srv_priv, cmd.rcv_dh_key)
        for _ in range(_ID_ATTEMPTS):
            rid, sid = secrets.token_bytes(ID_SIZE), secrets.token_bytes(ID_SIZE)
            record = QueueRecord(
                rid, sid, cmd.rcv_auth_key, secret, None, cmd.snd_secure,
                # subMode S subscribes the queue here, so it joins this connection's service
                rcv_service_id=conn.service_id if cmd.subscribe else None,
                updated_at=int(time.time()),
            )
            error = await self._r.queues.add_queue(record)
            if error is None:
                break
            if error != DUPLICATE:
                return _reply(v, error)
        else:
            return _reply(v, INTERNAL)
        self._r.counters.queues_created += 1
        self._r.queue_active(rid)
        if cmd.subscribe:
            self._r.subscribe(conn, rid, secret)
        return _reply(v, IDS(rid, sid, srv_pub, cmd.snd_secure))

    def _new_queue_allowed(self, conn: Connection) -> bool:
        rate = self._r.config.new_queue_rate
        if rate is None:
            return True
        bucket = self._new_buckets.get(conn)
        if bucket is None:
            bucket = self._new_buckets[conn] = TokenBucket(rate, self._r.config.new_queue_burst)
        return bucket.take()

    async def _key(self, conn: Connection, v: Verified) -> list[bytes]:
        cmd: KEY = v.command  # type: ignore[assignment]
        return await self._secure(v, _queue(v), cmd.sender_key)

    async def _skey(self, conn: Connection, v: Verified) -> list[bytes]:
        cmd: SKEY = v.command  # type: ignore[assignment]
        return await self._secure(v, _queue(v), cmd.sender_key)

    async def _secure(self, v: Verified, queue: QueueRecord, key: bytes) -> list[bytes]:
        """Same key again is OK, another key is AUTH (the store decides, atomically)."""
        error = await self._r.queues.secure_queue(queue.recipient_id, key)
        if error is None and queue.sender_key is None:
            self._r.counters.queues_secured += 1
            self._r.queue_active(queue.recipient_id)
        return _reply(v, error or _OK)

    async def _off(self, conn: Connection, v: Verified) -> list[bytes]:
        return _reply(v, await self._r.queues.suspend_queue(v.entity_id) or _OK)

    async def _del(self, conn: Connection, v: Verified) -> list[bytes]:
        """Delete messages and notifier before answering; other subscribers get DELD/END."""
        rid = v.entity_id
        removed = await self._r.queues.delete_queue(rid)
        if isinstance(removed, ErrorType):
            return _reply(v, removed)
        await self._r.messages.delete_queue_messages(rid)
        if removed.notifier is not None:
            self._r.notifications.forget(removed.notifier.notifier_id)
        self._r.end_subscriptions(conn, rid, removed)
        self._r.counters.queues_deleted += 1
        return _reply(v, _OK)

    # --- messages -----------------------------------------------------------------

    async def _send(self, conn: Connection, v: Verified) -> list[bytes]:
        cmd: SEND = v.command  # type: ignore[assignment]
        queue = _queue(v)
        if len(cmd.body) > MAX_MESSAGE_LENGTH:
            return _reply(v, LARGE_MSG)
        if queue.status is QueueStatus.OFF:
            return _reply(v, AUTH)
        # Only the notification flag is kept: the MSG body carries 'T'/'F'
        # (docs/protocol.md#encryption).
        msg = Message(secrets.token_bytes(ID_SIZE), int(time.time()), cmd.flags[:1], cmd.body)
        await self._r.expire_before_send(queue.recipient_id)
        self._r.queue_active(queue.recipient_id)
        result = await self._r.messages.write_message(queue.recipient_id, msg, self._r.config.quota)
        # Whatever the result: the write is visible now, and an idle subscriber of a
        # queue with messages must get one, however it came to be idle (delivery.py).
        into_empty = result is WriteResult.STORED_INTO_EMPTY
        self._r.deliverer.stored(queue.recipient_id, msg, into_empty=into_empty)
        if result is WriteResult.QUOTA_EXCEEDED:
            self._r.counters.messages_quota_refused += 1
            return _reply(v, QUOTA)
        if result is WriteResult.STORE_FULL:
            self._r.counters.messages_store_full += 1
            return _reply(v, MEMORY_FULL)
        self._r.counters.messages_sent += 1
        if cmd.notify and queue.notifier is not None:
            self._r.notifications.notify(queue.notifier, msg)  # sent with the next batch
        return _reply(v, _OK)

    async def _sub(self, conn: Connection, v: Verified) -> list[bytes]:
        rid = v.entity_id
        sub = conn.subscriptions.get(rid)
        if sub is not None and sub.get_mode:
            return _reply(v, CMD_PROHIBITED)
        queue = _queue(v)
        # The queue joins this connection's service, or leaves its old one (services.py).
        await self._r.services.associate(conn, queue, Party.RECIPIENT)
        sub = conn.subscriptions.get(rid)  # another connection may have taken it meanwhile
        if sub is None:
            # Keyed by the store's own id object, not the copy parsed from this block,
            # so that an idle subscription holds no bytes object of its own.
            sub = self._r.subscribe(conn, queue.recipient_id, queue.rcv_dh_secret)
        else:
            # SUB again on this connection sends the head again (reference behaviour).
            sub.delivered = None
            conn.deliveries.discard(rid)
        out = _reply(v, _OK)
        self._r.queue_active(rid)
        msg = await self._r.messages.peek_message(rid)
        if msg is not None and self._r.deliverer.can_push(conn, sub):
            out.append(self._r.deliverer.message_transmission(b"", rid, sub, msg))
        return out

    async def _get(self, conn: Connection, v: Verified) -> list[bytes]:
        rid = v.entity_id
        sub = conn.subscriptions.get(rid)
        if sub is None:
            # GET mode: not registered router-wide, never pushed to, SUB prohibited here.
            sub = conn.subscriptions[rid] = Sub(rid, _queue(v).rcv_dh_secret, get_mode=True)
        elif not sub.get_mode:
            return _reply(v, CMD_PROHIBITED)
        msg = await self._r.messages.peek_message(rid)
        if msg is None or conn.subscriptions.get(rid) is not sub:
            return _reply(v, _OK)
        return [self._r.deliverer.message_transmission(v.corr_id, rid, sub, msg)]

    async def _ack(self, conn: Connection, v: Verified) -> list[bytes]:
        """Delete the delivered message and answer with the next one (SUB) or OK."""
        cmd: ACK = v.command  # type: ignore[assignment]
        rid = v.entity_id
        sub = conn.subscriptions.get(rid)
        if sub is None or sub.delivered is None:
            return _reply(v, NO_MSG)
        msg_id = sub.delivered[0]
        if cmd.msg_id and cmd.msg_id != msg_id:  # an empty id matches (reference code)
            return _reply(v, NO_MSG)
        delivered, sub.delivered = sub.delivered, None  # a write meanwhile may push the next
        try:
            with self._r.deliverer.acknowledging(sub, msg_id):
                deleted, head = await self._r.messages.delete_message(rid, msg_id)
        except StoreError:
            # Not deleted: it is still in flight, and the client may ACK it again.
            if sub.delivered is None and conn.subscriptions.get(rid) is sub:
                sub.delivered = delivered
            raise
        if deleted:
            self._r.counters.messages_acked += 1
            self._r.queue_active(rid)
        if head is None or sub.get_mode or not self._r.deliverer.can_push(conn, sub):
            return _reply(v, _OK)
        return [self._r.deliverer.message_transmission(v.corr_id, rid, sub, head)]

    async def _que(self, conn: Connection, v: Verified) -> list[bytes]:
        rid = v.entity_id
        size = await self._r.messages.queue_size(rid)
        head = await self._r.messages.peek_message(rid)
        sub = conn.subscriptions.get(rid)
        state = self._sub_state(conn, sub)
        return _reply(v, INFO(queue_info(_queue(v), size, head, sub, state)))

    def _sub_state(self, conn: Connection, sub: Sub | None) -> str:
        if sub is None:
            return "noSub"
        if sub.get_mode:
            return "prohibitSub"
        if sub.recipient_id in conn.deliveries:
            return "subPending"
        return "subThread" if sub.scope is not None else "noSub"

    # --- notifiers -------------------------------------------------------------------

    async def _nkey(self, conn: Connection, v: Verified) -> list[bytes]:
        """Add or replace the notifier: a new id and DH key each time
        (docs/protocol.md#behaviour)."""
        cmd: NKEY = v.command  # type: ignore[assignment]
        queue = _queue(v)
        srv_priv, srv_pub = new_x25519()
        secret = box_key(srv_priv, cmd.rcv_ntf_dh_key)
        for _ in range(_ID_ATTEMPTS):
            nid = secrets.token_bytes(ID_SIZE)
            creds = NotifierCreds(nid, cmd.notifier_key, secret)
            error = await self._r.queues.add_notifier(queue.recipient_id, creds)
            if error is None:
                break
            if error != DUPLICATE:
                return _reply(v, error)
        else:
            return _reply(v, INTERNAL)
        if queue.notifier is not None:
            # The old notifier is gone with its pending NMSGs; its subscriber gets END.
            self._r.notifications.forget(queue.notifier.notifier_id)
            self._r.end_notifier(queue.notifier.notifier_id, Event.NTF_END)
        return _reply(v, NID(nid, srv_pub))

    async def _ndel(self, conn: Connection, v: Verified) -> list[bytes]:
        removed = await self._r.queues.delete_notifier(v.entity_id)
        if removed is not None:
            self._r.notifications.forget(removed.notifier_id)
            self._r.end_notifier(removed.notifier_id, Event.DELETED)
        return _reply(v, _OK)

    async def _nsub(self, conn: Connection, v: Verified) -> list[bytes]:
        """Subscribe the notifier here; NMSGs waiting for it go with the next batch."""
        queue = _queue(v)
        assert queue.notifier is not None  # verified against its key
        await self._r.services.associate(conn, queue, Party.NOTIFIER)
        nid = queue.notifier.notifier_id  # the store's id object, as for SUB
        self._r.subscribe_notifier(conn, nid)
        self._r.notifications.subscribed(nid)
        return _reply(v, _OK)


def blocked_error(reason: str) -> ErrorType:
    """`ERR BLOCKED reason=spam` (docs/protocol.md, "Errors")."""
    return ErrorType("BLOCKED", f"reason={reason}")


def _password_ok(required: bytes | None, given: bytes | None) -> bool:
    if required is None:
        return True
    return given is not None and hmac.compare_digest(required, given)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def queue_info(
    queue: QueueRecord, size: int, head: Message | None, sub: Sub | None, state: str
) -> str:
    """The QUE answer's JSON, in the reference's field names (docs/protocol.md#command-table; not
    normative)."""
    info: dict[str, object] = {
        "qiSnd": queue.sender_key is not None,
        "qiNtf": queue.notifier is not None,
        "qiSize": size,
    }
    if sub is not None:
        qsub: dict[str, object] = {"qSubThread": state}
        if sub.delivered is not None:
            qsub["qDelivered"] = _b64(sub.delivered[0])
        info["qiSub"] = qsub
    if head is not None:
        info["qiMsg"] = {
            "msgId": _b64(head.msg_id),
            "msgTs": datetime.fromtimestamp(head.ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "msgType": "quota" if head.quota else "message",
        }
    return json.dumps(info, separators=(",", ":"))
