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
- SUBS. The router reads the service's figures, makes this connection the
  service's subscriber, answers `SOKS n idsHash` with the store's figures and
  then catches up: the connection's one delivery task walks the service's
  queues by pages of the store in recipient id order
  (`QueueStore.service_queue_page`, keyset: the next page starts past the
  last id read), and for each queue that is still associated it registers
  the subscription (an individual subscriber elsewhere gets END) and pushes
  the queue's head message. When the store has no page left it pushes
  `ALLS`. No task per queue, and the walk holds one page, whatever the
  count: what grows with the queues is the subscriptions themselves. A
  queue associated before SUBS and still associated when the walk reaches
  its id is walked exactly once; one associated meanwhile was subscribed by
  the command that associated it (or comes in a later page), one released
  or deleted is skipped.
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

from .delivery import DELIVERY_BATCH
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
        """Subscribe the queues of one step of the walk and push their heads (one
        store read for the records, one for the heads); returns how many went out.

        Each queue is registered before its head is read, and every head is marked
        in flight as soon as it is read (no await between), so that a SEND's push
        and this one never both deliver a message (the theory of operation above)."""
        records = await self._queues.get_queues(Party.RECIPIENT, rids)
        subscriptions = self._subscriptions
        held = subscriptions.service_held(client, Party.RECIPIENT)
        if held is None or client.catch_up is not walk:
            return 0
        walked: list[tuple[Sub, QueueRecord]] = []
        for queue in records:
            if queue is None or queue.rcv_service_id != walk.service_id:
                continue  # deleted, or taken by another subscriber, since the page was read
            rid = queue.recipient_id
            sub = client.queues.get(rid)
            if sub is None:
                sub = subscriptions.subscribe(client, rid, queue.rcv_dh_secret)
            elif sub.get_mode:
                continue  # GET was used on this connection: SUB is prohibited here too
            held.subs.add(sub)
            walked.append((sub, queue))
        if not walked:
            return 0
        heads = await self._messages.peek_messages([queue.recipient_id for _, queue in walked])
        out: list[tuple[Sub, tuple[bytes, int], bytes]] = []
        for (sub, queue), msg in zip(walked, heads, strict=True):
            if msg is None or not subscriptions.may_push(client, sub, msg):
                continue
            transmission = self._deliverer.message_transmission(
                b"", queue.recipient_id, sub, msg, queue.rcv_dh_secret)
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
        """NSUBS: take the service's notifiers over; returns the figures for SOKS."""
        service_id = client.conn.service_id
        assert service_id is not None
        figures = await self._queues.service_summary(service_id, Party.NOTIFIER)
        subscriptions = self._subscriptions
        held = subscriptions.take_over_service(
            client, Party.NOTIFIER, figures.count, figures.ids_hash
        )
        after: bytes | None = None
        while True:  # by pages of the store, as the SUBS walk
            page = await self._queues.service_queue_page(
                service_id, Party.NOTIFIER, after, CATCH_UP_PAGE
            )
            if subscriptions.service_held(client, Party.NOTIFIER) is not held:
                break  # displaced meanwhile: the new holder subscribes them
            for nid in page:
                subscriptions.subscribe_notifier(client, nid)
                self._notifications.subscribed(nid)
                held.notifier_ids.add(nid)
            if len(page) < CATCH_UP_PAGE:
                break
            after = page[-1]
        return figures
