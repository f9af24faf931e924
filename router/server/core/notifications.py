"""NMSG: the notifications of flagged SENDs, kept per notifier and sent in batches.

Theory of operation (docs/protocol.md#command-table, #encryption, #limits; the reference router's
ntfStore):

- Every SEND with the notification flag to a queue that has a notifier adds
  one NMSG for that notifier id, whether or not a notifier is subscribed
  now: a notification server that reconnects gets what it missed. The NMSG
  is built at once (metadata boxed with the notifier's DH secret and a fresh
  random nonce) and kept as its encoded transmission.
- What is kept per notifier is bounded (`max_pending`, oldest dropped first)
  and expires after `ttl` seconds, as the reference drops notifications
  after 24 hours. DEL, NDEL and an NKEY that replaces the notifier drop the
  notifier's pending NMSGs before the command is answered.
- One router task flushes every `interval` seconds: the notifier ids with
  something pending and a subscriber are grouped by subscriber connection,
  and each connection gets all of its NMSGs as one batch, which its send
  task packs into as few blocks as fit (about 80 NMSGs per block).
- The flush never waits on a client. A connection whose send channel is full
  (or still has earlier events waiting) is skipped; its NMSGs stay here,
  still bounded, and the next flush tries again. Others are not held up.
- The subscriber is looked up when the flush runs, so NMSGs queued before a
  NSUB/NSUBS takeover go to the new subscriber, not the displaced one.
- A notifier associated with a notifier service (the queue record's
  `ntf_service_id` when the SEND read it, kept current by NSUB) goes to the
  holder of that service's NSUBS, if any, else to its own subscriber: NSUBS
  registers nothing per notifier (docs/protocol.md#service-subscriptions), and
  what is kept per notifier is bounded by what is pending.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from router.protocol.codec import encode_response_transmission
from router.protocol.crypto import encrypt_ntf_meta
from router.protocol.types import NMSG
from store.interfaces import Message, NotifierCreds

if TYPE_CHECKING:
    from .connection import Connection

# Notifier id -> the connection subscribed to it now, if any (subscriptions.py).
SubscriberLookup = Callable[[bytes], "Connection | None"]

NTF_TTL = 24 * 3600  # seconds a notification is kept (docs/protocol.md#limits)
NTF_EXPIRE_INTERVAL = 3600.0  # how often expired notifications are dropped
NTF_MAX_PENDING = 64  # kept per notifier; a notification server needs the latest ones

_Pending = deque[tuple[int, bytes]]  # (ts of the message, encoded NMSG transmission)


class Notifications:
    __slots__ = (
        "_subscriber_of", "_service_holder", "_service_of", "_interval", "_ttl",
        "_max_pending", "_clock",
        "_pending", "_ready_ids", "_ready", "sent", "dropped",
    )

    def __init__(
        self,
        subscriber_of: SubscriberLookup,
        interval: float,
        *,
        ttl: int = NTF_TTL,
        max_pending: int = NTF_MAX_PENDING,
        clock: Callable[[], float] = time.time,
        service_holder: SubscriberLookup | None = None,
    ) -> None:
        self._subscriber_of = subscriber_of
        # Service id -> the connection holding its NSUBS, if any (subscriptions.py).
        self._service_holder = service_holder
        # Notifier id -> its notifier service, for the notifiers with NMSGs pending.
        self._service_of: dict[bytes, bytes] = {}
        self._interval = interval
        self._ttl = ttl
        self._max_pending = max_pending
        self._clock = clock
        self._pending: dict[bytes, _Pending] = {}
        self._ready_ids: set[bytes] = set()  # pending and subscribed: the next flush sends them
        self._ready = trio.Event()
        self.sent = 0  # NMSGs handed to a connection
        self.dropped = 0  # NMSGs dropped: over the bound or expired

    def __len__(self) -> int:
        """NMSGs waiting, subscribed or not."""
        return sum(len(p) for p in self._pending.values())

    def pending(self, notifier_id: bytes) -> int:
        p = self._pending.get(notifier_id)
        return 0 if p is None else len(p)

    # --- changes (called by command handlers; never wait) -----------------------------

    def notify(self, creds: NotifierCreds, msg: Message, service_id: bytes | None = None) -> None:
        """A flagged SEND was stored: queue its NMSG for the notifier (associated
        with the notifier service `service_id`, if any)."""
        nid = creds.notifier_id
        if service_id is None:
            self._service_of.pop(nid, None)
        else:
            self._service_of[nid] = service_id
        nonce, meta = encrypt_ntf_meta(creds.rcv_ntf_dh_secret, msg.msg_id, msg.ts)
        t = encode_response_transmission(b"", nid, NMSG(nonce, meta))
        pending = self._pending.get(nid)
        if pending is None:
            pending = self._pending[nid] = deque(maxlen=self._max_pending)
        elif len(pending) == self._max_pending:
            self.dropped += 1
        pending.append((msg.ts, t))
        self._mark_ready(nid)

    def subscribed(self, notifier_id: bytes, service_id: bytes | None = None) -> None:
        """A connection subscribed to the notifier (NSUB, which associated it with
        `service_id` or released it): what is pending goes at the next flush."""
        if notifier_id in self._pending:
            if service_id is None:
                self._service_of.pop(notifier_id, None)
            else:
                self._service_of[notifier_id] = service_id
            self._mark_ready(notifier_id)

    def service_subscribed(self, service_id: bytes) -> None:
        """NSUBS: what is pending for the service's notifiers goes at the next flush
        (a look at the pending ones only, bounded as they are)."""
        for nid, service in list(self._service_of.items()):
            if service == service_id:
                self._mark_ready(nid)

    def forget(self, notifier_id: bytes) -> int:
        """The notifier is gone (DEL, NDEL, replaced by NKEY): drop its NMSGs."""
        self._ready_ids.discard(notifier_id)
        self._service_of.pop(notifier_id, None)
        pending = self._pending.pop(notifier_id, None)
        return 0 if pending is None else len(pending)

    def _connection(self, notifier_id: bytes) -> Connection | None:
        """Who gets the notifier's NMSGs now: its service's holder, else its subscriber."""
        service_id = self._service_of.get(notifier_id)
        if service_id is not None and self._service_holder is not None:
            conn = self._service_holder(service_id)
            if conn is not None:
                return conn
        return self._subscriber_of(notifier_id)

    def _mark_ready(self, notifier_id: bytes) -> None:
        if self._connection(notifier_id) is not None:
            self._ready_ids.add(notifier_id)
            self._ready.set()

    # --- the router task ------------------------------------------------------------------

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flush_loop)
            nursery.start_soon(self._expire_loop)

    async def _flush_loop(self) -> None:
        while True:
            await self._ready.wait()
            await trio.sleep(self._interval)
            self.flush()

    async def _expire_loop(self) -> None:
        while True:
            await trio.sleep(NTF_EXPIRE_INTERVAL)
            self.expire()

    def flush(self) -> None:
        """Hand each subscriber its NMSGs as one batch; skip (and retry later) full ones."""
        self._ready = trio.Event()
        ids, self._ready_ids = self._ready_ids, set()
        by_conn: dict[Connection, list[bytes]] = {}
        for nid in ids:
            conn = self._connection(nid)
            if conn is not None and not conn.closed:
                by_conn.setdefault(conn, []).append(nid)
        for conn, nids in by_conn.items():
            if conn.overflow_events or conn.outbox_full():
                self._ready_ids.update(nids)  # this client is behind: keep them for it
                continue
            batch = self._take(nids)
            if batch:
                # No checkpoint since outbox_full(): this cannot be refused.
                conn.push_nowait(batch)
                self.sent += len(batch)
        if self._ready_ids:
            self._ready.set()

    def _take(self, notifier_ids: list[bytes]) -> list[bytes]:
        cutoff = self._clock() - self._ttl
        batch: list[bytes] = []
        for nid in notifier_ids:
            self._service_of.pop(nid, None)
            for ts, t in self._pending.pop(nid, ()):
                if ts >= cutoff:
                    batch.append(t)
                else:
                    self.dropped += 1
        return batch

    def expire(self) -> int:
        """Drop notifications older than the TTL; returns how many."""
        cutoff = self._clock() - self._ttl
        expired = 0
        for nid in list(self._pending):
            pending = self._pending[nid]
            while pending and pending[0][0] < cutoff:
                pending.popleft()
                expired += 1
            if not pending:
                del self._pending[nid]
                self._ready_ids.discard(nid)
                self._service_of.pop(nid, None)
        self.dropped += expired
        return expired
