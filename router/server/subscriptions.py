"""Who is subscribed to what: per-connection `Sub` records, the router-wide
registry of subscribers, and the batched END/DELD events of displaced ones.

Theory of operation (docs/protocol.md#behaviour, the reference router's model):

- A connection's `subscriptions` map holds one `Sub` per queue it used SUB or
  GET on. `delivered` is the gate of delivery: while it holds a message id,
  nothing more is pushed for that queue until the ACK.
- `SubscriberRegistry` maps each queue (or notifier) id to the one connection
  subscribed to it router-wide. A SUB from another connection replaces the
  entry; the displaced connection forgets its `Sub` at once and is told with
  an END event. GET never enters the registry.
- `PendingEvents` collects END/DELD per connection and one router task
  flushes them every `end_batch_interval`, so that a burst of takeovers (a
  client reconnecting with thousands of queues) costs the old connection a few
  blocks, not thousands of separate writes. The flush never waits on a
  client: it hands the batch over with `send_nowait`, and if that client's
  send channel is full the batch goes to the client's own delivery task
  (`Connection.push_events`), which is the only one to wait for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import trio

from router.protocol.codec import encode_response_transmission
from router.protocol.types import DELD, END

if TYPE_CHECKING:
    from .connection import Connection

_END, _DELD = END(), DELD()
# below it the router sends END where it would send DELD (docs/protocol.md#versions)
DELD_VERSION = 10


@dataclass(slots=True, eq=False)
class Sub:
    """One queue on one connection."""

    recipient_id: bytes
    box_key: bytes  # the queue's rcv_dh_secret, encrypts MSG bodies (docs/protocol.md#encryption)
    get_mode: bool = False  # GET was used here: SUB is prohibited, nothing is pushed
    delivered: tuple[bytes, int] | None = None  # (msg id, ts) in flight, awaiting ACK
    # per-queue-task mode only: the queue's own task waits on `wake`
    wake: trio.Event | None = None
    scope: trio.CancelScope | None = None


class SubscriberRegistry:
    """Entity id -> the connection subscribed to it, router-wide."""

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        self._subscribers: dict[bytes, Connection] = {}

    def __len__(self) -> int:
        return len(self._subscribers)

    def get(self, entity_id: bytes) -> Connection | None:
        return self._subscribers.get(entity_id)

    def subscribe(self, entity_id: bytes, conn: Connection) -> Connection | None:
        """Make `conn` the subscriber; returns the other connection it displaced, if any."""
        previous = self._subscribers.get(entity_id)
        self._subscribers[entity_id] = conn
        return previous if previous is not conn else None

    def unsubscribe(self, entity_id: bytes, conn: Connection) -> bool:
        """Remove the entry only if it is still `conn`'s (a newer subscriber keeps it)."""
        if self._subscribers.get(entity_id) is not conn:
            return False
        del self._subscribers[entity_id]
        return True

    def remove(self, entity_id: bytes) -> Connection | None:
        return self._subscribers.pop(entity_id, None)


class Event(Enum):
    END = "end"  # displaced from a queue
    DELETED = "deleted"  # the queue (or its notifier) was deleted: DELD at v10+
    NTF_END = "ntf-end"  # displaced from a notifier subscription


class PendingEvents:
    """END / DELD waiting to be sent, grouped by connection, flushed by one task."""

    __slots__ = ("_interval", "_pending", "_ready")

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._pending: dict[Connection, list[tuple[bytes, Event]]] = {}
        self._ready = trio.Event()

    def __len__(self) -> int:
        return sum(len(events) for events in self._pending.values())

    def add(self, conn: Connection, entity_id: bytes, event: Event) -> None:
        self._pending.setdefault(conn, []).append((entity_id, event))
        self._ready.set()

    def forget(self, conn: Connection) -> None:
        self._pending.pop(conn, None)

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            await trio.sleep(self._interval)
            self.flush()

    def flush(self) -> None:
        self._ready = trio.Event()
        pending, self._pending = self._pending, {}
        for conn, events in pending.items():
            transmissions = encode_events(conn.version, events, conn.is_subscribed)
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
            resp = _DELD if version >= DELD_VERSION else _END
        elif is_subscribed(entity_id, event is Event.NTF_END):
            continue
        else:
            resp = _END
        out.append(encode_response_transmission(b"", entity_id, resp))
    return out
