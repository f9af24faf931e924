"""One handler per verified command (docs/protocol.md#command-table, #behaviour).

Each handler gets the connection's `ClientSubscriptions` (its subscriptions, and the
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
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from router.protocol import versions
from router.protocol.codec import encode_response_transmission
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
    LDEL,
    LGET,
    LKEY,
    LNK,
    LSET,
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
    RKEY,
    SEND,
    SKEY,
    SOK,
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
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    QueueStore,
    WriteResult,
)

from .limits import (
    MEMORY_FULL,
    NEW_RATE_LIMITED,
    Lender,
    NewQueueLimits,
    new_queue_limits,
)
from .ownership import ID_SIZE, ONE_WORKER, Ownership
from .subscriptions import ClientSubscriptions, Event, Sub, Subscriptions
from .verified import Verified, error_transmission

if TYPE_CHECKING:
    from ..settings.config import RouterConfig
    from .blocked import BlockedQueues
    from .connection import Connection
    from .counters import Counters
    from .delivery import Deliverer
    from .latency import Latencies
    from .notifications import Notifications
    from .proxy import Proxy
    from .services import Services

_ID_ATTEMPTS = 3  # fresh ids after a DUPLICATE before giving up with INTERNAL
_OK, _PONG = OK(), PONG()

T = TypeVar("T")
Handler = Callable[[ClientSubscriptions, Verified], Awaitable[list[bytes]]]


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What the command handlers use of the router."""

    config: RouterConfig
    queues: QueueStore
    messages: MessageStore
    counters: Counters
    latencies: Latencies
    subscriptions: Subscriptions
    deliverer: Deliverer
    services: Services
    notifications: Notifications
    blocked: BlockedQueues
    queue_active: Callable[[bytes], None]  # the queue was used (the stats log counts it)
    expire_before_send: Callable[[bytes], Awaitable[None]]  # with expire_on_send
    proxy: Proxy | None = None  # PRXY and PFWD (proxy.py); None: this router does not proxy
    ownership: Ownership = ONE_WORKER  # the ids it mints map to the queue's worker


def not_logged(recipient_id: bytes) -> None:
    """`queue_active` of a router without a stats log."""


async def nothing_to_expire(recipient_id: bytes) -> None:
    """`expire_before_send` of a router that expires messages only in its passes."""


def _reply(verified: Verified, resp: Response | ErrorType) -> list[bytes]:
    """The answer, encoded at the connection's version (docs/protocol.md#version-table)."""
    if isinstance(resp, ErrorType):
        return [error_transmission(verified.corr_id, verified.entity_id, resp, verified.version)]
    return [encode_response_transmission(
        verified.corr_id, verified.entity_id, resp, verified.version
    )]


def _queue(verified: Verified) -> QueueRecord:
    assert verified.queue is not None  # every handler below PING/NEW ran after a queue lookup
    return verified.queue


def _run_answers(begun: list[Any], kind: type, results: list[Any] | BaseException,
                 finish: Callable[[Any, Any], list[bytes]]) -> list[list[bytes] | BaseException]:
    """A run's answers in its order: what did not begin, its answer; what did, `finish`ed
    with its store result in turn, or the store call's error for all of them."""
    written = iter(results) if isinstance(results, list) else None
    answers: list[list[bytes] | BaseException] = []
    for b in begun:
        if not isinstance(b, kind):
            answers.append(b)
        elif written is None:
            answers.append(results)  # type: ignore[arg-type]
        else:
            answers.append(finish(b, next(written)))
    return answers


