"""Pushing messages to subscribers: the fast path, the single delivery task,
and the per-queue tasks of the design it replaces.

Theory of operation. A queue's next message reaches its subscriber by one of
the reference router's three triggers (docs/protocol.md, "Commands and
responses"): with the SUB response, with the ACK response, or when a SEND
lands in an empty queue. The first two are answers to the subscriber's own
command and leave with its responses; the third is a push, and it is the one
this module is about. A service subscription's catch-up (`services.py`) also
runs in the delivery task below and pushes with the same checks.

The invariant the triggers keep: a subscribed queue that holds a message has
one message in flight to its subscriber. "The SEND landed in an empty queue"
is only a proxy for it. A store may take a write in before it makes it
visible (the journal's group commit): an ACK between the two finds the queue
empty and answers OK, and the write is then *not* into an empty queue, so a
trigger on STORED_INTO_EMPTY alone leaves the queue stalled until the next
SUB. So the push trigger is: after every write, once `write_message` has
returned (the store's promise: the message is then visible to
`peek_message`), a subscriber with nothing in flight gets the queue's head.
That holds whatever a store's visibility rules are, and costs a SEND into a
busy queue nothing more than the `can_push` check. Making writes visible
before their commit instead would push messages that are not durable yet,
whose sender may still be told the write failed.

single-task (default): when the write was into an empty queue, the message is
the head, and the SEND's own task makes the MSG and leaves it in the
subscriber's pending list (`Connection.push_nowait`) when the subscriber is
idle (nothing in flight) and the list has room; the subscriber's delivery
task (or the task writing to it at that moment) writes it. Otherwise (list
full, or an idle subscriber of a queue that already held messages) the queue
goes into the subscriber's `deliveries` map and the subscriber's one delivery
task pushes its head later, oldest message first, blocking only itself. A
client with 10,000 subscriptions therefore costs at most two tasks (its
receive loop and, while it has work, its delivery task), not 10,000.

per-queue-task: every subscribed queue has a task of its own that waits on
the queue's `trio.Event`; a SEND that finds the subscriber idle sets the
event and that task pushes the head. Kept so the benchmarks compare both
designs in the same code.

Before any push the state is re-checked after every await (the queue is
still this client's, still subscribed, nothing in flight), and `delivered` is
set before the write, so no trigger can deliver a message twice. An ACK
clears `delivered` before its delete reaches the store, so that a write
committed meanwhile finds the subscriber idle; until the delete returns, the
message it acknowledges is never pushed again (`Subscriptions.acknowledging`),
since a store that orders the delete after a concurrent peek would still
show it. Those checks belong to `Subscriptions` (subscriptions.py); this
module only writes the messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import trio

from router.protocol.codec import encode_response_transmission
from router.protocol.crypto import encrypt_msg_body
from router.protocol.types import MSG
from store.interfaces import Message, MessageStore

from .subscriptions import ClientSubscriptions, QueueTaskSub, Sub, Subscriptions

# MSGs the delivery task writes at once. Each is a block of its own on the wire;
# a connection's pending list holds `send_queue_size` batches, so this also
# bounds what a reader that stopped reading can have waiting (64 x 4 x 16 KB = 4 MB).
DELIVERY_BATCH = 4

if TYPE_CHECKING:
    from .counters import Counters
    from .latency import Latencies


class CatchUpWalker(Protocol):
    """Walks a subscriber's service catch-up (services.py) in its delivery task."""

    async def catch_up_step(self, client: ClientSubscriptions) -> None: ...


