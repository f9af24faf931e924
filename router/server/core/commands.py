"""One handler per verified command (docs/protocol.md#command-table, #behaviour).

Each handler gets the connection's `Subscriber` (its subscriptions, and the
connection itself as `.conn`) and the `Verified` command (with the queue
record looked up while verifying it) and returns the transmissions to send,
normally one response with the command's corrId; SUB may add a pushed MSG.
Protocol failures are `ErrorType` values turned into `ERR` here; the stores
report theirs the same way.

The handlers see the router only through `CommandContext`: the stores, the
subscriptions and the few services they call.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
    MessageStore,
    NotifierCreds,
    Party,
    QueueRecord,
    QueueStatus,
    QueueStore,
    WriteResult,
)

from .limits import MEMORY_FULL, NEW_RATE_LIMITED, TokenBucket
from .subscriptions import Event, Sub, Subscriber, Subscriptions
from .verified import Verified, error_transmission

if TYPE_CHECKING:
    from ..settings.config import RouterConfig
    from .blocked import BlockedQueues
    from .connection import Connection
    from .counters import Counters
    from .delivery import Deliverer
    from .notifications import Notifications
    from .services import Services

ID_SIZE = 24  # queue ids and message ids (docs/protocol.md#limits)
_ID_ATTEMPTS = 3  # fresh ids after a DUPLICATE before giving up with INTERNAL
_OK, _PONG = OK(), PONG()

Handler = Callable[[Subscriber, Verified], Awaitable[list[bytes]]]


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What the command handlers use of the router."""

    config: RouterConfig
    queues: QueueStore
    messages: MessageStore
    counters: Counters
    subscriptions: Subscriptions
    deliverer: Deliverer
    services: Services
    notifications: Notifications
    blocked: BlockedQueues
    queue_active: Callable[[bytes], None]  # the queue was used (the stats log counts it)
    expire_before_send: Callable[[bytes], Awaitable[None]]


def _reply(v: Verified, resp: Response | ErrorType) -> list[bytes]:
    if isinstance(resp, ErrorType):
        return [error_transmission(v.corr_id, v.entity_id, resp)]
    return [encode_response_transmission(v.corr_id, v.entity_id, resp)]


def _queue(v: Verified) -> QueueRecord:
    assert v.queue is not None  # every handler below PING/NEW ran after a queue lookup
    return v.queue