class Commands:
    def __init__(self, context: CommandContext) -> None:
        self._context = context
        self._handlers: dict[type, Handler] = {
            PING: self._ping, NEW: self._new, SUB: self._sub, KEY: self._key,
            SKEY: self._skey, SEND: self._send, ACK: self._ack, GET: self._get,
            OFF: self._off, DEL: self._del, QUE: self._que, NKEY: self._nkey,
            NDEL: self._ndel, NSUB: self._nsub, SUBS: self._subs, NSUBS: self._nsubs,
            PRXY: self._prxy, PFWD: self._pfwd,  # RFWD: the dispatcher's (forwarded.py)
            LSET: self._links, LDEL: self._links, LKEY: self._links, LGET: self._links,
            RKEY: self._rkey,
        }
        # NEW rate limits (limits.py): per connection (forgotten with it), address, router.
        self._new_lender: Lender | None = None
        self._new_limits = NewQueueLimits(context.config, context.ownership.workers)

    def borrow_new_budgets_from(self, lender: Lender) -> None:
        """A worker of several: the address and router NEW budgets are its supervisor's,
        borrowed from `lender` (limits.py)."""
        self._new_lender = lender
        self._new_limits = NewQueueLimits(self._context.config, self._context.ownership.workers,
                                          lender)

    def give_back_old_grants(self) -> None:
        """A worker's NEW grants past their lifetime back to the supervisor (limits.py)."""
        self._new_limits.give_back_old()

    def reconfigure(self, config: RouterConfig) -> None:
        """Commands from now on follow `config` (quota, passwords, the NEW limits)."""
        old = self._context.config
        self._context = replace(self._context, config=config)
        if new_queue_limits(old) != new_queue_limits(config):
            # every bucket starts at its new size
            self._new_limits.give_back_all()
            self._new_limits = NewQueueLimits(config, self._context.ownership.workers,
                                              self._new_lender)

    async def execute(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        refused = self._blocked_answer(verified)
        if refused is not None:
            return refused
        return await self._handlers[type(verified.command)](client, verified)

    def _blocked_answer(self, verified: Verified) -> list[bytes] | None:
        blocked = self._context.blocked.reasons  # a plain dict: empty on most routers
        if blocked and verified.queue is not None and type(verified.command) is not DEL:
            reason = blocked.get(verified.queue.recipient_id)
            if reason is not None:  # blocked from the control port; only DEL still works
                return _reply(verified, blocked_error(reason))
        return None

    async def subscribe_run(self, client: ClientSubscriptions, run: list[Verified]) -> SubRun:
        """Consecutive SUBs of a block, of distinct queues: each is registered and holds
        its answer, then the heads of all of them are read in one store call; each
        answers later with `SubRun.finish`, in its turn (dispatch.py). What each answers
        is what `_sub` alone answers: its head is read after it is registered, and a
        write the read missed is pushed after its answer (`Subscriptions.answering`)."""
        started = perf_counter()
        begun: list[_SubBegun | list[bytes] | BaseException] = []
        for verified in run:
            try:
                begun.append(self._blocked_answer(verified)
                             or await self._sub_begin(client, verified))
            except Exception as e:  # re-raised by finish, answered as the handler's would be
                begun.append(e)
        heads: dict[bytes, Message | None] | BaseException = {}
        ids = [b.recipient_id for b in begun if isinstance(b, _SubBegun)]
        if ids:
            try:
                heads = dict(zip(ids, await self._context.messages.peek_messages(ids),
                                 strict=True))
            except Exception as e:
                heads = e
            except BaseException:  # cancelled: nobody will finish them
                for b in begun:
                    if isinstance(b, _SubBegun):
                        self._context.subscriptions.answered(b.sub)
                raise
        return SubRun(self, client, begun, heads, (perf_counter() - started) / len(run))

    async def send_run(self, client: ClientSubscriptions, run: list[Verified]) -> PreparedRun:
        """Consecutive SENDs of a block, written in one store call (`write_messages`, for
        a store that has it): one transaction, so each is answered OK only once all of
        them are committed, and a failure answers each of them its error. Each answers
        what `_send` alone answers, in the block's order (dispatch.py)."""
        started = perf_counter()
        begun: list[_SendBegun | list[bytes] | BaseException] = []
        for verified in run:
            try:
                begun.append(self._blocked_answer(verified) or await self._send_begin(verified))
            except Exception as e:  # raised by its finish, answered as the handler's would be
                begun.append(e)
        writes = [b for b in begun if isinstance(b, _SendBegun)]
        results: list[WriteResult] | BaseException = []
        if writes:
            try:
                results = await self._context.messages.write_messages(  # type: ignore[attr-defined]
                    [(b.queue.recipient_id, b.msg) for b in writes], self._context.config.quota)
            except Exception as e:
                results = e
        answers = _run_answers(begun, _SendBegun, results, self._send_finish)
        return PreparedRun(answers, (perf_counter() - started) / len(run))

    async def ack_run(self, client: ClientSubscriptions, run: list[Verified]) -> PreparedRun:
        """Consecutive ACKs of a block, of distinct queues, deleted in one store call
        (`delete_messages`, for a store that has it), as `send_run` writes."""
        started = perf_counter()
        subscriptions = self._context.subscriptions
        begun = [self._blocked_answer(verified) or self._ack_begin(client, verified)
                 for verified in run]
        acks = [b for b in begun if isinstance(b, _AckBegun)]
        results: list[tuple[bool, Message | None]] | BaseException = []
        if acks:
            try:
                with ExitStack() as acknowledging:
                    ids = [acknowledging.enter_context(subscriptions.acknowledging(client, b.sub))
                           for b in acks]
                    results = await self._context.messages.delete_messages(  # type: ignore[attr-defined]
                        [(b.recipient_id, msg_id) for b, msg_id in zip(acks, ids, strict=True)])
            except Exception as e:
                results = e
        answers = _run_answers(begun, _AckBegun, results,
                               lambda b, result: self._ack_finish(client, b, *result))
        return PreparedRun(answers, (perf_counter() - started) / len(run))

    def _sub_finish(self, client: ClientSubscriptions, begun: _SubBegun,
                    msg: Message | None, missed: int | None) -> list[bytes]:
        """The end of a SUB once its head was read: the MSG with its answer, or a
        write its read missed pushed after it."""
        sub = begun.sub
        if not self._context.subscriptions.can_push(client, sub):
            return begun.out  # taken by another connection meanwhile
        if msg is not None:
            begun.out.append(self._context.deliverer.message_transmission(
                b"", begun.recipient_id, sub, msg, begun.box_key))
        elif missed is not None:  # a write landed after the read
            self._context.deliverer.push_later(client, sub, missed, begun.box_key)
        return begun.out

    # --- no queue -------------------------------------------------------------

    async def _ping(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        return _reply(verified, _PONG)

    async def _prxy(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        if self._context.proxy is None:  # the reference's answer when it does not proxy
            return _reply(verified, PROXY_BASIC_AUTH)
        return await self._context.proxy.prxy(client, verified)

    async def _pfwd(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        if self._context.proxy is None:
            return _reply(verified, PROXY_NO_SESSION)
        return await self._context.proxy.pfwd(client, verified)

    # --- short links (docs/protocol.md#short-links) ------------------------------------

    async def _links(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        """LSET and LDEL (the recipient's), LKEY and LGET (by link id): the store
        keeps the link with its queue (docs/protocol.md#short-links)."""
        cmd = verified.command
        queue = verified.queue
        queues = self._context.queues
        if type(cmd) is LSET:
            if _is_secured_messaging_queue(_queue(verified)):
                return _reply(verified, AUTH)  # its sender has the link data already
            link = QueueLinkData(cmd.link_id, cmd.fixed_data, cmd.user_data)
            error = await queues.set_link(_queue(verified).recipient_id, link)
            return _reply(verified, error or _OK)
        if type(cmd) is LDEL:
            return _reply(verified, await queues.delete_link(_queue(verified).recipient_id) or _OK)
        if queue is not None and not self._context.ownership.owns(queue.recipient_id):
            # asked of every worker (docs/workers.md#a-contact-queues-link-id): a shared
            # store (PostgreSQL) finds every worker's queues, only the owner answers
            queue = None
        if type(cmd) is LKEY:
            # Verified with the key it installs (dispatch.py); messaging queues only.
            if queue is None or queue.queue_mode != b"M":
                return _reply(verified, AUTH)
            error = await queues.secure_queue(queue.recipient_id, cmd.sender_key)
            if error is not None:
                return _reply(verified, error)
            if queue.sender_key is None:
                self._context.counters.queues_secured += 1
                self._context.queue_active(queue.recipient_id)
            return await self._link_answer(verified, queue)
        # LGET: unsigned, so only contact queues answer (their link is meant to be read).
        if queue is None or not _is_contact_queue(queue):
            return _reply(verified, AUTH)
        return await self._link_answer(verified, queue)

    async def _link_answer(self, verified: Verified, queue: QueueRecord) -> list[bytes]:
        """LNK with the queue's link data, if the link is still the one asked for."""
        link = await self._context.queues.get_link(queue.recipient_id)
        if link is None or link.link_id != verified.entity_id:
            return _reply(verified, AUTH)
        return _reply(verified, LNK(queue.sender_id, link.fixed_data, link.user_data))

    async def _rkey(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        """RKEY replaces the recipient keys of a contact queue, as the reference does; any
        other queue is AUTH (docs/protocol.md#rkey)."""
        cmd: RKEY = verified.command  # type: ignore[assignment]
        queue = verified.queue
        if queue is None or queue.queue_mode != b"C":
            return _reply(verified, AUTH)
        error = await self._context.queues.set_recipient_keys(queue.recipient_id, cmd.rcv_keys)
        return _reply(verified, error or _OK)

    # --- service subscriptions (services.py) ------------------------------------------

    async def _subs(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        """SOKS n now; the messages follow from the delivery task, then ALLS."""
        figures = await self._context.services.subscribe_queues(client)
        return _reply(verified, SOKS(figures.count, figures.ids_hash))

    async def _nsubs(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        figures = await self._context.services.subscribe_notifiers(client)
        return _reply(verified, SOKS(figures.count, figures.ids_hash))

    # --- creating and securing ------------------------------------------------------

    async def _new(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        cmd: NEW = verified.command  # type: ignore[assignment]
        config = self._context.config
        if not config.allow_new_queues or not _password_ok(config.password, cmd.basic_auth):
            return _reply(verified, AUTH)
        if cmd.link is not None and (
            cmd.link.sender_id != hashlib.sha3_384(verified.corr_id).digest()[:ID_SIZE]
        ):
            # A sender id chosen by the client must come from the corrId, so that NEW
            # cannot tell whether a queue with some id exists (docs/protocol.md#short-links).
            return _reply(verified, CMD_PROHIBITED)
        if not await self._new_queue_allowed(client.conn):
            self._context.counters.new_queues_rate_limited += 1
            return _reply(verified, NEW_RATE_LIMITED)
        srv_priv, srv_pub = new_x25519()
        secret = box_key(srv_priv, cmd.rcv_dh_key)
        # A queue made in a service's session is the service's whatever its subMode,
        # as the reference has it (docs/protocol.md#service-signature).
        service_id = client.conn.service_id
        # The queue mode is kept from v15, where NEW states it (docs/protocol.md#short-links).
        queue_mode = cmd.queue_mode if verified.version >= versions.SHORT_LINKS else None

        ownership = self._context.ownership
        # The queue's worker: the one of the sender id the client chose, else this one.
        owner = None if cmd.link is None else ownership.owner_of(cmd.link.sender_id)

        def make_record(sender_id: bytes, link_id: bytes | None) -> QueueRecord:
            return QueueRecord(
                ownership.mint(owner), sender_id, cmd.rcv_auth_key,
                secret, None, bool(cmd.snd_secure),
                rcv_service_id=service_id,
                updated_at=int(time.time()),
                queue_mode=queue_mode,
                link_id=link_id,
            )

        record: QueueRecord | ErrorType
        if cmd.link is None:
            record = await _add_with_fresh_ids(
                lambda: make_record(ownership.mint(), None),
                self._context.queues.add_queue,
            )
        else:
            # A messaging queue's link id is the router's; a contact queue's, the client's
            # (the one id of a queue that need not map to its owner: docs/workers.md).
            link_id = cmd.link.link_id
            if link_id is None:
                link_id = ownership.mint(owner)
            record = make_record(cmd.link.sender_id, link_id)
            link = QueueLinkData(link_id, cmd.link.fixed_data, cmd.link.user_data)
            error = await self._context.queues.add_queue(record, link)
            if error is not None:
                # The client chose the sender id (and a contact queue's link id): no
                # retry, and a taken one is AUTH as in the reference.
                return _reply(verified, AUTH if error == DUPLICATE else error)
        if isinstance(record, ErrorType):
            return _reply(verified, record)
        rid, sid = record.recipient_id, record.sender_id
        self._context.counters.queues_created += 1
        self._context.queue_active(rid)
        notifier = None
        if cmd.notifier is not None:  # v17: the notifier at once, as NKEY would add it
            notifier = await self._add_notifier(
                record, cmd.notifier.notifier_key, cmd.notifier.rcv_ntf_dh_key
            )
            if isinstance(notifier, ErrorType):
                return _reply(verified, notifier)
        if cmd.subscribe:
            self._context.subscriptions.subscribe(client, rid, secret)
        return _reply(verified, IDS(
            rid, sid, srv_pub, cmd.snd_secure, link_id=record.link_id,
            service_id=service_id, notifier=notifier,
        ))

    async def _new_queue_allowed(self, conn: Connection) -> bool:
        return await self._new_limits.allow(conn, conn.transport.remote)

    async def _key(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        cmd: KEY = verified.command  # type: ignore[assignment]
        return await self._secure(verified, _queue(verified), cmd.sender_key)

    async def _skey(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        cmd: SKEY = verified.command  # type: ignore[assignment]
        return await self._secure(verified, _queue(verified), cmd.sender_key)

    async def _secure(self, verified: Verified, queue: QueueRecord, key: bytes) -> list[bytes]:
        """Same key again is OK, another key is AUTH (the store decides, atomically)."""
        error = await self._context.queues.secure_queue(queue.recipient_id, key)
        if error is None and queue.sender_key is None:
            self._context.counters.queues_secured += 1
            self._context.queue_active(queue.recipient_id)
        return _reply(verified, error or _OK)

    async def _off(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        return _reply(verified, await self._context.queues.suspend_queue(verified.entity_id) or _OK)

    async def _del(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        return _reply(verified, await self.delete_queue(verified.entity_id, by=client) or _OK)

    async def delete_queue(
        self, recipient_id: bytes, by: ClientSubscriptions | None = None
    ) -> ErrorType | None:
        """DEL, and the control port's delete: messages and notifier go before the
        answer; every subscriber but `by` gets DELD (its notifier's, END)."""
        context = self._context
        removed = await context.queues.delete_queue(recipient_id)
        if isinstance(removed, ErrorType):
            return removed
        await context.messages.delete_queue_messages(recipient_id)
        if removed.notifier is not None:
            context.notifications.forget(removed.notifier.notifier_id)
        context.subscriptions.end_queue(recipient_id, Event.DELETED, by=by)
        if removed.notifier is not None:
            context.subscriptions.end_notifier(removed.notifier.notifier_id, Event.DELETED)
        context.blocked.remove(recipient_id)
        context.counters.queues_deleted += 1
        return None

    # --- messages -----------------------------------------------------------------

    async def _send(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        begun = await self._send_begin(verified)
        if not isinstance(begun, _SendBegun):
            return begun
        result = await self._context.messages.write_message(
            begun.queue.recipient_id, begun.msg, self._context.config.quota)
        return self._send_finish(begun, result)

    async def _send_begin(self, verified: Verified) -> _SendBegun | list[bytes]:
        """A SEND up to its write: the message to write, or the SEND's answer if it is
        refused."""
        arrived = perf_counter()
        cmd: SEND = verified.command  # type: ignore[assignment]
        queue = _queue(verified)
        if len(cmd.body) > versions.max_message_length(verified.version):
            self._context.counters.messages_large_refused += 1
            return _reply(verified, LARGE_MSG)
        if queue.status is QueueStatus.OFF:
            return _reply(verified, AUTH)
        # Only the notification flag is kept: the MSG body carries 'T'/'F'
        # (docs/protocol.md#encryption).
        msg = Message(secrets.token_bytes(ID_SIZE), int(time.time()), cmd.flags[:1], cmd.body)
        subscriptions = self._context.subscriptions
        if subscriptions.subscriber_of(queue.recipient_id) is not None or (
            queue.rcv_service_id is not None
            and subscriptions.service_holder(queue.rcv_service_id, queue.recipient_id)
        ):
            self._context.latencies.sent(msg.msg_id, arrived)
        await self._context.expire_before_send(queue.recipient_id)
        self._context.queue_active(queue.recipient_id)
        return _SendBegun(verified, queue, msg)

    def _send_finish(self, begun: _SendBegun, result: WriteResult) -> list[bytes]:
        """The end of a SEND once its write returned (committed)."""
        verified, queue, msg = begun.verified, begun.queue, begun.msg
        cmd: SEND = verified.command  # type: ignore[assignment]
        # Whatever the result: the write is visible now, and an idle subscriber of a
        # queue with messages must get one, however it came to be idle (delivery.py).
        into_empty = result is WriteResult.STORED_INTO_EMPTY
        self._context.deliverer.stored(
            queue.recipient_id, msg, queue.rcv_dh_secret, into_empty=into_empty,
            service_id=queue.rcv_service_id)
        if result is WriteResult.QUOTA_EXCEEDED:
            self._context.latencies.not_stored(msg.msg_id)
            self._context.counters.messages_quota_refused += 1
            return _reply(verified, QUOTA)
        if result is WriteResult.STORE_FULL:
            self._context.latencies.not_stored(msg.msg_id)
            self._context.counters.messages_store_full += 1
            return _reply(verified, MEMORY_FULL)
        self._context.counters.messages_sent += 1
        if cmd.notify and queue.notifier is not None:
            # sent with the next batch, to the notifier service's holder if it has one
            self._context.notifications.notify(queue.notifier, msg, queue.ntf_service_id)
        return _reply(verified, _OK)

    async def _sub(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        begun = await self._sub_begin(client, verified)
        if not isinstance(begun, _SubBegun):
            return begun
        subscriptions = self._context.subscriptions
        try:
            msg = await self._context.messages.peek_message(begun.recipient_id)
        finally:
            missed = subscriptions.answered(begun.sub)
        return self._sub_finish(client, begun, msg, missed)

    async def _sub_begin(
        self, client: ClientSubscriptions, verified: Verified
    ) -> _SubBegun | list[bytes]:
        """A SUB up to the read of its head: the queue is this connection's, and holds
        its answer (`Subscriptions.answering`); or the SUB's answer, if it is refused."""
        rid = verified.entity_id
        sub = client.queues.get(rid)
        if sub is not None and sub.get_mode:
            return _reply(verified, CMD_PROHIBITED)
        queue = _queue(verified)
        # The queue joins this connection's service, or leaves its old one (services.py).
        await self._context.services.associate(client, queue, Party.RECIPIENT)
        subscriptions = self._context.subscriptions
        sub = client.queues.get(rid)  # another connection may have taken it meanwhile
        if sub is None:
            # Keyed by the store's own id object, not the copy parsed from this block,
            # so that an idle subscription holds no bytes object of its own.
            sub = subscriptions.subscribe(client, queue.recipient_id, queue.rcv_dh_secret)
        else:
            subscriptions.send_again(client, sub)
        # SOK names the service the queue now belongs to; OK before v16 (the codec).
        out = _reply(verified, SOK(client.conn.service_id))
        self._context.counters.subscriptions_ok += 1
        self._context.queue_active(rid)
        subscriptions.answering(sub)
        return _SubBegun(rid, sub, queue.rcv_dh_secret, out)

    async def _get(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        rid = verified.entity_id
        queue = _queue(verified)
        # The store's id object, as for SUB: the GET-mode `Sub` holds no copy of its own.
        sub = self._context.subscriptions.subscribe_for_get(client, queue.recipient_id)
        if sub is None:
            return _reply(verified, CMD_PROHIBITED)
        msg = await self._context.messages.peek_message(rid)
        if msg is None or client.queues.get(rid) is not sub:
            return _reply(verified, _OK)
        return [self._context.deliverer.message_transmission(
            verified.corr_id, rid, sub, msg, queue.rcv_dh_secret)]

    async def _ack(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        """Delete the delivered message and answer with the next one (SUB) or OK."""
        begun = self._ack_begin(client, verified)
        if not isinstance(begun, _AckBegun):
            return begun
        with self._context.subscriptions.acknowledging(client, begun.sub) as msg_id:
            deleted, head = await self._context.messages.delete_message(
                begun.recipient_id, msg_id)
        return self._ack_finish(client, begun, deleted, head)

    def _ack_begin(
        self, client: ClientSubscriptions, verified: Verified
    ) -> _AckBegun | list[bytes]:
        """An ACK up to its delete: the subscription whose message in flight it deletes,
        or the ACK's answer (NO_MSG)."""
        cmd: ACK = verified.command  # type: ignore[assignment]
        rid = verified.entity_id
        sub = client.queues.get(rid)
        delivered = None if sub is None else self._context.subscriptions.delivered(sub)
        if sub is None or delivered is None:
            return _reply(verified, NO_MSG)
        if cmd.msg_id and cmd.msg_id != delivered[0]:  # an empty id matches (reference)
            return _reply(verified, NO_MSG)
        return _AckBegun(verified, rid, sub)

    def _ack_finish(self, client: ClientSubscriptions, begun: _AckBegun, deleted: bool,
                    head: Message | None) -> list[bytes]:
        """The end of an ACK once its delete returned (committed): OK, or the next
        message."""
        verified, rid, sub = begun.verified, begun.recipient_id, begun.sub
        if deleted:
            self._context.counters.messages_acked += 1
            self._context.queue_active(rid)
        subscriptions = self._context.subscriptions
        if head is None or sub.get_mode or not subscriptions.can_push(client, sub):
            subscriptions.settle(client, sub)  # a service's queue emptied: its `Sub` goes
            return _reply(verified, _OK)
        return [self._context.deliverer.message_transmission(
            verified.corr_id, rid, sub, head, _queue(verified).rcv_dh_secret)]

    async def _que(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        rid = verified.entity_id
        size = await self._context.messages.queue_size(rid)
        head = await self._context.messages.peek_message(rid)
        sub = client.queues.get(rid)
        subscriptions = self._context.subscriptions
        state = subscriptions.queue_state(client, sub)
        delivered = None if sub is None else subscriptions.delivered(sub)
        return _reply(verified, INFO(queue_info(
            _queue(verified), size, head, sub, state, None if delivered is None else delivered[0])))

    # --- notifiers -------------------------------------------------------------------

    async def _nkey(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        """Add or replace the notifier: a new id and DH key each time
        (docs/protocol.md#behaviour)."""
        cmd: NKEY = verified.command  # type: ignore[assignment]
        nid = await self._add_notifier(_queue(verified), cmd.notifier_key, cmd.rcv_ntf_dh_key)
        return _reply(verified, nid)

    async def _add_notifier(
        self, queue: QueueRecord, notifier_key: bytes, rcv_ntf_dh_key: bytes
    ) -> NID | ErrorType:
        """A notifier for `queue` (NKEY, or NEW with notifier credentials)."""
        srv_priv, srv_pub = new_x25519()
        secret = box_key(srv_priv, rcv_ntf_dh_key)
        ownership = self._context.ownership
        owner = ownership.owner_of(queue.recipient_id)
        creds = await _add_with_fresh_ids(
            lambda: NotifierCreds(ownership.mint(owner), notifier_key, secret),
            partial(self._context.queues.add_notifier, queue.recipient_id),
        )
        if isinstance(creds, ErrorType):
            return creds
        if queue.notifier is not None:
            # The old notifier is gone with its pending NMSGs; its subscriber gets END.
            self._context.notifications.forget(queue.notifier.notifier_id)
            self._context.subscriptions.end_notifier(queue.notifier.notifier_id, Event.NTF_END)
        self._context.counters.notifiers_created += 1
        return NID(creds.notifier_id, srv_pub)

    async def _ndel(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        removed = await self._context.queues.delete_notifier(verified.entity_id)
        if removed is not None:
            self._context.counters.notifiers_deleted += 1
            self._context.notifications.forget(removed.notifier_id)
            self._context.subscriptions.end_notifier(removed.notifier_id, Event.DELETED)
        return _reply(verified, _OK)

    async def _nsub(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        """Subscribe the notifier here; NMSGs waiting for it go with the next batch."""
        queue = _queue(verified)
        assert queue.notifier is not None  # verified against its key
        await self._context.services.associate(client, queue, Party.NOTIFIER)
        nid = queue.notifier.notifier_id  # the store's id object, as for SUB
        self._context.subscriptions.subscribe_notifier(client, nid)
        self._context.notifications.subscribed(nid, client.conn.service_id)
        self._context.counters.notifier_subscriptions_ok += 1
        return _reply(verified, SOK(client.conn.service_id))


@dataclass(slots=True)
class _SubBegun:
    """A SUB registered and holding its answer, its head not read yet."""

    recipient_id: bytes  # as the client named it
    sub: Sub
    box_key: bytes  # the queue's rcv_dh_secret, for its MSG
    out: list[bytes]  # its answer so far (SOK)


@dataclass(slots=True)
class _SendBegun:
    """A SEND whose message is made, not written yet."""

    verified: Verified
    queue: QueueRecord
    msg: Message


@dataclass(slots=True)
class _AckBegun:
    """An ACK of the message in flight, not deleted yet."""

    verified: Verified
    recipient_id: bytes
    sub: Sub


class PreparedRun:
    """A run of SENDs or ACKs done together (`Commands.send_run`, `ack_run`): each
    command's answers, or what its handler would have raised, handed out in its turn."""

    __slots__ = ("_answers", "seconds_each")

    def __init__(self, answers: list[list[bytes] | BaseException], seconds_each: float) -> None:
        self._answers = answers
        self.seconds_each = seconds_each

    def finish(self, index: int) -> list[bytes]:
        answer = self._answers[index]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class SubRun:
    """A run of SUBs prepared by `Commands.subscribe_run`, answered one by one."""

    __slots__ = ("_commands", "_client", "_begun", "_heads", "seconds_each")

    def __init__(
        self, commands: Commands, client: ClientSubscriptions,
        begun: list[_SubBegun | list[bytes] | BaseException],
        heads: dict[bytes, Message | None] | BaseException, seconds_each: float,
    ) -> None:
        self._commands = commands
        self._client = client
        self._begun = begun
        self._heads = heads
        self.seconds_each = seconds_each

    def finish(self, index: int) -> list[bytes]:
        """The `index`th SUB's answers; raises what its handler would have raised."""
        begun = self._begun[index]
        if isinstance(begun, BaseException):
            raise begun
        if not isinstance(begun, _SubBegun):
            return begun
        heads = self._heads
        missed = self._commands._context.subscriptions.answered(begun.sub)
        if isinstance(heads, BaseException):
            raise heads
        return self._commands._sub_finish(self._client, begun, heads[begun.recipient_id],
                                          missed)


async def _add_with_fresh_ids(
    make: Callable[[], T], add: Callable[[T], Awaitable[ErrorType | None]]
) -> T | ErrorType:
    """`add(make())` until the store takes it: random ids that are taken already
    (DUPLICATE) are drawn again, `_ID_ATTEMPTS` times at most, then INTERNAL."""
    for _ in range(_ID_ATTEMPTS):
        value = make()
        error = await add(value)
        if error is None:
            return value
        if error != DUPLICATE:
            return error
    return INTERNAL


def blocked_error(reason: str) -> ErrorType:
    """`ERR BLOCKED reason=spam` (docs/protocol.md, "Errors")."""
    return ErrorType("BLOCKED", f"reason={reason}")


def _is_contact_queue(queue: QueueRecord) -> bool:
    """A contact queue's link may be read unsigned (LGET); a queue created without a
    mode is one while no sender key is set, as contact queues were before SKEY."""
    if queue.queue_mode is not None:
        return queue.queue_mode == b"C"
    return queue.sender_key is None


def _is_secured_messaging_queue(queue: QueueRecord) -> bool:
    """Its link data went to the sender with LKEY: LSET may not change it any more."""
    return queue.queue_mode != b"C" and queue.sender_key is not None


def _password_ok(required: bytes | None, given: bytes | None) -> bool:
    if required is None:
        return True
    return given is not None and hmac.compare_digest(required, given)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def queue_info(
    queue: QueueRecord, size: int, head: Message | None, sub: Sub | None, state: str,
    delivered: bytes | None = None,
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
        if delivered is not None:  # the id of the message in flight
            qsub["qDelivered"] = _b64(delivered)
        info["qiSub"] = qsub
    if head is not None:
        info["qiMsg"] = {
            "msgId": _b64(head.msg_id),
            "msgTs": datetime.fromtimestamp(head.ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "msgType": "quota" if head.quota else "message",
        }
    return json.dumps(info, separators=(",", ":"))
