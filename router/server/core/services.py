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
- Holding. A service subscription is one entry per service and side
  (`Subscriptions.take_over_service`: service id -> the holding connection),
  nothing per queue. A SEND to a queue nobody holds with SUB whose record
  names a held service is pushed to the holder (`Deliverer.stored`) through a
  `Sub` made then (`Subscriptions.subscribe_for_service`) and let go as soon
  as nothing of the queue is on its way (`Subscriptions.settle`: after the
  ACK of its last message, or a delivery that found nothing): what a service
  subscription keeps grows with its messages in flight, not with its queues
  (the reference's `serviceSubscribers`, `deliverServiceMessages`).
- SUBS. The router reads the service's figures, makes this connection the
  service's holder, answers `SOKS n idsHash` with the store's figures and
  then catches up: the connection's one delivery task walks the service's
  queues by pages of the store in recipient id order
  (`QueueStore.service_queue_page`, keyset: the next page starts past the
  last id read), reads the heads of each step at once and pushes those that
  are not in flight yet, through the same `Sub`s. When the store has no page
  left it pushes `ALLS`. No task per queue, and the walk holds one page,
  whatever the count. SENDs go to the holder only once the walk has started
  (after the SOKS): one stored before that is found by the walk.
- No gap, no duplicate. A queue has one `Sub` at most, router-wide, and both
  a SEND's push and the walk's check its `delivered` gate after their last
  await and set it before writing, so only one of them sends a given message;
  a SEND during the walk is pushed by its own path whether or not the walk
  has passed its queue.
- Displacement. A second connection proving the same service that sends
  SUBS takes over with one swap: the first gets `ENDS n idsHash` (the
  figures of its own SOKS), loses its catch-up and the `Sub`s of the
  messages in flight to it (`ServiceSubscription.subs`), and the new holder's
  walk pushes those messages again. A queue the first connection subscribed
  with plain SUB is an individual subscription: it stays there until the new
  walk takes it, which sends its END (docs/protocol.md#end-and-ends).
- NSUBS makes the connection the holder of the notifier side and nothing
  more: NMSGs of a notifier associated with the service go to the holder
  (notifications.py), those waiting with the next flush. There is no ALLS
  after NSUBS.

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

from .delivery import DELIVERY_BATCH
from .ownership import Ownership
from .subscriptions import CatchUp, ClientSubscriptions, Sub, Subscriptions

if TYPE_CHECKING:
    from .delivery import Deliverer
    from .notifications import Notifications

CATCH_UP_STEP = 64  # queues looked at between two checks for other delivery work
CATCH_UP_PAGE = 1024  # ids a walk reads from the store at once (and holds, at most)


def all_received(client: ClientSubscriptions) -> list[bytes]:
    return [encode_response_transmission(b"", b"", ALLS(), client.conn.version)]


class Services:
    __slots__ = ("_queues", "_messages", "_subscriptions", "_deliverer", "_notifications",
                 "walk_done", "_owns", "_whole_figures")

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
        self._owns: Callable[[bytes], bool] | None = None  # see share_a_store
        self._whole_figures = True

    def share_a_store(self, ownership: Ownership) -> None:
        """A worker of several on a store every worker reads (PostgreSQL): the store's
        figures of a service are the whole router's, so worker 0 alone answers them
        (the front adds every worker's, docs/workers.md#service-subscriptions), and a
        walk pushes this worker's own queues only (their owner holds their
        subscriptions)."""
        self._owns = ownership.owns
        self._whole_figures = ownership.index == 0

    async def _figures(self, service_id: bytes, party: Party) -> ServiceQueues:
        if not self._whole_figures:
            return ServiceQueues()
        return await self._queues.service_summary(service_id, party)

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
        figures = await self._figures(service_id, Party.RECIPIENT)
        self._subscriptions.take_over_service(
            client, Party.RECIPIENT, figures.count, figures.ids_hash
        )
        # Started once the SOKS is on its way (ClientSubscriptions.start_catch_up).
        client.next_catch_up = CatchUp(service_id)
        return figures

    async def catch_up_step(self, client: ClientSubscriptions) -> None:
        """Called by the delivery task: a few queues of the walk (a page read first
        when the one in hand is walked), then ALLS at the end."""
        walk = client.catch_up
        assert walk is not None
        if not walk.page and not walk.last_page:
            page = await self._queues.service_queue_page(
                walk.service_id, Party.RECIPIENT, walk.after, CATCH_UP_PAGE
            )
            if client.catch_up is not walk:
                return  # displaced meanwhile
            walk.page, walk.last_page = page, len(page) < CATCH_UP_PAGE
            if page:
                walk.after = page[-1]
            if self._owns is not None:
                walk.page = [rid for rid in page if self._owns(rid)]
        step, walk.page = walk.page[:CATCH_UP_STEP], walk.page[CATCH_UP_STEP:]
        if step:
            walk.delivered += await self._catch_up_queues(client, walk, step)
        if client.catch_up is walk and walk.done:
            client.catch_up = None
            alls = self.walk_done(client)
            if alls:
                await client.conn.push(alls)
        else:
            await trio.lowlevel.checkpoint()  # queues without messages never wait

    async def _catch_up_queues(
        self, client: ClientSubscriptions, walk: CatchUp, rids: list[bytes]
    ) -> int:
        """Push the heads of one step of the walk (one store read for the records, one
        for the heads); returns how many went out.

        A queue gets a `Sub` here only if it has a head to push (or to take it from
        an individual holder elsewhere, who gets END), and every head is marked in
        flight as soon as it is read (no await between): a SEND's push and this one
        never both deliver a message (the theory of operation above)."""
        records = await self._queues.get_queues(Party.RECIPIENT, rids)
        subscriptions = self._subscriptions
        if client.catch_up is not walk or not subscriptions.service_held(client, Party.RECIPIENT):
            return 0
        walked: list[QueueRecord] = []
        for queue in records:
            if queue is None or queue.rcv_service_id != walk.service_id:
                continue  # deleted, or taken by another subscriber, since the page was read
            rid = queue.recipient_id
            sub = client.queue(rid)
            if sub is None:
                if subscriptions.subscriber_of(rid) is not None:
                    subscriptions.subscribe_for_service(client, rid, queue.rcv_dh_secret)
            elif sub.get_mode:
                continue  # GET was used on this connection: SUB is prohibited here too
            else:  # its own SUB of the service's queue: the service subscription's now
                subscriptions.adopt_for_service(client, sub)
            walked.append(queue)
        if not walked:
            return 0
        heads = await self._messages.peek_messages([queue.recipient_id for queue in walked])
        held = client.catch_up is walk and subscriptions.service_held(client, Party.RECIPIENT)
        out: list[tuple[Sub, tuple[bytes, int], bytes]] = []
        for queue, msg in zip(walked, heads, strict=True):
            rid = queue.recipient_id
            sub = client.queue(rid)
            if msg is None or not held:
                if sub is not None:
                    subscriptions.settle(client, sub)
                continue
            if sub is None:
                if subscriptions.subscriber_of(rid) is not None:
                    continue  # an individual SUB took it meanwhile
                sub = subscriptions.subscribe_for_service(client, rid, queue.rcv_dh_secret)
            elif sub.get_mode:
                continue
            if not subscriptions.may_push(client, sub, msg):
                subscriptions.settle(client, sub)
                continue
            transmission = self._deliverer.message_transmission(
                b"", rid, sub, msg, queue.rcv_dh_secret)
            out.append((sub, (msg.msg_id, msg.ts), transmission))
        pushed = 0
        for at in range(0, len(out), DELIVERY_BATCH):
            # Batches of the delivery task's size bound what waits for a slow reader;
            # one whose queue left this connection while an earlier batch was written
            # is not sent (its in-flight entry went with it).
            batch = [transmission for sub, head, transmission in out[at:at + DELIVERY_BATCH]
                     if sub.client is client and subscriptions.delivered(sub) == head]
            if batch:
                await client.conn.push(batch)
                pushed += len(batch)
        return pushed

    # --- NSUBS ------------------------------------------------------------------------

    async def subscribe_notifiers(self, client: ClientSubscriptions) -> ServiceQueues:
        """NSUBS: take the service's notifiers over; returns the figures for SOKS.
        Nothing is registered per notifier: an NMSG of a notifier associated with the
        service goes to its holder (notifications.py), and those pending go now."""
        service_id = client.conn.service_id
        assert service_id is not None
        figures = await self._figures(service_id, Party.NOTIFIER)
        self._subscriptions.take_over_service(
            client, Party.NOTIFIER, figures.count, figures.ids_hash
        )
        self._notifications.service_subscribed(service_id)
        return figures
