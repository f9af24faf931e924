"""Service subscriptions: SUBS, NSUBS, ENDS and ALLS (docs/protocol.md#services, #service-extension;
docs/protocol.md#services).

Theory of operation. A connection may prove a service identity in its client
hello; `Connection.service_id` is then set.

- Association. A queue's recipient side belongs to the service of the last
  connection that subscribed it (SUB, or NEW with subMode S); its notifier
  side to the service of the last NSUB. A connection without a service
  removes the association, so a later SUBS does not take the queue back
  from its new subscriber. The store keeps the association
  (`QueueStore.set_service`), so it survives restarts.
- SUBS. The router reads the queues associated with the service, makes this
  connection the service's subscriber, answers `SOKS n` and then catches up:
  the connection's one delivery task walks the list, and for each queue that
  is still associated it registers the subscription (an individual
  subscriber elsewhere gets END) and pushes the queue's head message. When
  it has been through the whole list it pushes `ALLS`. No task per queue.
- No gap, no duplicate. Each queue is registered before its head is peeked,
  so a SEND stored before that is found by the peek, and a SEND stored after
  it is pushed by the SEND's own fast path. Both paths check the queue's
  `delivered` gate after their last await and set it before writing, so
  only one of them sends a given message.
- Displacement. A second connection proving the same service that sends
  SUBS takes over: the first gets `ENDS n` (n: the count of its own SOKS),
  loses its catch-up and, at once, every queue its walk subscribed or found
  subscribed (`ServiceSubscription.subs`); the queues move to the new
  connection as its catch-up reaches them. Meanwhile they are simply
  unsubscribed: SENDs are stored and the catch-up finds them. A queue the
  first connection subscribed with plain SUB and its walk never reached is
  an individual subscription: it stays there until the new walk takes it,
  which sends its END (docs/protocol.md#end-and-ends).
- NSUBS does the same for the notifier side without delivering anything:
  the notifier ids are registered at once, then any NMSGs waiting for them
  go out with the next notification flush. There is no ALLS after NSUBS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from router.protocol.codec import encode_response_transmission
from router.protocol.types import ALLS, ENDS
from store.interfaces import Party, QueueRecord

if TYPE_CHECKING:
    from .connection import Connection
    from .router import Router
    from .subscriptions import Sub

CATCH_UP_STEP = 64  # queues looked at between two checks for other delivery work
_ALLS = encode_response_transmission(b"", b"", ALLS())


@dataclass(slots=True)
class CatchUp:
    """The walk of one SUBS over its service's queues, done by the delivery task."""

    service_id: bytes
    recipient_ids: list[bytes]
    position: int = 0
    delivered: int = 0  # messages this walk pushed

    @property
    def done(self) -> bool:
        return self.position >= len(self.recipient_ids)


@dataclass(slots=True)
class ServiceSubscription:
    """One connection's service subscription on one side.

    It holds the `Sub` records the SUBS walk made or found (recipient side)
    or the notifier ids NSUBS subscribed (notifier side). A takeover ends
    exactly these with one ENDS;
    anything else the connection subscribed with plain SUB / NSUB stays an
    individual subscription, which gets its own END when it is taken.
    """

    conn: Connection
    count: int  # the n of its SOKS
    subs: set[Sub] = field(default_factory=set)  # recipient side
    notifier_ids: set[bytes] = field(default_factory=set)  # notifier side


@dataclass(slots=True)
class _Registry:
    """Service id -> its one subscribed connection, for one side (recipient or notifier)."""

    subscriptions: dict[bytes, ServiceSubscription] = field(default_factory=dict)

    def get(self, service_id: bytes) -> Connection | None:
        s = self.subscriptions.get(service_id)
        return None if s is None else s.conn

    def take_over(
        self, service_id: bytes, conn: Connection, count: int
    ) -> ServiceSubscription | None:
        """Make `conn` the subscriber; the other connection's subscription it replaces."""
        previous = self.subscriptions.get(service_id)
        if previous is not None and previous.conn is conn:
            previous.count = count  # SUBS again: what the first one holds stays held
            return None
        self.subscriptions[service_id] = ServiceSubscription(conn, count)
        return previous

    def held_by(self, service_id: bytes, conn: Connection) -> ServiceSubscription | None:
        """`conn`'s service subscription, if it is the service's subscriber."""
        s = self.subscriptions.get(service_id)
        return s if s is not None and s.conn is conn else None

    def forget(self, conn: Connection) -> None:
        service_id = conn.service_id
        s = self.subscriptions.get(service_id) if service_id is not None else None
        if s is not None and s.conn is conn:
            del self.subscriptions[service_id]  # type: ignore[arg-type]