class Commands:
    def __init__(self, context: CommandContext) -> None:
        self._c = context
        self._handlers: dict[type, Handler] = {
            PING: self._ping, NEW: self._new, SUB: self._sub, KEY: self._key,
            SKEY: self._skey, SEND: self._send, ACK: self._ack, GET: self._get,
            OFF: self._off, DEL: self._del, QUE: self._que, NKEY: self._nkey,
            NDEL: self._ndel, NSUB: self._nsub, SUBS: self._subs, NSUBS: self._nsubs,
            PRXY: self._prxy, PFWD: self._pfwd,
        }
        # NEW rate limits (limits.py), forgotten with their connection.
        self._new_buckets: WeakKeyDictionary[Connection, TokenBucket] = WeakKeyDictionary()

    async def execute(self, s: Subscriber, v: Verified) -> list[bytes]:
        blocked = self._c.blocked.reasons  # a plain dict: empty on most routers
        if blocked and v.queue is not None and type(v.command) is not DEL:
            reason = blocked.get(v.queue.recipient_id)
            if reason is not None:  # blocked from the control port; only DEL still works
                return _reply(v, blocked_error(reason))
        return await self._handlers[type(v.command)](s, v)

    # --- no queue -------------------------------------------------------------

    async def _ping(self, s: Subscriber, v: Verified) -> list[bytes]:
        return _reply(v, _PONG)

    async def _prxy(self, s: Subscriber, v: Verified) -> list[bytes]:
        return _reply(v, PROXY_BASIC_AUTH)  # what the reference says when it does not proxy

    async def _pfwd(self, s: Subscriber, v: Verified) -> list[bytes]:
        return _reply(v, PROXY_NO_SESSION)

    # --- service subscriptions (services.py) ------------------------------------------

    async def _subs(self, s: Subscriber, v: Verified) -> list[bytes]:
        """SOKS n now; the messages follow from the delivery task, then ALLS."""
        return _reply(v, SOKS(await self._c.services.subscribe_queues(s)))

    async def _nsubs(self, s: Subscriber, v: Verified) -> list[bytes]:
        return _reply(v, SOKS(await self._c.services.subscribe_notifiers(s)))

    # --- creating and securing ------------------------------------------------------

    async def _new(self, s: Subscriber, v: Verified) -> list[bytes]:
        cmd: NEW = v.command  # type: ignore[assignment]
        config = self._c.config
        if not config.allow_new_queues or not _password_ok(config.password, cmd.basic_auth):
            return _reply(v, AUTH)
        if not self._new_queue_allowed(s.conn):
            self._c.counters.new_queues_rate_limited += 1
            return _reply(v, NEW_RATE_LIMITED)
        srv_priv, srv_pub = new_x25519()
        secret = box_key(srv_priv, cmd.rcv_dh_key)
        for _ in range(_ID_ATTEMPTS):
            rid, sid = secrets.token_bytes(ID_SIZE), secrets.token_bytes(ID_SIZE)
            record = QueueRecord(
                rid, sid, cmd.rcv_auth_key, secret, None, cmd.snd_secure,
                # subMode S subscribes the queue here, so it joins this connection's service
                rcv_service_id=s.conn.service_id if cmd.subscribe else None,
                updated_at=int(time.time()),
            )
            error = await self._c.queues.add_queue(record)
            if error is None:
                break
            if error != DUPLICATE:
                return _reply(v, error)
        else:
            return _reply(v, INTERNAL)
        self._c.counters.queues_created += 1
        self._c.queue_active(rid)
        if cmd.subscribe:
            self._c.subscriptions.subscribe(s, rid, secret)
        return _reply(v, IDS(rid, sid, srv_pub, cmd.snd_secure))

    def _new_queue_allowed(self, conn: Connection) -> bool:
        rate = self._c.config.new_queue_rate
        if rate is None:
            return True
        bucket = self._new_buckets.get(conn)
        if bucket is None:
            bucket = self._new_buckets[conn] = TokenBucket(rate, self._c.config.new_queue_burst)
        return bucket.take()

    async def _key(self, s: Subscriber, v: Verified) -> list[bytes]:
        cmd: KEY = v.command  # type: ignore[assignment]
        return await self._secure(v, _queue(v), cmd.sender_key)

    async def _skey(self, s: Subscriber, v: Verified) -> list[bytes]:
        cmd: SKEY = v.command  # type: ignore[assignment]
        return await self._secure(v, _queue(v), cmd.sender_key)

    async def _secure(self, v: Verified, queue: QueueRecord, key: bytes) -> list[bytes]:
        """Same key again is OK, another key is AUTH (the store decides, atomically)."""
        error = await self._c.queues.secure_queue(queue.recipient_id, key)
        if error is None and queue.sender_key is None:
            self._c.counters.queues_secured += 1
            self._c.queue_active(queue.recipient_id)
        return _reply(v, error or _OK)

    async def _off(self, s: Subscriber, v: Verified) -> list[bytes]:
        return _reply(v, await self._c.queues.suspend_queue(v.entity_id) or _OK)

    async def _del(self, s: Subscriber, v: Verified) -> list[bytes]:
        """Delete messages and notifier before answering; other subscribers get DELD/END."""
        rid = v.entity_id
        removed = await self._c.queues.delete_queue(rid)
        if isinstance(removed, ErrorType):
            return _reply(v, removed)
        await self._c.messages.delete_queue_messages(rid)
        if removed.notifier is not None:
            self._c.notifications.forget(removed.notifier.notifier_id)
        self._c.subscriptions.end_queue(rid, Event.DELETED, by=s)
        if removed.notifier is not None:
            self._c.subscriptions.end_notifier(removed.notifier.notifier_id, Event.DELETED)
        self._c.counters.queues_deleted += 1
        return _reply(v, _OK)

    # --- messages -----------------------------------------------------------------

    async def _send(self, s: Subscriber, v: Verified) -> list[bytes]:
        cmd: SEND = v.command  # type: ignore[assignment]
        queue = _queue(v)
        if len(cmd.body) > MAX_MESSAGE_LENGTH:
            return _reply(v, LARGE_MSG)
        if queue.status is QueueStatus.OFF:
            return _reply(v, AUTH)
        # Only the notification flag is kept: the MSG body carries 'T'/'F'
        # (docs/protocol.md#encryption).
        msg = Message(secrets.token_bytes(ID_SIZE), int(time.time()), cmd.flags[:1], cmd.body)
        await self._c.expire_before_send(queue.recipient_id)
        self._c.queue_active(queue.recipient_id)
        result = await self._c.messages.write_message(queue.recipient_id, msg, self._c.config.quota)
        # Whatever the result: the write is visible now, and an idle subscriber of a
        # queue with messages must get one, however it came to be idle (delivery.py).
        into_empty = result is WriteResult.STORED_INTO_EMPTY
        self._c.deliverer.stored(queue.recipient_id, msg, into_empty=into_empty)
        if result is WriteResult.QUOTA_EXCEEDED:
            self._c.counters.messages_quota_refused += 1
            return _reply(v, QUOTA)
        if result is WriteResult.STORE_FULL:
            self._c.counters.messages_store_full += 1
            return _reply(v, MEMORY_FULL)
        self._c.counters.messages_sent += 1
        if cmd.notify and queue.notifier is not None:
            self._c.notifications.notify(queue.notifier, msg)  # sent with the next batch
        return _reply(v, _OK)

    async def _sub(self, s: Subscriber, v: Verified) -> list[bytes]:
        rid = v.entity_id
        sub = s.queues.get(rid)
        if sub is not None and sub.get_mode:
            return _reply(v, CMD_PROHIBITED)
        queue = _queue(v)
        # The queue joins this connection's service, or leaves its old one (services.py).
        await self._c.services.associate(s, queue, Party.RECIPIENT)
        subscriptions = self._c.subscriptions
        sub = s.queues.get(rid)  # another connection may have taken it meanwhile
        if sub is None:
            # Keyed by the store's own id object, not the copy parsed from this block,
            # so that an idle subscription holds no bytes object of its own.
            sub = subscriptions.subscribe(s, queue.recipient_id, queue.rcv_dh_secret)
        else:
            subscriptions.send_again(s, sub)
        out = _reply(v, _OK)
        self._c.queue_active(rid)
        subscriptions.answering(sub)
        try:
            msg = await self._c.messages.peek_message(rid)
        finally:
            missed = subscriptions.answered(sub)
        if not subscriptions.can_push(s, sub):
            return out  # taken by another connection meanwhile
        if msg is not None:
            out.append(self._c.deliverer.message_transmission(b"", rid, sub, msg))
        elif missed is not None:  # a write landed after the read
            self._c.deliverer.push_later(s, sub, missed)
        return out

    async def _get(self, s: Subscriber, v: Verified) -> list[bytes]:
        rid = v.entity_id
        sub = self._c.subscriptions.subscribe_for_get(s, rid, _queue(v).rcv_dh_secret)
        if sub is None:
            return _reply(v, CMD_PROHIBITED)
        msg = await self._c.messages.peek_message(rid)
        if msg is None or s.queues.get(rid) is not sub:
            return _reply(v, _OK)
        return [self._c.deliverer.message_transmission(v.corr_id, rid, sub, msg)]

    async def _ack(self, s: Subscriber, v: Verified) -> list[bytes]:
        """Delete the delivered message and answer with the next one (SUB) or OK."""
        cmd: ACK = v.command  # type: ignore[assignment]
        rid = v.entity_id
        sub = s.queues.get(rid)
        if sub is None or sub.delivered is None:
            return _reply(v, NO_MSG)
        if cmd.msg_id and cmd.msg_id != sub.delivered[0]:  # an empty id matches (reference)
            return _reply(v, NO_MSG)
        subscriptions = self._c.subscriptions
        with subscriptions.acknowledging(s, sub) as msg_id:
            deleted, head = await self._c.messages.delete_message(rid, msg_id)
        if deleted:
            self._c.counters.messages_acked += 1
            self._c.queue_active(rid)
        if head is None or sub.get_mode or not subscriptions.can_push(s, sub):
            return _reply(v, _OK)
        return [self._c.deliverer.message_transmission(v.corr_id, rid, sub, head)]

    async def _que(self, s: Subscriber, v: Verified) -> list[bytes]:
        rid = v.entity_id
        size = await self._c.messages.queue_size(rid)
        head = await self._c.messages.peek_message(rid)
        sub = s.queues.get(rid)
        state = self._c.subscriptions.queue_state(s, sub)
        return _reply(v, INFO(queue_info(_queue(v), size, head, sub, state)))

    # --- notifiers -------------------------------------------------------------------

    async def _nkey(self, s: Subscriber, v: Verified) -> list[bytes]:
        """Add or replace the notifier: a new id and DH key each time
        (docs/protocol.md#behaviour)."""
        cmd: NKEY = v.command  # type: ignore[assignment]
        queue = _queue(v)
        srv_priv, srv_pub = new_x25519()
        secret = box_key(srv_priv, cmd.rcv_ntf_dh_key)
        for _ in range(_ID_ATTEMPTS):
            nid = secrets.token_bytes(ID_SIZE)
            creds = NotifierCreds(nid, cmd.notifier_key, secret)
            error = await self._c.queues.add_notifier(queue.recipient_id, creds)
            if error is None:
                break
            if error != DUPLICATE:
                return _reply(v, error)
        else:
            return _reply(v, INTERNAL)
        if queue.notifier is not None:
            # The old notifier is gone with its pending NMSGs; its subscriber gets END.
            self._c.notifications.forget(queue.notifier.notifier_id)
            self._c.subscriptions.end_notifier(queue.notifier.notifier_id, Event.NTF_END)
        return _reply(v, NID(nid, srv_pub))

    async def _ndel(self, s: Subscriber, v: Verified) -> list[bytes]:
        removed = await self._c.queues.delete_notifier(v.entity_id)
        if removed is not None:
            self._c.notifications.forget(removed.notifier_id)
            self._c.subscriptions.end_notifier(removed.notifier_id, Event.DELETED)
        return _reply(v, _OK)

    async def _nsub(self, s: Subscriber, v: Verified) -> list[bytes]:
        """Subscribe the notifier here; NMSGs waiting for it go with the next batch."""
        queue = _queue(v)
        assert queue.notifier is not None  # verified against its key
        await self._c.services.associate(s, queue, Party.NOTIFIER)
        nid = queue.notifier.notifier_id  # the store's id object, as for SUB
        self._c.subscriptions.subscribe_notifier(s, nid)
        self._c.notifications.subscribed(nid)
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
