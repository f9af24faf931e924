"""Message expiration: undelivered messages older than the TTL are removed.

The reference router keeps a message for 21 days and looks for old ones every
2 hours (docs/protocol.md#limits); so does this one, with both periods configurable. A
pass walks every queue that holds messages and removes the run of messages at
its head that are older than the TTL (`MessageStore.expire_messages`; a newer
message shields the older ones behind it, as in the reference). A pass runs
when the router starts (in the background: the router serves meanwhile), then
every `interval` seconds, and, with `expire_on_send`, on the queue a SEND is
about to write to.

Before removing anything, a pass reads the queue's head: most queues have
nothing to expire, and a read is much cheaper than a write for the durable
stores. Message times are wall-clock seconds (the router stamps each message
with `time.time()`), while the pause between passes is measured on Trio's
clock, so tests can run the schedule on a mock clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

from store.interfaces import MessageStore, StoreError

log = logging.getLogger(__name__)

_YIELD_EVERY = 1000  # queues between checkpoints, for stores whose calls never block


class Expirer:
    """Removes old messages from one message store and counts what it removed."""

    def __init__(
        self,
        messages: MessageStore,
        *,
        ttl: float,
        interval: float,
        on_expired: Callable[[int], None] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._messages = messages
        self.ttl = ttl
        self.interval = interval
        self._on_expired = on_expired
        self.wall_clock = wall_clock  # the time messages are compared with
        self.expired_total = 0
        self.passes = 0  # completed passes
        self._pass_done = trio.Event()

    def cutoff(self) -> int:
        """Messages stamped before this Unix second are expired."""
        return int(self.wall_clock() - self.ttl)

    async def expire_queue(self, recipient_id: bytes, before_ts: int | None = None) -> int:
        """Expire one queue's old head messages; returns how many went."""
        before = self.cutoff() if before_ts is None else before_ts
        head = await self._messages.peek_message(recipient_id)
        if head is None or head.ts >= before:
            return 0
        n = await self._messages.expire_messages(recipient_id, before)
        self._count(n)
        return n

    async def expire_all(self) -> int:
        """One pass over every queue that holds messages; returns how many expired."""
        before = self.cutoff()
        total = 0
        ids = [rid async for rid in self._messages.queue_ids()]
        for i, rid in enumerate(ids, 1):
            total += await self.expire_queue(rid, before)
            if i % _YIELD_EVERY == 0:
                await trio.lowlevel.checkpoint()
        self.passes += 1
        self._pass_done.set()
        self._pass_done = trio.Event()
        if total:
            log.info("expired %d message(s) older than %s s", total, self.ttl)
        return total

    async def wait_passes(self, count: int) -> None:
        """Return once `count` passes in all have finished (for tests and tools)."""
        while self.passes < count:
            await self._pass_done.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """A pass now, then one every `interval` seconds, until cancelled."""
        task_status.started()
        while True:
            await self._guarded_pass()
            await trio.sleep(self.interval)

    async def _guarded_pass(self) -> None:
        # A store failure (disk full, I/O error) skips this pass, not every later one.
        try:
            await self.expire_all()
        except StoreError as exc:
            log.warning("message expiration pass failed: %s", exc)

    def _count(self, n: int) -> None:
        if n:
            self.expired_total += n
            if self._on_expired is not None:
                self._on_expired(n)
