"""The agent's subscription table and the events it reports (no I/O here).

Theory of operation
-------------------
The application tells the agent which queues it wants subscribed. Queues are
grouped by *session key*: the router address and an optional group name. One
key is served by one connection at a time, and each connection made for a key
is a *session* with a number that is never reused (a counter over the whole
table), so anything that comes back tagged with an older number can be told
apart from what belongs to the current one.

Each wanted queue is in one of two states:

    PENDING --SUB answered OK in the current session--> ACTIVE
    ACTIVE  --the session's connection is lost-------> PENDING  (reported DOWN)
    PENDING/ACTIVE --END / DELD in the current session, or SUB refused--> removed

A PENDING queue is either waiting to be sent (`unsent`, in the order it was
added) or has had its SUB sent in the current session (`sent_in`). Every
transition checks the session number it is given against the key's current
one, and the queue's `sent_in` against it too: a SUB answer, an END or a
message from a session that has been replaced changes nothing. UP is reported
only for PENDING -> ACTIVE and DOWN only for ACTIVE -> PENDING, so each
queue's transition is reported exactly once, however many batches and
reconnections it takes.

The same queue cannot be wanted under two keys: two connections of one
client would take it from each other forever (each SUB ends the other).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from itertools import count

from router.protocol.types import ErrorType

from ._types import MessageEvent, RecipientQueue, UndecryptedMessageEvent

SessionKey = tuple[str, str | None]  # (router address, group or None for the shared one)

# SUB errors worth retrying on the same connection: the router could not serve
# the command just now. Any other error means the queue cannot be subscribed
# with these credentials (AUTH: no such queue, or the wrong key).
TEMPORARY_ERRORS = frozenset({"INTERNAL", "STORE", "SESSION"})


class QueueState(Enum):
    PENDING = "pending"
    ACTIVE = "active"


class RemovalReason(Enum):
    ENDED = "ended"  # END: another connection subscribed to the queue
    DELETED = "deleted"  # DELD (END at v9 looks like ENDED): the queue was deleted
    REFUSED = "refused"  # the router answered SUB with a permanent error


# --- events ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueuesUp:
    """These queues became subscribed (each reported once per PENDING -> ACTIVE)."""

    router: str
    group: str | None
    recipient_ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class QueuesDown:
    """The connection serving these active queues was lost; they are pending again."""

    router: str
    group: str | None
    recipient_ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class QueuesRemoved:
    """These queues left the agent's set: the agent will not subscribe them again."""

    router: str
    group: str | None
    recipient_ids: tuple[bytes, ...]
    reason: RemovalReason
    error: ErrorType | None = None  # the SUB error, for REFUSED


@dataclass(frozen=True, slots=True)
class Connected:
    router: str
    group: str | None
    session: int


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    router: str
    group: str | None
    session: int
    reason: str