class Services:
    __slots__ = ("_r", "receivers", "notifiers", "displaced")

    def __init__(self, router: Router) -> None:
        self._r = router
        self.receivers = _Registry()  # SUBS
        self.notifiers = _Registry()  # NSUBS
        self.displaced = 0  # ENDS sent

    # --- association (SUB, NEW with subMode S, NSUB) -----------------------------

    async def associate(self, conn: Connection, queue: QueueRecord, party: Party) -> None:
        """Record the subscribing connection's service (or none) on the queue's side."""
        current = queue.rcv_service_id if party is Party.RECIPIENT else queue.ntf_service_id
        if current != conn.service_id:
            await self._r.queues.set_service(queue.recipient_id, party, conn.service_id)

    # --- SUBS ------------------------------------------------------------------------

    async def subscribe_queues(self, conn: Connection) -> int:
        """SUBS: take the service over and set up the catch-up; returns n for SOKS."""
        service_id = conn.service_id
        assert service_id is not None  # the dispatcher lets SUBS through only then
        records = await self._r.queues.service_queues(service_id, Party.RECIPIENT)
        count = len(records)
        previous = self.receivers.take_over(service_id, conn, count)
        if previous is not None:
            self._end_receiver(previous)
        # Started once the SOKS is on its way (Connection.start_catch_up_after_response).
        conn.next_catch_up = CatchUp(service_id, [r.recipient_id for r in records])
        return count

    def _end_receiver(self, previous: ServiceSubscription) -> None:
        """ENDS for the queues the service subscription holds; queues this connection
        subscribed with plain SUB stay its own until the new walk takes them (END)."""
        conn = previous.conn
        conn.catch_up = conn.next_catch_up = None
        for sub in previous.subs:
            rid = sub.recipient_id
            if conn.subscriptions.get(rid) is sub:
                conn.drop_subscription(rid)
                self._r.subscribers.unsubscribe(rid, conn)
        self._send_ends(conn, previous.count)

    def _send_ends(self, conn: Connection, count: int) -> None:
        assert conn.service_id is not None
        conn.push_events([encode_response_transmission(b"", conn.service_id, ENDS(count))])
        self.displaced += 1

    async def catch_up_step(self, conn: Connection) -> None:
        """Called by the delivery task: a few queues of the walk, then ALLS at the end."""
        walk = conn.catch_up
        assert walk is not None
        end = min(walk.position + CATCH_UP_STEP, len(walk.recipient_ids))
        while walk.position < end and conn.catch_up is walk:
            rid = walk.recipient_ids[walk.position]
            walk.position += 1
            if await self._catch_up_queue(conn, walk.service_id, rid):
                walk.delivered += 1
        if conn.catch_up is walk and walk.done:
            conn.catch_up = None
            await conn.push([_ALLS])
        else:
            await trio.lowlevel.checkpoint()  # queues without messages never wait

    async def _catch_up_queue(self, conn: Connection, service_id: bytes, rid: bytes) -> bool:
        """Subscribe one queue of the walk and push its head; True if a message went out."""
        queue = await self._r.queues.get_queue(Party.RECIPIENT, rid)
        held = self.receivers.held_by(service_id, conn)
        if (
            queue is None  # deleted since SUBS
            or queue.rcv_service_id != service_id  # taken by another subscriber since
            or held is None
        ):
            return False
        rid = queue.recipient_id
        sub = conn.subscriptions.get(rid)
        if sub is None:
            sub = self._r.subscribe(conn, rid, queue.rcv_dh_secret)
        elif sub.get_mode:
            return False  # GET was used on this connection: SUB is prohibited here too
        held.subs.add(sub)
        msg = await self._r.messages.peek_message(rid)
        deliverer = self._r.deliverer
        if msg is None or not deliverer.may_push(conn, sub, msg):
            return False
        await conn.push([deliverer.message_transmission(b"", rid, sub, msg)])
        return True

    # --- NSUBS ------------------------------------------------------------------------

    async def subscribe_notifiers(self, conn: Connection) -> int:
        """NSUBS: take the service's notifiers over; returns n for SOKS."""
        service_id = conn.service_id
        assert service_id is not None
        records = await self._r.queues.service_queues(service_id, Party.NOTIFIER)
        previous = self.notifiers.take_over(service_id, conn, len(records))
        if previous is not None:
            self._end_notifier(previous)
        held = self.notifiers.held_by(service_id, conn)
        assert held is not None  # just taken over
        for record in records:
            if record.notifier is not None:
                nid = record.notifier.notifier_id
                self._r.subscribe_notifier(conn, nid)
                self._r.notifications.subscribed(nid)
                held.notifier_ids.add(nid)
        return len(records)

    def _end_notifier(self, previous: ServiceSubscription) -> None:
        """ENDS for the notifiers NSUBS subscribed; ones subscribed with plain NSUB stay
        until the new NSUBS takes them, which sends their END."""
        conn = previous.conn
        for nid in previous.notifier_ids:
            if nid in conn.ntf_subscriptions:
                conn.ntf_subscriptions.discard(nid)
                self._r.ntf_subscribers.unsubscribe(nid, conn)
        self._send_ends(conn, previous.count)

    # --- connections -----------------------------------------------------------------

    def forget(self, conn: Connection) -> None:
        """The connection closed: its service subscriptions end with it."""
        self.receivers.forget(conn)
        self.notifiers.forget(conn)
