"""The per-client map of queues with a message waiting to be pushed (DESIGN.md).

Theory of operation: when a SEND lands in an empty queue whose subscriber's
send channel is full, the router cannot push the message right away. Instead
of parking one task per such queue, it records the queue here and the
client's single delivery task works through the map, oldest message first.

- Keyed by recipient id, at most one entry per queue, so the map never holds
  more entries than the client has subscriptions. An entry keeps the queue's
  key (its rcv_dh_secret), which the delivery task encrypts the head with: the
  subscription itself does not hold it (subscriptions.py).
- Ordered by the waiting message's timestamp; entries with the same second
  keep their insertion order (a sequence number breaks ties).
- Adding a queue that is already present keeps the older entry: the waiting
  message it stands for is still the queue's head.
- `pop_oldest()` is O(log n) on a `SortedList`.
- Nothing is allocated while it is empty.

Pure data structure: no trio, so it is unit-tested on its own.
"""

from __future__ import annotations

from sortedcontainers import SortedList


class Deliveries:
    """Empty, it holds no collection: a connection with nothing waiting (nearly
    all of them, nearly always) pays for none, and one that was busy gives
    them back once it has caught up."""

    __slots__ = ("_order", "_entries", "_seq")

    def __init__(self) -> None:
        self._order: SortedList | None = None  # (ts, seq, recipient_id)
        # recipient_id -> (ts, seq, the queue's key)
        self._entries: dict[bytes, tuple[int, int, bytes]] | None = None
        self._seq = 0

    def __len__(self) -> int:
        return 0 if self._entries is None else len(self._entries)

    def __bool__(self) -> bool:
        return self._entries is not None

    def __contains__(self, recipient_id: object) -> bool:
        return self._entries is not None and recipient_id in self._entries

    def add(self, recipient_id: bytes, ts: int, box_key: bytes) -> bool:
        """Record a waiting message; False (and no change) if the queue is already here."""
        entries, order = self._entries, self._order
        if entries is None or order is None:
            entries, order = self._entries, self._order = {}, SortedList()
        elif recipient_id in entries:
            return False
        self._seq += 1
        entries[recipient_id] = (ts, self._seq, box_key)
        order.add((ts, self._seq, recipient_id))
        return True

    def pop_oldest(self) -> tuple[bytes, bytes]:
        """Remove the queue whose waiting message is oldest and return its id and key;
        KeyError if empty."""
        if self._entries is None or self._order is None:
            raise KeyError("no deliveries pending")
        _, _, recipient_id = self._order.pop(0)
        box_key = self._entries.pop(recipient_id)[2]
        if not self._entries:
            self.clear()
        return recipient_id, box_key

    def discard(self, recipient_id: bytes) -> bool:
        """Forget a queue (unsubscribed, displaced, deleted); False if it was not here."""
        if self._entries is None or self._order is None:
            return False
        entry = self._entries.pop(recipient_id, None)
        if entry is None:
            return False
        self._order.remove((entry[0], entry[1], recipient_id))
        if not self._entries:
            self.clear()
        return True

    def timestamp(self, recipient_id: bytes) -> int | None:
        entry = None if self._entries is None else self._entries.get(recipient_id)
        return None if entry is None else entry[0]

    def clear(self) -> None:
        self._order = self._entries = None


class _NoDeliveries(Deliveries):
    """The one empty map every client starts with (`NO_DELIVERIES`): the first queue
    waiting gets the client a map of its own (`ClientSubscriptions.waiting`), so a
    client that never waits for room (nearly all) keeps no object for it."""

    __slots__ = ()

    def add(self, recipient_id: bytes, ts: int, box_key: bytes) -> bool:
        raise RuntimeError("the shared empty map takes no delivery: add to a client's own")


NO_DELIVERIES: Deliveries = _NoDeliveries()
