"""`Subscriptions` keeps its invariant whatever the order of operations.

A subscriber holds a queue's (non-GET) `Sub` exactly when the registry names it
for that queue; the same for notifier ids; a deliveries entry only for a queue
it holds; an in-flight entry only for a `Sub` a live connection holds; and a
forgotten connection is named nowhere. Checked after every
step of random sequences of every operation, on connections without a socket.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from memory_connections import connection as memory_connection

from router.protocol.codec import decode_response
from router.protocol.transmission import decode_transmission
from router.protocol.types import ENDS
from router.server.core.connection import Connection
from router.server.core.counters import Counters
from router.server.core.subscriptions import ClientSubscriptions, Event, Subscriptions
from router.server.edge.handshake import ServiceSession
from store.interfaces import Message, Party

QUEUES = [bytes([q]) * 24 for q in range(4)]
NOTIFIERS = [bytes([0x80 + n]) * 24 for n in range(3)]
CONNECTIONS = 3
# connections 0 and 1 act for it, as the edge hands the core a proven service
SERVICE = ServiceSession(b"s" * 24, b"M", b"c" * 32, b"session key")


def connection(conn_id: int) -> Connection:
    return memory_connection(conn_id, 4, service=SERVICE if conn_id < 2 else None)


class Model:
    """The subscriptions of a few connections, some closed and reopened."""

    def __init__(self) -> None:
        self.counters = Counters()
        self.subs = Subscriptions(self.counters, end_batch_interval=0.01)
        self.open: list[ClientSubscriptions | None] = [None] * CONNECTIONS
        self.forgotten: list[ClientSubscriptions] = []

    def subscriber(self, i: int) -> ClientSubscriptions:
        s = self.open[i]
        if s is None:
            s = self.open[i] = self.subs.open(connection(i))
        return s

    def apply(self, op: str, i: int, q: int, n: int) -> None:
        s, rid, nid = self.subscriber(i), QUEUES[q], NOTIFIERS[n]
        if op == "sub":
            sub = s.queues.get(rid)
            if sub is None:
                self.subs.subscribe(s, rid, b"k")
            elif not sub.get_mode:
                self.subs.send_again(s, sub)
        elif op == "get":
            sub = self.subs.subscribe_for_get(s, rid)
            if sub is not None:  # GET answers with the head
                self.subs.in_flight(sub, Message(b"g" * 24, 1, b"F", b""))
        elif op == "ack":
            sub = s.queues.get(rid)
            if sub is not None and self.subs.delivered(sub) is not None:
                with self.subs.acknowledging(s, sub):
                    pass
        elif op == "delete":
            self.subs.end_queue(rid, Event.DELETED, by=s)
        elif op == "block":
            self.subs.end_queue(rid, Event.END)
        elif op == "defer":
            sub = s.queues.get(rid)
            if self.subs.can_push(s, sub):
                s.waiting().add(rid, 1, b"k")
        elif op == "deliver":
            sub = s.queues.get(rid)
            if self.subs.may_push(s, sub, Message(b"m" * 24, 1, b"F", b"")):
                assert sub is not None
                self.subs.in_flight(sub, Message(b"m" * 24, 1, b"F", b""))
        elif op == "nsub":
            self.subs.subscribe_notifier(s, nid)
        elif op == "ndel":
            self.subs.end_notifier(nid, Event.DELETED)
        elif op == "subs" and s.conn.service_id is not None:
            self.subs.take_over_service(s, Party.RECIPIENT, len(QUEUES))
        elif op == "service-send" and s.conn.service_id is not None:
            # a SEND to a queue associated with the service, held by nobody
            holder = self.subs.service_holder(s.conn.service_id, rid)
            if holder is not None and self.subs.subscriber_of(rid) is None:
                sub = self.subs.subscribe_for_service(holder, rid, b"k")
                if n % 2:
                    self.subs.in_flight(sub, Message(b"m" * 24, 1, b"F", b""))
                else:
                    holder.waiting().add(rid, 1, b"k")
        elif op == "settle":
            sub = s.queues.get(rid)
            if sub is not None:
                self.subs.settle(s, sub)
        elif op == "nsubs" and s.conn.service_id is not None:
            self.subs.take_over_service(s, Party.NOTIFIER, len(NOTIFIERS))
        elif op == "close":
            self.subs.forget(s)
            self.forgotten.append(s)
            self.open[i] = None

    def check(self) -> None:
        live = [s for s in self.open if s is not None]
        for s in live:
            for rid, sub in s.queues.items():
                assert sub.get_mode or self.subs.subscriber_of(rid) is s
            for nid in s.notifiers:
                assert self.subs.notifier_connection(nid) is s.conn
            for rid in QUEUES:
                if rid in s.deliveries:
                    assert s.is_subscribed(rid, notifier=False)
        for rid in QUEUES:
            holder = self.subs.subscriber_of(rid)
            assert holder is None or (holder in live and holder.is_subscribed(rid, False))
        for nid in NOTIFIERS:
            conn = self.subs.notifier_connection(nid)
            holders = [s for s in live if s.conn is conn]
            assert conn is None or (len(holders) == 1 and nid in holders[0].notifiers)
        assert len(self.subs) == sum(self.subs.subscriber_of(rid) is not None for rid in QUEUES)
        assert self.subs.pending_deliveries() == sum(len(s.deliveries) for s in live)
        in_flight = [sub for s in live for sub in s.queues.values()
                     if self.subs.delivered(sub) is not None]
        assert self.subs.in_flight_count() == len(in_flight)
        # a service's `Sub`s are held by its holder, and only while their queue is busy
        for s in live:
            held = self.subs.service_held(s, Party.RECIPIENT)
            for sub in held.subs if held is not None else ():
                assert sub.client is s and s.queue(sub.recipient_id) is sub
        assert self.subs.service_subs_count() <= len(QUEUES)
        for s in self.forgotten:
            assert not s.queues and not s.notifiers and self.subs.subscriber_for(s.conn) is None


OPS = ["sub", "get", "ack", "delete", "block", "defer", "deliver", "nsub", "ndel", "subs",
       "service-send", "settle", "nsubs", "close"]
STEP = st.tuples(
    st.sampled_from(OPS),
    st.integers(0, CONNECTIONS - 1),
    st.integers(0, len(QUEUES) - 1),
    st.integers(0, len(NOTIFIERS) - 1),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_the_registry_and_the_subscribers_always_agree(steps: list[tuple[str, int, int, int]]):
    model = Model()
    for op, i, q, n in steps:
        model.apply(op, i, q, n)
        model.check()


def test_a_sub_from_another_connection_displaces_the_first_which_gets_end():
    model = Model()
    first, second = model.subscriber(0), model.subscriber(2)
    model.subs.subscribe(first, QUEUES[0], b"k")
    model.subs.subscribe(second, QUEUES[0], b"k")
    assert QUEUES[0] not in first.queues and model.subs.subscriber_of(QUEUES[0]) is second
    assert model.counters.subscriptions_displaced == 1
    assert len(model.subs.events) == 1


def test_a_service_takeover_ends_only_what_the_service_subscription_held():
    model = Model()
    first, second = model.subscriber(0), model.subscriber(1)
    held = model.subs.take_over_service(first, Party.RECIPIENT, 1)
    held.subs.add(model.subs.subscribe(first, QUEUES[0], b"k"))
    model.subs.subscribe(first, QUEUES[1], b"k")  # a plain SUB: stays until taken
    model.subs.take_over_service(second, Party.RECIPIENT, 1)
    assert QUEUES[0] not in first.queues and model.subs.subscriber_of(QUEUES[0]) is None
    assert model.subs.subscriber_of(QUEUES[1]) is first
    assert model.subs.service_held(first, Party.RECIPIENT) is None
    [ends] = first.conn.take_pending()  # pushed at once, not batched
    t = decode_transmission(ends)
    assert t.entity_id == first.conn.service_id and decode_response(t.command) == ENDS(1)


def test_an_idle_connection_holds_no_collection_until_it_subscribes():
    model = Model()
    client = model.subscriber(0)
    assert client._held is None and client._get_subs is None and client._notifiers is None
    assert client.deliveries._order is None and client.deliveries._entries is None
    assert len(client.queues) == 0 and not client.notifiers
    model.subs.subscribe(client, QUEUES[0], b"k")
    model.subs.subscribe_notifier(client, NOTIFIERS[0])
    model.subs.subscribe_for_get(client, QUEUES[1])
    assert list(client.queues) == [QUEUES[0], QUEUES[1]] and client.notifiers == {NOTIFIERS[0]}
    model.subs.forget(client)
    assert client._held is None and client._get_subs is None and client._notifiers is None


def test_a_connection_keeps_few_ids_of_queues_it_lost_however_often_it_loses_them():
    model = Model()
    first, second = model.subscriber(0), model.subscriber(2)
    model.subs.subscribe(first, QUEUES[3], b"k")  # held throughout
    for round_ in range(500):
        rid = QUEUES[round_ % 3]
        model.subs.subscribe(first, rid, b"k")
        model.subs.subscribe(second, rid, b"k")  # displaces the first
        assert first._held is not None and len(first._held) <= 2 * 1 + 16 + 1
    assert list(first.queues) == [QUEUES[3]] and len(first.queues) == 1
    assert sorted(second.queues) == QUEUES[:3]
    model.check()


def test_the_map_holds_one_sub_per_queue_which_names_its_subscriber():
    model = Model()
    first, second = model.subscriber(0), model.subscriber(2)
    old = model.subs.subscribe(first, QUEUES[0], b"k")
    assert old.client is first and first.queues[QUEUES[0]] is old
    new = model.subs.subscribe(second, QUEUES[0], b"k")
    assert old.client is None and new.client is second
    assert first.queues.get(QUEUES[0]) is None and QUEUES[0] not in first.queues
    assert not model.subs.can_push(first, old) and model.subs.can_push(second, new)


def test_the_in_flight_map_holds_only_subs_with_a_message_in_flight():
    model = Model()
    first, second = model.subscriber(0), model.subscriber(2)
    msg = Message(b"m" * 24, 1, b"F", b"")
    old = model.subs.subscribe(first, QUEUES[0], b"k")
    assert model.subs.delivered(old) is None and model.subs.in_flight_count() == 0
    model.subs.in_flight(old, msg)
    assert model.subs.delivered(old) == (msg.msg_id, 1) and not model.subs.can_push(first, old)
    model.subs.subscribe(second, QUEUES[0], b"k")  # displaced: its message goes with it
    assert model.subs.delivered(old) is None and model.subs.in_flight_count() == 0
    get = model.subs.subscribe_for_get(first, QUEUES[1])
    assert get is not None
    model.subs.in_flight(get, msg)
    model.subs.forget(first)
    assert model.subs.in_flight_count() == 0