@dataclass(frozen=True, slots=True)
class ConnectFailed:
    """An attempt to connect failed; the next one follows after `retry_in` seconds."""

    router: str
    group: str | None
    attempt: int  # failures in a row, this one included
    reason: str
    retry_in: float
    # What failed: e.g. `UpgradeRejected` (HTTP status) or `IdentityMismatch` (wrong key hash).
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A message the router delivered on session `session`; acknowledge it with `Agent.ack`."""

    router: str
    group: str | None
    session: int
    queue: RecipientQueue
    message: MessageEvent | UndecryptedMessageEvent

    @property
    def recipient_id(self) -> bytes:
        return self.queue.recipient_id

    @property
    def msg_id(self) -> bytes:
        return self.message.msg_id


AgentEvent = (
    QueuesUp | QueuesDown | QueuesRemoved | Connected | ConnectionLost | ConnectFailed
    | ReceivedMessage
)


# --- the table ------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Entry:
    queue: RecipientQueue
    state: QueueState = QueueState.PENDING
    sent_in: int = 0  # the session whose SUB for it is outstanding or answered; 0: none


@dataclass(slots=True, eq=False)
class _KeyState:
    session: int = 0  # the current session; 0 while disconnected
    entries: dict[bytes, _Entry] = field(default_factory=dict)
    unsent: dict[bytes, None] = field(default_factory=dict)  # ordered set of pending ids


@dataclass(frozen=True, slots=True)
class SubResults:
    """What one batch of SUB answers did to the table."""

    up: tuple[bytes, ...] = ()
    refused: tuple[tuple[bytes, ErrorType], ...] = ()
    retry: tuple[bytes, ...] = ()


class SubscriptionTable:
    """Wanted queues per session key, with their PENDING / ACTIVE state."""

    def __init__(self) -> None:
        self._keys: dict[SessionKey, _KeyState] = {}
        self._owner: dict[bytes, SessionKey] = {}  # recipient id -> its key
        self._sessions = count(1)

    # --- what the application asks ---------------------------------------------------

    def add(self, key: SessionKey, queues: Iterable[RecipientQueue]) -> list[bytes]:
        """Want `queues` under `key`; returns the ids that were not wanted before.

        Raises ValueError if a queue is already wanted under another key.
        """
        queues = list(queues)
        for q in queues:
            owner = self._owner.get(q.recipient_id)
            if owner is not None and owner != key:
                raise ValueError(f"queue {q.recipient_id.hex()} is already held under {owner}")
        ks = self._keys.setdefault(key, _KeyState())
        added = []
        for q in queues:
            rid = q.recipient_id
            if rid in ks.entries:
                continue
            ks.entries[rid] = _Entry(q)
            ks.unsent[rid] = None
            self._owner[rid] = key
            added.append(rid)
        return added

    def remove(self, recipient_id: bytes) -> SessionKey | None:
        """Stop wanting the queue; returns the key it was held under, or None."""
        key = self._owner.pop(recipient_id, None)
        if key is not None:
            ks = self._keys[key]
            del ks.entries[recipient_id]
            ks.unsent.pop(recipient_id, None)
        return key

    # --- observation -------------------------------------------------------------------

    def key_of(self, recipient_id: bytes) -> SessionKey | None:
        return self._owner.get(recipient_id)

    def state(self, recipient_id: bytes) -> QueueState | None:
        key = self._owner.get(recipient_id)
        return None if key is None else self._keys[key].entries[recipient_id].state

    def queue(self, recipient_id: bytes) -> RecipientQueue | None:
        key = self._owner.get(recipient_id)
        return None if key is None else self._keys[key].entries[recipient_id].queue

    def current_session(self, key: SessionKey) -> int:
        ks = self._keys.get(key)
        return 0 if ks is None else ks.session

    def holds(self, key: SessionKey, session: int, recipient_id: bytes) -> bool:
        """Is `session` the key's current one, and the queue wanted and sent in it?"""
        ks = self._keys.get(key)
        if ks is None or not session or ks.session != session:
            return False
        entry = ks.entries.get(recipient_id)
        return entry is not None and entry.sent_in == session

    def counts(self) -> tuple[int, int]:
        """(pending, active) over every key."""
        active = sum(
            e.state is QueueState.ACTIVE for ks in self._keys.values() for e in ks.entries.values()
        )
        return len(self._owner) - active, active

    def has_unsent(self, key: SessionKey) -> bool:
        ks = self._keys.get(key)
        return ks is not None and bool(ks.unsent)

    # --- sessions ------------------------------------------------------------------------

    def start_session(self, key: SessionKey) -> int:
        """A new connection for `key`: every wanted queue is pending and unsent in it."""
        ks = self._keys.setdefault(key, _KeyState())
        ks.session = next(self._sessions)
        for rid, entry in ks.entries.items():
            entry.state, entry.sent_in = QueueState.PENDING, 0
            ks.unsent[rid] = None
        return ks.session

    def lose_session(self, key: SessionKey, session: int) -> tuple[bytes, ...]:
        """The session's connection is gone: active queues go back to pending (returned)."""
        ks = self._keys.get(key)
        if ks is None or ks.session != session:
            return ()
        ks.session = 0
        down = []
        for rid, entry in ks.entries.items():
            if entry.state is QueueState.ACTIVE:
                down.append(rid)
            entry.state, entry.sent_in = QueueState.PENDING, 0
        ks.unsent.clear()
        return tuple(down)

    # --- subscribing ----------------------------------------------------------------------

    def take_batch(self, key: SessionKey, session: int, limit: int) -> list[RecipientQueue]:
        """Up to `limit` unsent queues, marked as sent in `session`."""
        ks = self._keys.get(key)
        if ks is None or not session or ks.session != session:
            return []
        batch = []
        while ks.unsent and len(batch) < limit:
            rid = next(iter(ks.unsent))
            del ks.unsent[rid]
            entry = ks.entries[rid]
            entry.sent_in = session
            batch.append(entry.queue)
        return batch

    def subscribed(
        self, key: SessionKey, session: int, answers: Iterable[tuple[bytes, ErrorType | None]]
    ) -> SubResults:
        """Apply SUB answers `(recipient id, error or None)` received in `session`."""
        ks = self._keys.get(key)
        if ks is None or not session or ks.session != session:
            return SubResults()  # a replaced session's answers change nothing
        up, refused, retry = [], [], []
        for rid, error in answers:
            entry = ks.entries.get(rid)
            if entry is None or entry.sent_in != session or entry.state is not QueueState.PENDING:
                continue
            if error is None:
                entry.state = QueueState.ACTIVE
                up.append(rid)
            elif error.tag in TEMPORARY_ERRORS:
                retry.append(rid)
            else:
                self.remove(rid)
                refused.append((rid, error))
        return SubResults(tuple(up), tuple(refused), tuple(retry))

    def resend(self, key: SessionKey, session: int, recipient_ids: Iterable[bytes]) -> bool:
        """Queue still-pending ids of `session` to be sent again; True if any were."""
        ks = self._keys.get(key)
        if ks is None or not session or ks.session != session:
            return False
        again = False
        for rid in recipient_ids:
            entry = ks.entries.get(rid)
            if entry is not None and entry.sent_in == session and entry.state is QueueState.PENDING:
                entry.sent_in = 0
                ks.unsent[rid] = None
                again = True
        return again

    def ended(self, key: SessionKey, session: int, recipient_id: bytes) -> bool:
        """END / DELD for the queue arrived in `session`: remove it if that is current."""
        if not self.holds(key, session, recipient_id):
            return False
        self.remove(recipient_id)
        return True
