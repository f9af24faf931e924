"""The per-client map of queues with a message waiting to be pushed (DESIGN.md).

Theory of operation: when a SEND lands in an empty queue whose subscriber's
send channel is full, the router cannot push the message right away. Instead
of parking one task per such queue, it records the queue here and the
client's single delivery task works through the map, oldest message first.

- Keyed by recipient id, at most one entry per queue, so the map never holds
  more entries than the client has subscriptions.
- Ordered by the waiting message's timestamp; entries with the same second
  keep their insertion order (a sequence number breaks ties).
- Adding a queue that is already present keeps the older entry: the waiting
  message it stands for is still the queue's head.
- `pop_oldest()` is O(log n) on a `SortedList`.

Pure data structure: no trio, so it is unit-tested on its own.
"""

from __future__ import annotations

from itertools import count

from sortedcontainers import SortedList


class Deliveries:
    __slots__ = ("_order", "_entries", "_seq")

    def __init__(self) -> None:
        self._order: SortedList = SortedList()  # (ts, seq, recipient_id)
        self._entries: dict[bytes, tuple[int, int]] = {}  # recipient_id -> (ts, seq)
        self._seq = count()

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __contains__(self, recipient_id: object) -> bool:
        return recipient_id in self._entries

    def add(self, recipient_id: bytes, ts: int) -> bool:
        """Record a waiting message; False (and no change) if the queue is already here."""
        if recipient_id in self._entries:
            return False
        key = (ts, next(self._seq))
        self._entries[recipient_id] = key
        self._order.add((*key, recipient_id))
        return True

    def pop_oldest(self) -> bytes:
        """Remove and return the queue whose waiting message is oldest; KeyError if empty."""
        if not self._entries:
            raise KeyError("no deliveries pending")
        _, _, recipient_id = self._order.pop(0)
        del self._entries[recipient_id]
        return recipient_id

    def discard(self, recipient_id: bytes) -> bool:
        """Forget a queue (unsubscribed, displaced, deleted); False if it was not here."""
        key = self._entries.pop(recipient_id, None)
        if key is None:
            return False
        self._order.remove((*key, recipient_id))
        return True

    def timestamp(self, recipient_id: bytes) -> int | None:
        key = self._entries.get(recipient_id)
        return None if key is None else key[0]

    def clear(self) -> None:
        self._order.clear()
        self._entries.clear()
