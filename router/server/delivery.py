"""Pushing messages to subscribers: the fast path, the single delivery task,
and the per-queue tasks of the design it replaces.

Theory of operation. A queue's next message reaches its subscriber by one of
the reference router's three triggers (WIRE.md §9): with the SUB response,
with the ACK response, or when a SEND lands in an empty queue. The first two
are answers to the subscriber's own command and leave with its responses; the
third is a push, and it is the one this module is about. A service
subscription's catch-up (`services.py`) also runs in the delivery task below
and pushes with the same checks.

single-task (default): the SEND's own task writes the MSG straight into the
subscriber's outbox with `send_nowait` when the subscriber is idle (nothing
in flight) and the outbox has room. When the outbox is full, the queue goes
into the subscriber's `deliveries` map and the subscriber's one delivery task
pushes it later, oldest message first, blocking only itself. A client with
10,000 subscriptions therefore costs three tasks, not 10,000.

per-queue-task: every subscribed queue has a task of its own that waits on
the queue's `trio.Event`; a SEND into the empty queue sets the event and that
task pushes the message. Kept so the benchmarks compare both designs in the
same code.

Before any push the state is re-checked after every await (the queue is
still this client's, still subscribed, nothing in flight), and `delivered` is
set before the write, so no trigger can deliver a message twice.
"""

from __future__ import annotations

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
    __slots__ = ("_router", "per_queue_task")

    def __init__(self, router: Router) -> None:
        self._router = router
        self.per_queue_task = router.config.delivery == PER_QUEUE_TASK

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

    def stored_into_empty(self, recipient_id: bytes, msg: Message) -> None:
        """A SEND made the queue non-empty: push to an idle subscriber (WIRE.md §9)."""
        conn = self._router.subscribers.get(recipient_id)
        if conn is None:
            return
        sub = conn.subscriptions.get(recipient_id)
        if not self.can_push(conn, sub):
            return
        assert sub is not None
        if self.per_queue_task:
            assert sub.wake is not None
            sub.wake.set()
        elif recipient_id in conn.deliveries:
            return  # already waiting; the older entry stands
        elif conn.outbox_full():
            conn.deliveries.add(recipient_id, msg.ts)
            conn.wake_delivery()
            self._router.counters.messages_deferred += 1
        else:
            # No checkpoint since outbox_full(): send_nowait cannot fail here.
            conn.push_nowait([self.message_transmission(b"", recipient_id, sub, msg)])

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
        if msg is None or not self.can_push(conn, sub):
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
