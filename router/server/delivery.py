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
the head, and the SEND's own task writes the MSG straight into the
subscriber's outbox with `send_nowait` when the subscriber is idle (nothing
in flight) and the outbox has room. Otherwise (outbox full, or an idle
subscriber of a queue that already held messages) the queue goes into the
subscriber's `deliveries` map and the subscriber's one delivery task pushes
its head later, oldest message first, blocking only itself. A client with
10,000 subscriptions therefore costs three tasks, not 10,000.

per-queue-task: every subscribed queue has a task of its own that waits on
the queue's `trio.Event`; a SEND that finds the subscriber idle sets the
event and that task pushes the head. Kept so the benchmarks compare both
designs in the same code.

Before any push the state is re-checked after every await (the queue is
still this client's, still subscribed, nothing in flight), and `delivered` is
set before the write, so no trigger can deliver a message twice. An ACK
clears `delivered` before its delete reaches the store, so that a write
committed meanwhile finds the subscriber idle; until the delete returns, the
message it acknowledges is never pushed again (`acknowledging`), since a
store that orders the delete after a concurrent peek would still show it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import trio

from router.protocol.codec import encode_response_transmission
from router.protocol.crypto import encrypt_msg_body
from router.protocol.types import MSG
from store.interfaces import Message

from .config import PER_QUEUE_TASK
from .subscriptions import Sub

# MSGs the delivery task hands to the writer at once. Each is a block of its own
# on the wire; the outbox holds `send_queue_size` batches, so this also bounds
# what a reader that stopped reading can have waiting (64 x 4 x 16 KB = 4 MB).
DELIVERY_BATCH = 4

if TYPE_CHECKING:
    from .connection import Connection
    from .router import Router


class Deliverer:
    __slots__ = ("_router", "per_queue_task", "_acking")

    def __init__(self, router: Router) -> None:
        self._router = router
        self.per_queue_task = router.config.delivery == PER_QUEUE_TASK
        # Sub -> id of the message its ACK is deleting; at most one per connection,
        # since a connection runs its commands one at a time.
        self._acking: dict[Sub, bytes] = {}

    def message_transmission(
        self, corr_id: bytes, recipient_id: bytes, sub: Sub, msg: Message
    ) -> bytes:
        """The MSG for `msg`, encrypted for the queue; marks it as in flight."""
        enc = encrypt_msg_body(sub.box_key, msg.msg_id, msg.ts, msg.flags, msg.body, msg.quota)
        sub.delivered = (msg.msg_id, msg.ts)
        self._router.counters.messages_delivered += 1
        return encode_response_transmission(corr_id, recipient_id, MSG(msg.msg_id, enc))

    def start(self, conn: Connection, sub: Sub) -> None:
        """Called for each new subscription; per-queue-task mode gives it its task."""
        if self.per_queue_task:
            sub.wake = trio.Event()
            sub.scope = trio.CancelScope()
            conn.spawn(self._queue_task, conn, sub)

    def can_push(self, conn: Connection, sub: Sub | None) -> bool:
        """The queue is still `conn`'s, subscribed (not GET), and nothing is in flight."""
        return (
            sub is not None
            and not sub.get_mode
            and sub.delivered is None
            and conn.subscriptions.get(sub.recipient_id) is sub
            and self._router.subscribers.get(sub.recipient_id) is conn
        )

    def may_push(self, conn: Connection, sub: Sub | None, head: Message) -> bool:
        """`can_push`, and `head` is not the message an ACK of this queue is deleting."""
        return self.can_push(conn, sub) and self._acking.get(sub) != head.msg_id  # type: ignore[arg-type]

    @contextmanager
    def acknowledging(self, sub: Sub, msg_id: bytes) -> Iterator[None]:
        """While an ACK deletes `msg_id`, no trigger pushes that message again."""
        self._acking[sub] = msg_id
        try:
            yield
        finally:
            del self._acking[sub]

    def stored(self, recipient_id: bytes, msg: Message, *, into_empty: bool) -> None:
        """A SEND's write returned (it is visible): an idle subscriber gets the head.

        `into_empty`: the queue held nothing else, so `msg` is its head and can go
        out at once; otherwise the head is read by the task that pushes it.
        """
        conn = self._router.subscribers.get(recipient_id)
        if conn is None:
            return
        sub = conn.subscriptions.get(recipient_id)
        if not self.can_push(conn, sub):
            return  # the common case for a busy queue: its ACK delivers the next one
        assert sub is not None
        if self.per_queue_task:
            assert sub.wake is not None
            sub.wake.set()
        elif recipient_id in conn.deliveries:
            return  # already waiting; the older entry stands
        elif into_empty and not conn.outbox_full():
            # No checkpoint since outbox_full(): send_nowait cannot fail here.
            conn.push_nowait([self.message_transmission(b"", recipient_id, sub, msg)])
        else:
            # The head is at most as new as `msg`: its time orders the entry well enough.
            conn.deliveries.add(recipient_id, msg.ts)
            conn.wake_delivery()
            if into_empty:
                self._router.counters.messages_deferred += 1

    def stored_into_empty(self, recipient_id: bytes, msg: Message) -> None:
        """`stored` for a write that landed in an empty queue (benchmarks inject so)."""
        self.stored(recipient_id, msg, into_empty=True)

    async def delivery_loop(self, conn: Connection) -> None:
        """The connection's one delivery task, in both modes: events that found the
        outbox full, deferred pushes (single-task mode) and service catch-ups."""
        while True:
            await conn.wait_delivery_work()
            if conn.overflow_events:
                events, conn.overflow_events = conn.overflow_events, []
                await conn.push(events)
            elif conn.deliveries:
                batch = await self._take_heads(conn)
                if batch:
                    await conn.push(batch)
            else:
                await self._router.services.catch_up_step(conn)

    async def _take_heads(self, conn: Connection) -> list[bytes]:
        """MSGs for the oldest waiting queues, up to `DELIVERY_BATCH` of them as one
        outbox batch: a burst costs one hand-over to the writer per batch, not per MSG."""
        batch: list[bytes] = []
        deliveries = conn.deliveries
        while deliveries and len(batch) < DELIVERY_BATCH:
            transmission = await self._head_transmission(conn, deliveries.pop_oldest())
            if transmission is not None:
                batch.append(transmission)
        return batch

    async def _head_transmission(self, conn: Connection, recipient_id: bytes) -> bytes | None:
        sub = conn.subscriptions.get(recipient_id)
        if not self.can_push(conn, sub):
            return None
        msg = await self._router.messages.peek_message(recipient_id)
        if msg is None or not self.may_push(conn, sub, msg):
            return None
        assert sub is not None
        return self.message_transmission(b"", recipient_id, sub, msg)

    async def _deliver_head(self, conn: Connection, recipient_id: bytes) -> None:
        transmission = await self._head_transmission(conn, recipient_id)
        if transmission is not None:
            await conn.push([transmission])

    async def _queue_task(self, conn: Connection, sub: Sub) -> None:
        assert sub.scope is not None
        with sub.scope:
            while True:
                assert sub.wake is not None
                await sub.wake.wait()
                sub.wake = trio.Event()
                await self._deliver_head(conn, sub.recipient_id)
