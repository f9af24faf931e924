"""Service subscriptions: SUBS, NSUBS, ENDS and ALLS (docs/protocol.md#services,
#service-subscriptions, #client-service).

Theory of operation. A connection may prove a service identity by its TLS
client certificate and `clientService`; `Connection.service_id` is then set.

- Association. A queue's recipient side belongs to the service of the last
  connection that subscribed it with a service signature (SUB, or any NEW in a
  service's session); its notifier side to the service of the last
  NSUB. A connection without a service removes the association, so a later
  SUBS does not take the queue back from its new subscriber. The store keeps
  the association and each service's count and ids hash (`QueueStore.set_service`,
  a block's at once by `set_queues_service`), so they survive restarts.
- SUBS. The router reads the service's figures and queues, makes this
  connection the service's subscriber, answers `SOKS n idsHash` with the
  store's figures and then catches up:
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
  SUBS takes over: the first gets `ENDS n idsHash` (the figures of its own SOKS),
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

Who holds which service, and what a takeover ends, is subscription state:
`Subscriptions` (subscriptions.py) keeps it; this module reads the store and
walks the queues.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from router.protocol.codec import encode_response_transmission
from router.protocol.types import ALLS
from store.interfaces import MessageStore, Party, QueueRecord, QueueStore, ServiceQueues

from .subscriptions import CatchUp, ClientSubscriptions, Subscriptions

if TYPE_CHECKING:
    from .delivery import Deliverer
    from .notifications import Notifications

CATCH_UP_STEP = 64  # queues looked at between two checks for other delivery work


def all_received(client: ClientSubscriptions) -> list[bytes]:
    return [encode_response_transmission(b"", b"", ALLS(), client.conn.version)]


class Services:
    __slots__ = ("_queues", "_messages", "_subscriptions", "_deliverer", "_notifications",
                 "walk_done")

    def __init__(
        self,
        queues: QueueStore,
        messages: MessageStore,
        subscriptions: Subscriptions,
        deliverer: Deliverer,
        notifications: Notifications,
    ) -> None:
        self._queues = queues
        self._messages = messages
        self._subscriptions = subscriptions
        self._deliverer = deliverer
        self._notifications = notifications
        # What a walk's end writes: ALLS; in a worker of several, ALLS once every
        # worker's walk of the service is done (workers/handoff.py).
        self.walk_done: Callable[[ClientSubscriptions], list[bytes]] = all_received

    # --- association (SUB, NEW with subMode S, NSUB) -----------------------------

    async def associate(
        self, client: ClientSubscriptions, queue: QueueRecord, party: Party
    ) -> None:
        """Record the subscribing connection's service (or none) on the queue's side."""
        service_id = client.conn.service_id
        current = queue.rcv_service_id if party is Party.RECIPIENT else queue.ntf_service_id
        if current != service_id:
            await self._queues.set_service(queue.recipient_id, party, service_id)

    # --- SUBS ------------------------------------------------------------------------

    async def subscribe_queues(self, client: ClientSubscriptions) -> ServiceQueues:
        """SUBS: take the service over and set up the catch-up; returns the figures
        for SOKS: the count and ids hash the store keeps
        (docs/protocol.md#service-subscriptions)."""
        service_id = client.conn.service_id
        assert service_id is not None  # the dispatcher lets SUBS through only then
        figures = await self._queues.service_summary(service_id, Party.RECIPIENT)
        records = await self._queues.service_queues(service_id, Party.RECIPIENT)
        self._subscriptions.take_over_service(
            client, Party.RECIPIENT, figures.count, figures.ids_hash
        )
        # Started once the SOKS is on its way (ClientSubscriptions.start_catch_up).
        client.next_catch_up = CatchUp(service_id, [r.recipient_id for r in records])
        return figures

    async def catch_up_step(self, client: ClientSubscriptions) -> None:
        """Called by the delivery task: a few queues of the walk, then ALLS at the end."""
        walk = client.catch_up
        assert walk is not None
        end = min(walk.position + CATCH_UP_STEP, len(walk.recipient_ids))
        while walk.position < end and client.catch_up is walk:
            rid = walk.recipient_ids[walk.position]
            walk.position += 1
            if await self._catch_up_queue(client, walk.service_id, rid):
                walk.delivered += 1
        if client.catch_up is walk and walk.done:
            client.catch_up = None
            alls = self.walk_done(client)
            if alls:
                await client.conn.push(alls)
        else:
            await trio.lowlevel.checkpoint()  # queues without messages never wait

    async def _catch_up_queue(
        self, client: ClientSubscriptions, service_id: bytes, rid: bytes
    ) -> bool:
        """Subscribe one queue of the walk and push its head; True if a message went out."""
        queue = await self._queues.get_queue(Party.RECIPIENT, rid)
        subscriptions = self._subscriptions
        held = subscriptions.service_held(client, Party.RECIPIENT)
        if (
            queue is None  # deleted since SUBS
            or queue.rcv_service_id != service_id  # taken by another subscriber since
            or held is None
        ):
            return False
        rid = queue.recipient_id
        sub = client.queues.get(rid)
        if sub is None:
            sub = subscriptions.subscribe(client, rid, queue.rcv_dh_secret)
        elif sub.get_mode:
            return False  # GET was used on this connection: SUB is prohibited here too
        held.subs.add(sub)
        msg = await self._messages.peek_message(rid)
        if msg is None or not subscriptions.may_push(client, sub, msg):
            return False
        await client.conn.push([self._deliverer.message_transmission(
            b"", rid, sub, msg, queue.rcv_dh_secret)])
        return True

    # --- NSUBS ------------------------------------------------------------------------

    async def subscribe_notifiers(self, client: ClientSubscriptions) -> ServiceQueues:
        """NSUBS: take the service's notifiers over; returns the figures for SOKS."""
        service_id = client.conn.service_id
        assert service_id is not None
        figures = await self._queues.service_summary(service_id, Party.NOTIFIER)
        records = await self._queues.service_queues(service_id, Party.NOTIFIER)
        subscriptions = self._subscriptions
        held = subscriptions.take_over_service(
            client, Party.NOTIFIER, figures.count, figures.ids_hash
        )
        for record in records:
            if record.notifier is not None:
                nid = record.notifier.notifier_id
                subscriptions.subscribe_notifier(client, nid)
                self._notifications.subscribed(nid)
                held.notifier_ids.add(nid)
        return figures