class Deliverer:
    __slots__ = ("_subscriptions", "_messages", "_counters", "_latencies", "per_queue_task")

    def __init__(
        self,
        subscriptions: Subscriptions,
        messages: MessageStore,
        counters: Counters,
        latencies: Latencies,
        *,
        per_queue_task: bool,
    ) -> None:
        self._subscriptions = subscriptions
        self._messages = messages
        self._counters = counters
        self._latencies = latencies
        self.per_queue_task = per_queue_task
        if per_queue_task:
            subscriptions.on_subscribed = self._start_queue_task
            subscriptions.sub_type = QueueTaskSub

    def message_transmission(
        self, corr_id: bytes, recipient_id: bytes, sub: Sub, msg: Message, box_key: bytes
    ) -> bytes:
        """The MSG for `msg`, encrypted with the queue's `box_key` (its rcv_dh_secret,
        docs/protocol.md#encryption); marks it as in flight."""
        enc = encrypt_msg_body(box_key, msg.msg_id, msg.ts, msg.flags, msg.body, msg.quota)
        self._subscriptions.in_flight(sub, msg)
        self._counters.messages_delivered += 1
        self._latencies.delivered(msg.msg_id)
        return encode_response_transmission(corr_id, recipient_id, MSG(msg.msg_id, enc))

    def _start_queue_task(self, client: ClientSubscriptions, sub: Sub, box_key: bytes) -> None:
        """Per-queue-task mode: each new subscription gets its own task."""
        sub.wake = trio.Event()
        sub.scope = trio.CancelScope()
        client.conn.spawn(self._queue_task, client, sub, box_key)

    def stored(self, recipient_id: bytes, msg: Message, box_key: bytes, *,
               into_empty: bool, service_id: bytes | None = None) -> None:
        """A SEND's write returned (it is visible): an idle subscriber gets the head.

        `into_empty`: the queue held nothing else, so `msg` is its head and can go
        out at once; otherwise the head is read by the task that pushes it.
        `box_key` is the queue's key and `service_id` its recipient service, from
        the record the SEND read: a queue nobody holds that is associated with a
        service goes to the service's holder (docs/protocol.md#service-subscriptions),
        through a `Sub` that lasts while its messages are on their way.
        """
        subscriptions = self._subscriptions
        client = subscriptions.subscriber_of(recipient_id)
        if client is None:
            if service_id is None:
                return
            client = subscriptions.service_holder(service_id, recipient_id)
            if client is None:
                return
            sub: Sub | None = subscriptions.subscribe_for_service(client, recipient_id, box_key)
        else:
            sub = client.queues.get(recipient_id)
        if not self._subscriptions.push_due(client, sub, msg.ts):
            return  # the common case for a busy queue: its ACK delivers the next one
        assert sub is not None
        conn = client.conn
        if self.per_queue_task or not into_empty:
            self.push_later(client, sub, msg.ts, box_key)
        elif recipient_id in client.deliveries:
            return  # already waiting; the older entry stands
        elif not conn.outbox_full():
            # No checkpoint since outbox_full(): push_nowait cannot refuse it here.
            conn.push_nowait([self.message_transmission(b"", recipient_id, sub, msg, box_key)])
        else:
            self.push_later(client, sub, msg.ts, box_key)
            self._counters.messages_deferred += 1

    def push_later(self, client: ClientSubscriptions, sub: Sub, ts: int, box_key: bytes) -> None:
        """The queue's head goes out from the delivery task (or the queue's own task,
        which has the key already).

        `ts` is at most the head's time, which orders the entry well enough; an
        entry already waiting stands.
        """
        if self.per_queue_task:
            assert sub.wake is not None
            sub.wake.set()
        elif sub.recipient_id not in client.deliveries:
            client.waiting().add(sub.recipient_id, ts, box_key)
            client.conn.wake_delivery()

    def stored_into_empty(self, recipient_id: bytes, msg: Message, box_key: bytes) -> None:
        """`stored` for a write that landed in an empty queue (benchmarks inject so)."""
        self.stored(recipient_id, msg, box_key, into_empty=True)

    async def delivery_loop(self, client: ClientSubscriptions, walker: CatchUpWalker) -> None:
        """The connection's delivery work, in both modes: events that found the
        pending list full, deferred pushes (single-task mode) and service catch-ups.
        Returns once there is none (`Connection.wake_delivery` starts it again)."""
        conn = client.conn
        first = True
        while True:
            if not first:
                # A write that the socket takes at once does not yield, nor does a
                # memory store's peek: one pass of the scheduler per batch keeps a
                # long burst from holding the others up. What is to do is looked at
                # after it, since the pass may have changed it.
                await trio.lowlevel.checkpoint()
            first = False
            if conn.overflow_events:
                events, conn.overflow_events = conn.overflow_events, None
                await conn.push(events)
            elif client.deliveries:
                batch = await self._take_heads(client)
                if batch:
                    await conn.push(batch)  # has room: made and handed over in one step
            elif client.catch_up:
                await walker.catch_up_step(client)
            else:
                return

    async def _take_heads(self, client: ClientSubscriptions) -> list[bytes]:
        """MSGs for the oldest waiting queues, up to `DELIVERY_BATCH` of them as one
        batch: a burst costs one write per batch, not per MSG.

        Their heads are read in one store call, and the MSGs are made after it, once
        the connection has room for them: nothing is awaited between making a MSG
        and handing it to the connection. A MSG made before an await (a store's read
        in its thread) could otherwise be written after its subscription was taken
        by another connection and its END written, and a SUB answered meanwhile would
        then carry the same message a second time."""
        conn = client.conn
        while conn.outbox_full():
            await conn.push([])  # what is pending is this task's to write, when nobody is
        subscriptions, deliveries = self._subscriptions, client.deliveries
        taken: list[tuple[bytes, bytes, Sub]] = []
        while deliveries and len(taken) < DELIVERY_BATCH:
            recipient_id, box_key = deliveries.pop_oldest()
            sub = client.queues.get(recipient_id)
            if subscriptions.can_push(client, sub):
                assert sub is not None
                taken.append((recipient_id, box_key, sub))
        if not taken:
            return []
        heads = await self._messages.peek_messages([rid for rid, _, _ in taken])
        batch: list[bytes] = []
        for (recipient_id, box_key, sub), msg in zip(taken, heads, strict=True):
            if msg is None or not subscriptions.may_push(client, sub, msg):
                subscriptions.settle(client, sub)  # a service's `Sub` with nothing to send
            elif conn.outbox_full():  # filled while the heads were read: wait again
                deliveries.add(recipient_id, msg.ts, box_key)
            else:
                batch.append(self.message_transmission(b"", recipient_id, sub, msg, box_key))
        return batch

    async def _head_transmission(
        self, client: ClientSubscriptions, recipient_id: bytes, box_key: bytes
    ) -> bytes | None:
        sub = client.queues.get(recipient_id)
        if not self._subscriptions.can_push(client, sub):
            return None
        msg = await self._messages.peek_message(recipient_id)
        if msg is None or not self._subscriptions.may_push(client, sub, msg):
            if sub is not None:
                self._subscriptions.settle(client, sub)  # a service's `Sub` with nothing to send
            return None
        assert sub is not None
        return self.message_transmission(b"", recipient_id, sub, msg, box_key)

    async def _deliver_head(
        self, client: ClientSubscriptions, recipient_id: bytes, box_key: bytes
    ) -> None:
        """Per-queue-task mode: the head, left to the connection's writer. The queue's
        task does not write itself: its scope is cancelled when the queue leaves, and a
        write cut short would cut a block in two."""
        conn = client.conn
        await conn.wait_for_room()  # before the MSG is made: nothing is lost if cancelled
        transmission = await self._head_transmission(client, recipient_id, box_key)
        if transmission is not None:
            conn.leave([transmission])

    async def _queue_task(self, client: ClientSubscriptions, sub: Sub, box_key: bytes) -> None:
        assert sub.scope is not None
        with sub.scope:
            while True:
                assert sub.wake is not None
                await sub.wake.wait()
                sub.wake = trio.Event()
                await self._deliver_head(client, sub.recipient_id, box_key)
