"""Who is subscribed to what: the one owner of every piece of subscription state.

Theory of operation (docs/protocol.md#behaviour, the reference router's model):

- Each connection has a `ClientSubscriptions`: the queues it used SUB or GET
  on, the notifier ids it NSUBed, its `deliveries` map (pending_pushes.py)
  and the SUBS walk its delivery task does (`CatchUp`). The `Connection`
  itself only does I/O.
- Router-wide, each recipient id maps to the one `Sub` that holds the queue,
  and the `Sub` names its subscriber (`Sub.client`); each notifier id names
  its subscriber. A SUB from another connection replaces the entry; the
  displaced one loses its `Sub` at once and is told with an END event. GET
  never enters the registry: its `GetSub` stays with its connection.
- One map entry per subscription: a connection finds its queues through the
  router-wide map, and keeps only their ids (to let them go when it closes),
  so an idle subscription is one `Sub` block, one entry of that map and an
  id pointer (bench/RESULTS.md, "Where the memory goes"). The `Sub` holds no
  key: the queue's `rcv_dh_secret`, which encrypts its MSG bodies, comes with
  each delivery from the store's record the command at hand already read
  (SUB, ACK, GET, the SEND that triggers a push, the SUBS walk); a push
  deferred to the delivery task keeps it in its `deliveries` entry, and a
  queue's own task (per-queue-task mode) in its frame.
- The invariant: a `Sub` names its subscriber exactly while the registry holds
  it. Only `_attach` and `_detach` (and their notifier twins) change either
  side, so it is kept in this one place whatever the operation: subscribe,
  end a queue, take a service over, forget a connection.
- The in-flight map (`Subscriptions.delivered`) is the gate of delivery: it
  holds a `Sub` only while a message of its queue is in flight, and while it
  holds one, nothing more is pushed for that queue until the ACK (`can_push`,
  `may_push`, `acknowledging`). While a SUB reads the head to answer with it,
  the `Sub` holds `ANSWERING` there (from `answering` to `answered`): a push
  due meanwhile would reach the client as a second copy of the head, or ahead
  of the SUB's OK, so it is remembered instead and made once the SUB has
  answered, if the answer carried no MSG. An idle subscription has no entry,
  and a `Sub` let go (`_let_go`, a GET-mode `Sub` dropped) loses its entry at
  once, so the map holds only queues with a message in flight.
- A service subscription (SUBS / NSUBS, services.py) is held by one
  subscriber per service and side: one entry, nothing per queue. It records
  only the `Sub`s of its queues with a message on its way
  (`subscribe_for_service`, let go by `settle`), which a takeover ends with
  one ENDS.
- `PendingEvents` collects END/DELD per subscriber and one router task
  flushes them every `end_batch_interval`, so that a burst of takeovers (a
  client reconnecting with thousands of queues) costs the old connection a few
  blocks, not thousands of separate writes. The flush never waits on a
  client: it hands the batch over with `send_nowait`, and if that client's
  send channel is full the batch goes to the client's own delivery task
  (`Connection.push_events`), which is the only one to wait for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

import trio

from router.protocol.codec import encode_response_transmission
from router.protocol.types import DELD, END, ENDS, NO_IDS_HASH
from store.interfaces import Message, Party, StoreError

from .pending_pushes import NO_DELIVERIES, Deliveries

if TYPE_CHECKING:
    from .connection import Connection
    from .counters import Counters

_END, _DELD = END(), DELD()

# A `Sub`'s in-flight entry while a SUB of the queue's own connection reads the head
# to answer with it: `can_push` is false, so the SUB is the only one to deliver it.
ANSWERING = (b"", -1)


@dataclass(slots=True, eq=False)
class Sub:
    """One queue on one connection.

    Two fields: with the collector's header that is one 48-byte block
    (bench/RESULTS.md, "Where the memory goes"). What is in flight is kept
    apart (`Subscriptions.delivered`), since an idle one has nothing there,
    and the queue's key comes with each delivery (theory of operation above).
    The router-wide map holds it by its recipient id, and `client` names its
    holder there, so a subscription costs this block and one entry of that
    map; its connection keeps only the id (`ClientSubscriptions`). `client`
    is None once nobody holds it any more (displaced, ended, connection
    closed), and for the GET-mode `GetSub`, which is not in the router-wide
    map.
    """

    recipient_id: bytes
    client: ClientSubscriptions | None = None
    get_mode: ClassVar[bool] = False  # GET was used here: SUB is prohibited, nothing is pushed
    wake: ClassVar[trio.Event | None] = None  # per-queue-task mode only (QueueTaskSub)
    scope: ClassVar[trio.CancelScope | None] = None


@dataclass(slots=True, eq=False)
class GetSub(Sub):
    """A queue GET was used on: kept by its connection only, never pushed to."""

    get_mode: ClassVar[bool] = True


@dataclass(slots=True, eq=False)
class QueueTaskSub(Sub):
    """A subscription in per-queue-task mode: the queue's own task waits on `wake`
    and runs in `scope` (and keeps the queue's key in its frame)."""

    wake: trio.Event | None = None  # type: ignore[misc]
    scope: trio.CancelScope | None = None  # type: ignore[misc]


@dataclass(slots=True)
class CatchUp:
    """The walk of one SUBS over its service's queues, done by the delivery task.

    It reads the store by pages in recipient id order (`QueueStore.service_queue_page`)
    and holds one page at a time: `after` is the last id of the pages read, `page`
    the ids of the current one not walked yet."""

    service_id: bytes
    after: bytes | None = None
    page: list[bytes] = field(default_factory=list)
    last_page: bool = False  # the store has nothing past `page`
    delivered: int = 0  # messages this walk pushed

    @property
    def done(self) -> bool:
        return self.last_page and not self.page


class ClientSubscriptions:
    """One connection's subscriptions.

    What it holds changes only through `Subscriptions`. Its queues are found
    through the router-wide map (recipient id -> `Sub`, whose `client` is the
    holder): the connection keeps just the ids it subscribed (`_held`, a list
    that may also name queues it no longer holds; `queue` and `queues` skip
    those, and it is compacted as it grows), and its GET-mode queues in a map
    of their own. `deliveries` gets an entry from delivery.py for a queue
    `can_push` allows, and loses it when the queue goes; the delivery task
    works through it, and the SUBS walk (services.py) through `catch_up`.
    An idle connection that never subscribed holds none of these
    collections: each is made on first use.
    """

    __slots__ = ("conn", "_registry", "_held", "_held_count", "_get_subs", "_notifiers",
                 "deliveries", "catch_up", "next_catch_up", "in_block")

    def __init__(self, conn: Connection, registry: dict[bytes, Sub] | None = None) -> None:
        self.conn = conn
        self.in_block = False  # a block of its commands is being answered (PendingEvents)
        # The router-wide map recipient id -> Sub (`Subscriptions`), shared.
        self._registry: dict[bytes, Sub] = {} if registry is None else registry
        self._held: list[bytes] | None = None  # ids it subscribed, maybe no longer held
        self._held_count = 0  # how many of them it holds (the map names it)
        self._get_subs: dict[bytes, Sub] | None = None  # GET-mode queues here
        self._notifiers: set[bytes] | None = None  # notifier ids this connection NSUBed
        self.deliveries = NO_DELIVERIES  # its own once a queue waits (`waiting`)
        self.catch_up: CatchUp | None = None  # a SUBS walk the delivery task is doing
        self.next_catch_up: CatchUp | None = None  # set by SUBS, started after its answer

    def __repr__(self) -> str:
        return f"<Subscriber {self.conn!r} {len(self.queues)} queues>"

    @property
    def queues(self) -> HeldQueues:
        """Its queues, SUB and GET mode: recipient id -> `Sub` (read-only)."""
        return HeldQueues(self)

    @property
    def notifiers(self) -> set[bytes] | frozenset[bytes]:
        """The notifier ids it holds (read-only)."""
        return _NONE if self._notifiers is None else self._notifiers

    def queue(self, recipient_id: bytes) -> Sub | None:
        """Its `Sub` of the queue (SUB or GET mode), None if it holds none."""
        sub = self._registry.get(recipient_id)
        if sub is not None and sub.client is self:
            return sub
        get_subs = self._get_subs
        return None if get_subs is None else get_subs.get(recipient_id)

    def held_ids(self) -> list[bytes]:
        """The ids of the queues it holds by SUB (not GET), each once."""
        registry = self._registry
        return [rid for rid in dict.fromkeys(self._held or ())
                if (sub := registry.get(rid)) is not None and sub.client is self]

    def is_subscribed(self, entity_id: bytes, notifier: bool) -> bool:
        if notifier:
            return entity_id in self.notifiers
        sub = self._registry.get(entity_id)
        return sub is not None and sub.client is self

    def waiting(self) -> Deliveries:
        """Its map of queues with a message waiting, made on first use."""
        if self.deliveries is NO_DELIVERIES:
            self.deliveries = Deliveries()
        return self.deliveries

    def start_catch_up(self) -> None:
        """Called once a block's answers are in the outbox: a SUBS among them may
        now start its walk, whose messages thus follow its SOKS."""
        if self.next_catch_up is not None:
            self.catch_up, self.next_catch_up = self.next_catch_up, None
            self.conn.wake_delivery()

    # --- changed by `Subscriptions` only ----------------------------------------------

    def _hold(self, recipient_id: bytes) -> None:
        """The map now names this connection for the queue: keep its id."""
        held = self._held
        if held is None:
            held = self._held = []
        elif len(held) >= 2 * self._held_count + 16:
            # Ids of queues it no longer holds: at most as many as it holds, plus a few.
            held = self._held = self.held_ids()
        held.append(recipient_id)
        self._held_count += 1

    def _release(self) -> None:
        """One of the queues it held is gone (its id stays in `_held` until compacted)."""
        self._held_count -= 1
        if not self._held_count:
            self._held = None

    def _add_get_sub(self, sub: Sub) -> None:
        if self._get_subs is None:
            self._get_subs = {}
        self._get_subs[sub.recipient_id] = sub

    def _pop_get_sub(self, recipient_id: bytes) -> Sub | None:
        get_subs = self._get_subs
        if get_subs is None:
            return None
        sub = get_subs.pop(recipient_id, None)
        if not get_subs:
            self._get_subs = None
        return sub

    def _add_notifier(self, notifier_id: bytes) -> None:
        if self._notifiers is None:
            self._notifiers = set()
        self._notifiers.add(notifier_id)

    def _discard_notifier(self, notifier_id: bytes) -> None:
        notifiers = self._notifiers
        if notifiers is not None:
            notifiers.discard(notifier_id)
            if not notifiers:
                self._notifiers = None


_NONE: frozenset[bytes] = frozenset()


class HeldQueues(Mapping[bytes, Sub]):
    """A connection's queues as a read-only map, made on demand (`ClientSubscriptions.queues`)."""

    __slots__ = ("_client",)

    def __init__(self, client: ClientSubscriptions) -> None:
        self._client = client

    def get(self, recipient_id: bytes, default: Sub | None = None) -> Sub | None:  # type: ignore[override]
        sub = self._client.queue(recipient_id)
        return default if sub is None else sub

    def __getitem__(self, recipient_id: bytes) -> Sub:
        sub = self._client.queue(recipient_id)
        if sub is None:
            raise KeyError(recipient_id)
        return sub

    def __contains__(self, recipient_id: object) -> bool:
        return isinstance(recipient_id, bytes) and self._client.queue(recipient_id) is not None

    def __len__(self) -> int:
        client = self._client
        return client._held_count + len(client._get_subs or ())

    def __iter__(self) -> Iterator[bytes]:
        client = self._client
        return iter([*client.held_ids(), *(client._get_subs or ())])


class SubscriberRegistry:
    """Entity id -> the subscriber holding it, router-wide."""

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        self._subscribers: dict[bytes, ClientSubscriptions] = {}

    def __len__(self) -> int:
        return len(self._subscribers)

    def get(self, entity_id: bytes) -> ClientSubscriptions | None:
        return self._subscribers.get(entity_id)

    def subscribe(
        self, entity_id: bytes, client: ClientSubscriptions
    ) -> ClientSubscriptions | None:
        """Make `client` the holder; returns the other one it displaced, if any."""
        previous = self._subscribers.get(entity_id)
        self._subscribers[entity_id] = client
        return previous if previous is not client else None

    def unsubscribe(self, entity_id: bytes, client: ClientSubscriptions) -> bool:
        """Remove the entry only if it is still `client`'s (a newer one keeps it)."""
        if self._subscribers.get(entity_id) is not client:
            return False
        del self._subscribers[entity_id]
        return True

    def remove(self, entity_id: bytes) -> ClientSubscriptions | None:
        return self._subscribers.pop(entity_id, None)


@dataclass(slots=True, eq=False)
class ServiceSubscription:
    """One subscriber's service subscription on one side.

    On the recipient side it holds the `Sub`s of its queues with a message on
    its way to the holder, made by a SEND or the SUBS walk and let go once the
    queue is idle; nothing per notifier on the notifier side. A takeover ends
    these with one ENDS; anything the connection subscribed with plain
    SUB / NSUB stays an individual subscription, which gets its own END
    when it is taken.
    """

    client: ClientSubscriptions
    count: int  # the n of its SOKS
    ids_hash: bytes = NO_IDS_HASH  # the ids hash of its SOKS (v19)
    subs: set[Sub] = field(default_factory=set)  # recipient side, a message on its way


class _ServiceRegistry:
    """Service id -> its one service subscription, for one side."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[bytes, ServiceSubscription] = {}

    def take_over(
        self, service_id: bytes, client: ClientSubscriptions, count: int, ids_hash: bytes
    ) -> ServiceSubscription | None:
        """Make `client` the holder; the other one's subscription it replaces."""
        previous = self._held.get(service_id)
        if previous is not None and previous.client is client:
            # SUBS again: what the first one holds stays held
            previous.count, previous.ids_hash = count, ids_hash
            return None
        self._held[service_id] = ServiceSubscription(client, count, ids_hash)
        return previous

    def holder(self, service_id: bytes) -> ServiceSubscription | None:
        return self._held.get(service_id)

    def all(self) -> Iterator[ServiceSubscription]:
        return iter(self._held.values())

    def held_by(self, service_id: bytes, client: ClientSubscriptions) -> ServiceSubscription | None:
        held = self._held.get(service_id)
        return held if held is not None and held.client is client else None

    def forget(self, client: ClientSubscriptions) -> None:
        service_id = client.conn.service_id
        if service_id is not None and self.held_by(service_id, client) is not None:
            del self._held[service_id]


class Event(Enum):
    END = "end"  # displaced from a queue
    DELETED = "deleted"  # the queue (or its notifier) was deleted: DELD at v10+
    NTF_END = "ntf-end"  # displaced from a notifier subscription


class Subscriptions:
    """Every subscription of the router, and the operations that change them."""

    __slots__ = (
        "_counters", "_queues", "_notifiers", "_subscribers", "_services", "_in_flight",
        "_acking", "_missed", "events", "on_subscribed", "sub_type",
    )

    def __init__(self, counters: Counters, end_batch_interval: float) -> None:
        self._counters = counters
        # recipient id -> the `Sub` of its one holder (`Sub.client`), GET mode never
        self._queues: dict[bytes, Sub] = {}
        self._notifiers = SubscriberRegistry()  # notifier id -> subscriber
        self._subscribers: dict[Connection, ClientSubscriptions] = {}
        self._services = {Party.RECIPIENT: _ServiceRegistry(), Party.NOTIFIER: _ServiceRegistry()}
        # Sub -> (msg id, ts) in flight awaiting its ACK, or ANSWERING; only while
        # its holder holds it (`_let_go`), so an idle subscription has no entry.
        self._in_flight: dict[Sub, tuple[bytes, int]] = {}
        # Sub -> id of the message its ACK is deleting; at most one per connection,
        # since a connection runs its commands one at a time.
        self._acking: dict[Sub, bytes] = {}
        # Sub -> time of the first write that found it `ANSWERING`: a push is due
        # once the SUB has answered (`answered`).
        self._missed: dict[Sub, int] = {}
        self.events = PendingEvents(end_batch_interval)
        # per-queue-task mode gives each new subscription its task (delivery.py),
        # which keeps the queue's key
        self.on_subscribed: Callable[[ClientSubscriptions, Sub, bytes], None] | None = None
        self.sub_type: type[Sub] = Sub  # QueueTaskSub in per-queue-task mode

    # --- looking up -------------------------------------------------------------------

    def __len__(self) -> int:
        """Queues subscribed now, router-wide."""
        return len(self._queues)

    def subscriber_of(self, recipient_id: bytes) -> ClientSubscriptions | None:
        sub = self._queues.get(recipient_id)
        return None if sub is None else sub.client

    def notifier_connection(self, notifier_id: bytes) -> Connection | None:
        client = self._notifiers.get(notifier_id)
        return None if client is None else client.conn

    def notifier_service_connection(self, service_id: bytes) -> Connection | None:
        """The connection holding the notifier service's NSUBS, if any."""
        held = self._services[Party.NOTIFIER].holder(service_id)
        return None if held is None else held.client.conn

    def subscriber_for(self, conn: Connection) -> ClientSubscriptions | None:
        return self._subscribers.get(conn)

    def pending_deliveries(self) -> int:
        return sum(len(s.deliveries) for s in self._subscribers.values())

    def delivered(self, sub: Sub) -> tuple[bytes, int] | None:
        """The (msg id, ts) in flight to `sub`'s holder, awaiting its ACK (or
        `ANSWERING`); None when nothing is."""
        return self._in_flight.get(sub)

    def awaits_ack(self, client: ClientSubscriptions, recipient_id: bytes, msg_id: bytes) -> bool:
        """`msg_id` is the message pushed to `client` on that queue and not acknowledged
        yet (an ACK of it answers the router's own push: turns.py)."""
        sub = client.queue(recipient_id)
        delivered = None if sub is None else self._in_flight.get(sub)
        return delivered is not None and delivered is not ANSWERING and delivered[0] == msg_id

    def in_flight_count(self) -> int:
        """Queues with a message in flight, router-wide (GET mode included)."""
        return len(self._in_flight)

    def service_held(self, client: ClientSubscriptions, party: Party) -> ServiceSubscription | None:
        """`client`'s service subscription on `party`'s side, if it still holds it."""
        service_id = client.conn.service_id
        if service_id is None:
            return None
        return self._services[party].held_by(service_id, client)

    def service_holder(self, service_id: bytes, recipient_id: bytes) -> ClientSubscriptions | None:
        """The connection a SEND to a queue associated with `service_id` (and held by
        nobody) is pushed to: the service's holder, once its SUBS has answered (its walk
        started) and unless it used GET on the queue (docs/protocol.md#service-subscriptions)."""
        held = self._services[Party.RECIPIENT].holder(service_id)
        if held is None:
            return None
        client = held.client
        if client.next_catch_up is not None or recipient_id in (client._get_subs or ()):
            return None
        return client

    def subscribe_for_service(
        self, client: ClientSubscriptions, recipient_id: bytes, box_key: bytes
    ) -> Sub:
        """A `Sub` of an associated queue for the service's holder, made only while a
        message of the queue is on its way (`settle` lets it go); an individual holder
        elsewhere is displaced with END, as by SUB."""
        held = self.service_held(client, Party.RECIPIENT)
        assert held is not None  # called for the holder only
        sub = self.subscribe(client, recipient_id, box_key)
        held.subs.add(sub)
        return sub

    def adopt_for_service(self, client: ClientSubscriptions, sub: Sub) -> None:
        """The holder's own SUB of one of the service's queues, reached by its walk,
        becomes the service subscription's: covered by ENDS, let go when idle."""
        held = self.service_held(client, Party.RECIPIENT)
        if held is not None and sub.client is client:
            held.subs.add(sub)

    def settle(self, client: ClientSubscriptions, sub: Sub) -> None:
        """A service's `Sub` with nothing in flight and nothing waiting goes: the
        service subscription keeps no state per queue while its queues are idle."""
        if (
            sub.client is not client
            or sub in self._in_flight
            or sub in self._acking
            or sub.recipient_id in client.deliveries
        ):
            return
        held = self.service_held(client, Party.RECIPIENT)
        if held is None or sub not in held.subs:
            return  # an individual subscription: it stays
        held.subs.discard(sub)
        self._detach(client, sub.recipient_id)

    def notifiers_subscribed(self) -> int:
        """Notifier ids subscribed one by one (NSUB), router-wide."""
        return len(self._notifiers)

    def service_subs_count(self) -> int:
        """`Sub`s service subscriptions hold now, router-wide (queues with a message on
        its way to a service's holder)."""
        return sum(len(held.subs) for held in self._services[Party.RECIPIENT].all())

    def queue_state(self, client: ClientSubscriptions, sub: Sub | None) -> str:
        """The `qSubThread` of a QUE answer."""
        if sub is None:
            return "noSub"
        if sub.get_mode:
            return "prohibitSub"
        if sub.recipient_id in client.deliveries:
            return "subPending"
        return "subThread" if sub.scope is not None else "noSub"

    # --- connections ------------------------------------------------------------------

    def open(self, conn: Connection) -> ClientSubscriptions:
        client = self._subscribers[conn] = ClientSubscriptions(conn, self._queues)
        return client

    def forget(self, client: ClientSubscriptions) -> None:
        """The connection closed: registry entries go where it is still the holder."""
        for rid in [*client.held_ids(), *(client._get_subs or ())]:
            self._detach(client, rid)
        for nid in list(client.notifiers):
            self._detach_notifier(client, nid)
        client.deliveries.clear()
        client.catch_up = client.next_catch_up = None
        self.events.forget(client)
        for registry in self._services.values():
            registry.forget(client)
        self._subscribers.pop(client.conn, None)

    # --- queues -----------------------------------------------------------------------

    def subscribe(self, client: ClientSubscriptions, recipient_id: bytes, box_key: bytes) -> Sub:
        """Make `client` the queue's one holder; the one it displaces gets END.

        `box_key` (the queue's rcv_dh_secret) goes only to a per-queue task
        (`on_subscribed`): the `Sub` does not keep it."""
        sub = self.sub_type(recipient_id, client)
        previous = self._attach(client, sub)
        if previous is not None:
            self.events.add(previous, recipient_id, Event.END)
            self._counters.subscriptions_displaced += 1
        if self.on_subscribed is not None:
            self.on_subscribed(client, sub, box_key)
        return sub

    def subscribe_for_get(self, client: ClientSubscriptions, recipient_id: bytes) -> Sub | None:
        """The queue's GET-mode `Sub` here (made on first use); None if SUB holds it."""
        sub = client.queue(recipient_id)
        if sub is None:
            # GET mode: not registered router-wide, never pushed to, SUB prohibited here.
            sub = GetSub(recipient_id)
            client._add_get_sub(sub)
        return sub if sub.get_mode else None

    def send_again(self, client: ClientSubscriptions, sub: Sub) -> None:
        """SUB again on the same connection: the head goes out again (reference behaviour).
        A service's `Sub` becomes an individual subscription (it no longer goes when idle)."""
        held = self.service_held(client, Party.RECIPIENT)
        if held is not None:
            held.subs.discard(sub)
        self._in_flight.pop(sub, None)
        client.deliveries.discard(sub.recipient_id)

    def end_queue(
        self, recipient_id: bytes, event: Event, by: ClientSubscriptions | None = None
    ) -> None:
        """Nobody holds the queue any more; its holder other than `by` gets `event`."""
        if by is not None:
            self._detach(by, recipient_id)
        held = self._queues.get(recipient_id)
        if held is not None:
            holder = held.client
            assert holder is not None  # the map holds only held `Sub`s
            self._detach(holder, recipient_id)
            self.events.add(holder, recipient_id, event)

    def _attach(self, client: ClientSubscriptions, sub: Sub) -> ClientSubscriptions | None:
        """Make `sub` (of `client`) the queue's one; returns the other holder it displaced."""
        rid = sub.recipient_id
        client._hold(rid)
        previous = self._queues.get(rid)
        self._queues[rid] = sub
        if previous is None:
            return None
        holder = previous.client
        assert holder is not None
        self._let_go(holder, previous)
        if holder is client:
            return None  # subscribed again here: the new `Sub` stands for the old one
        holder.deliveries.discard(rid)
        return holder

    def _detach(self, client: ClientSubscriptions, recipient_id: bytes) -> Sub | None:
        """Forget the queue there: no more deliveries, its own task (if any) ends."""
        client.deliveries.discard(recipient_id)
        sub = self._queues.get(recipient_id)
        if sub is not None and sub.client is client:
            del self._queues[recipient_id]
            self._let_go(client, sub)
            return sub
        sub = client._pop_get_sub(recipient_id)
        if sub is not None:
            self._in_flight.pop(sub, None)
        return sub

    def _let_go(self, client: ClientSubscriptions, sub: Sub) -> None:
        """`sub` is no longer `client`'s (the map no longer holds it)."""
        sub.client = None
        self._in_flight.pop(sub, None)
        client._release()
        if client.conn.service_id is not None:
            held = self.service_held(client, Party.RECIPIENT)
            if held is not None:
                held.subs.discard(sub)
        if sub.scope is not None:
            sub.scope.cancel()

    # --- the delivery gate --------------------------------------------------------------

    def can_push(self, client: ClientSubscriptions, sub: Sub | None) -> bool:
        """The queue is still `client`'s, subscribed (not GET), and nothing is in flight."""
        return (
            sub is not None
            and not sub.get_mode
            and sub not in self._in_flight
            and sub.client is client
            and self._queues.get(sub.recipient_id) is sub
        )

    def may_push(self, client: ClientSubscriptions, sub: Sub | None, head: Message) -> bool:
        """`can_push`, and `head` is not the message an ACK of this queue is deleting."""
        return self.can_push(client, sub) and self._acking.get(sub) != head.msg_id  # type: ignore[arg-type]

    def push_due(self, client: ClientSubscriptions, sub: Sub | None, ts: int) -> bool:
        """`can_push`, for a write of time `ts`; a push a SUB's answer holds back
        is remembered, to be made after the answer (`answered`)."""
        if self.can_push(client, sub):
            return True
        if sub is not None and self._in_flight.get(sub) is ANSWERING:
            self._missed.setdefault(sub, ts)
        return False

    def answering(self, sub: Sub) -> None:
        """A SUB reads the head to answer with it: nothing else pushes to `sub`
        until `answered`."""
        self._in_flight[sub] = ANSWERING

    def answered(self, sub: Sub) -> int | None:
        """The end of `answering`: the time of a write whose push it held back, if any."""
        if self._in_flight.get(sub) is ANSWERING:
            del self._in_flight[sub]
        return self._missed.pop(sub, None)

    def in_flight(self, sub: Sub, msg: Message) -> None:
        """`msg` is being written to the subscriber: nothing more until its ACK.

        Called only for a `Sub` its connection holds (after `can_push`, or GET's
        check), so that `_let_go` / `_detach` take the entry away with it."""
        self._in_flight[sub] = (msg.msg_id, msg.ts)

    @contextmanager
    def acknowledging(self, client: ClientSubscriptions, sub: Sub) -> Iterator[bytes]:
        """An ACK deletes the message in flight (its id is yielded).

        The in-flight entry goes first, so that a write committed meanwhile finds
        the subscriber idle; until the delete returns, the message is never
        pushed again. A delete the store refused leaves it in flight (if the
        connection still holds the queue), so the client may ACK it again.
        """
        delivered = self._in_flight.pop(sub)
        self._acking[sub] = delivered[0]
        try:
            yield delivered[0]
        except StoreError:
            if sub not in self._in_flight and client.queue(sub.recipient_id) is sub:
                self._in_flight[sub] = delivered
            raise
        finally:
            del self._acking[sub]

    # --- notifiers ----------------------------------------------------------------------

    def subscribe_notifier(self, client: ClientSubscriptions, notifier_id: bytes) -> None:
        previous = self._attach_notifier(client, notifier_id)
        if previous is not None:
            self._detach_notifier(previous, notifier_id)
            self.events.add(previous, notifier_id, Event.NTF_END)

    def end_notifier(self, notifier_id: bytes, event: Event) -> None:
        holder = self._notifiers.remove(notifier_id)
        if holder is not None:
            self._detach_notifier(holder, notifier_id)
            self.events.add(holder, notifier_id, event)

    def _attach_notifier(
        self, client: ClientSubscriptions, notifier_id: bytes
    ) -> ClientSubscriptions | None:
        client._add_notifier(notifier_id)
        return self._notifiers.subscribe(notifier_id, client)

    def _detach_notifier(self, client: ClientSubscriptions, notifier_id: bytes) -> None:
        client._discard_notifier(notifier_id)
        self._notifiers.unsubscribe(notifier_id, client)

    # --- services (docs/protocol.md#services) -----------------------------------------

    def take_over_service(
        self, client: ClientSubscriptions, party: Party, count: int,
        ids_hash: bytes = NO_IDS_HASH,
    ) -> ServiceSubscription:
        """Make `client` its service's holder on `party`'s side; the previous
        holder loses what its service subscription held and gets ENDS."""
        service_id = client.conn.service_id
        assert service_id is not None  # the dispatcher lets SUBS / NSUBS through only then
        registry = self._services[party]
        previous = registry.take_over(service_id, client, count, ids_hash)
        if previous is not None:
            self._end_service(previous, party)
        if party is Party.NOTIFIER:
            # Its own NSUBs so far (each service-signed: of the service's notifiers) are
            # the service subscription's now, whose NMSGs come by the service id
            # (notifications.py): their entries go, and a takeover ends them with ENDS.
            for nid in list(client.notifiers):
                self._detach_notifier(client, nid)
        held = registry.held_by(service_id, client)
        assert held is not None  # just taken over
        return held

    def _end_service(self, previous: ServiceSubscription, party: Party) -> None:
        """Queues the connection subscribed with plain SUB (NSUB) stay its own until
        the new walk takes them, which sends their END."""
        client = previous.client
        if party is Party.RECIPIENT:
            client.catch_up = client.next_catch_up = None
        else:
            # Its NSUBs since its NSUBS (each service-signed, so of the service's
            # notifiers) are the new holder's now: each gets its END. Bounded by what the
            # connection subscribed one by one, not by the service's count.
            for nid in list(client.notifiers):
                self._detach_notifier(client, nid)
                self.events.add(client, nid, Event.NTF_END)
        for sub in list(previous.subs):  # only queues with a message on its way
            if client.queue(sub.recipient_id) is sub:
                self._detach(client, sub.recipient_id)
        service_id = client.conn.service_id
        assert service_id is not None
        ends = ENDS(previous.count, previous.ids_hash)
        client.conn.push_events(
            [encode_response_transmission(b"", service_id, ends, client.conn.version)]
        )


class PendingEvents:
    """END / DELD waiting to be sent, grouped by subscriber, flushed by one task.

    A subscriber whose block of commands is being answered gets its events only
    after that block's answers (`release`): a block's answers leave together once
    the block is done, and an END pushed meanwhile would reach the client ahead of
    the OK of a SUB that came before it, which would then read as the last word on
    that queue.
    """

    __slots__ = ("_interval", "_pending", "_ready")

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._pending: dict[ClientSubscriptions, list[tuple[bytes, Event]]] = {}
        self._ready = trio.Event()

    def __len__(self) -> int:
        return sum(len(events) for events in self._pending.values())

    def add(self, client: ClientSubscriptions, entity_id: bytes, event: Event) -> None:
        self._pending.setdefault(client, []).append((entity_id, event))
        self._ready.set()

    def forget(self, client: ClientSubscriptions) -> None:
        self._pending.pop(client, None)

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            await trio.sleep(self._interval)
            self.flush()

    def flush(self) -> None:
        self._ready = trio.Event()
        pending, self._pending = self._pending, {}
        for client, events in pending.items():
            if client.in_block:
                self._pending[client] = events  # sent by `release`
            else:
                _push_events(client, events)

    def release(self, client: ClientSubscriptions) -> None:
        """The subscriber's block is answered: its events held meanwhile go now."""
        events = self._pending.pop(client, None)
        if events is not None:
            _push_events(client, events)


def _push_events(client: ClientSubscriptions, events: list[tuple[bytes, Event]]) -> None:
    conn = client.conn
    transmissions = encode_events(conn.version, events, client.is_subscribed)
    if transmissions and not conn.closed:
        conn.push_events(transmissions)


def encode_events(
    version: int,
    events: list[tuple[bytes, Event]],
    is_subscribed: Callable[[bytes, bool], bool],
) -> list[bytes]:
    """The pushes for `events`, skipping an END whose queue the client took back meanwhile."""
    out = []
    for entity_id, event in events:
        if event is Event.DELETED:
            resp = _DELD  # END before v10: the codec chooses (docs/protocol.md#end-and-deld)
        elif is_subscribed(entity_id, event is Event.NTF_END):
            continue
        else:
            resp = _END
        out.append(encode_response_transmission(b"", entity_id, resp, version))
    return out
