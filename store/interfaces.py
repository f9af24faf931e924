"""The two store interfaces: queue records and undelivered messages.

Every backend (memory, journal files, SQLite, PostgreSQL) implements one or both of these
`typing.Protocol`s and passes the same contract suite (tests/store). Store
operations report the protocol's errors as `ErrorType` values, which the
router sends back unchanged as `ERR ...`; exceptions mean bugs or I/O failure.

I/O failure is reported one way only: a backend raises `StoreError` (never
sqlite3 or OSError) carrying the `ErrorType` to answer with, e.g.
`ERR STORE database or disk is full` or `ERR INTERNAL`. The router catches
`StoreError` around every store call and sends `ERR <error>`; the command has
then not taken effect (for a write: it was not stored). Any other exception
is a bug.

All methods are async so that backends which do I/O (SQLite on a worker
thread, journal group commit) and the in-memory one share one interface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from router.protocol.types import ErrorType

DUPLICATE = ErrorType("DUPLICATE_")  # an id collision; the router retries with fresh ids


class StoreError(Exception):
    """A store operation failed for a reason outside the protocol (disk full, I/O error).

    `error` is what the router answers: `ErrorType("STORE", text)` or INTERNAL.
    """

    def __init__(self, error: ErrorType, detail: str = "") -> None:
        super().__init__(f"{error}{': ' + detail if detail else ''}")
        self.error = error


class Party(Enum):
    RECIPIENT = "r"
    SENDER = "s"
    NOTIFIER = "n"
    LINK = "l"  # the id of a queue's short link (v15)


class QueueStatus(Enum):
    ACTIVE = "active"
    OFF = "off"  # suspended by the recipient: SEND is refused, everything else works


@dataclass(frozen=True, slots=True)
class NotifierCreds:
    notifier_id: bytes
    notifier_key: bytes  # SPKI DER
    rcv_ntf_dh_secret: bytes  # 32 raw bytes, X25519(srvNtfPriv, rcvNtfDhKey)


@dataclass(frozen=True, slots=True)
class QueueLinkData:
    """A queue's short link (v15): opaque to the router, encrypted by its clients.

    At most one per queue; its link id is unique across queues. `fixed_data`
    never changes once stored: only `user_data` may be replaced (LSET).
    """

    link_id: bytes  # 24 bytes in practice
    fixed_data: bytes
    user_data: bytes


QUEUE_MODES = (b"M", b"C")  # messaging (the sender secures it), contact (an address)


@dataclass(frozen=True, slots=True)
class QueueRecord:
    recipient_id: bytes
    sender_id: bytes
    recipient_key: bytes  # SPKI DER
    rcv_dh_secret: bytes  # 32 raw bytes, X25519(srvPriv, rcvDhKey) (docs/protocol.md#encryption)
    sender_key: bytes | None
    snd_secure: bool
    status: QueueStatus = QueueStatus.ACTIVE
    notifier: NotifierCreds | None = None
    rcv_service_id: bytes | None = None  # service whose SUBS covers this queue
    ntf_service_id: bytes | None = None  # service whose NSUBS covers its notifier
    updated_at: int = 0  # Unix seconds of the last change, for activity statistics
    # v15: b"M" or b"C"; None for a queue created without queue data (before v15,
    # or NEW without it). The router keeps snd_secure == (queue_mode == b"M").
    queue_mode: bytes | None = None
    link_id: bytes | None = None  # the id of the queue's link, if it has one
    # RKEY (docs/protocol.md#rkey): the recipient keys after the first, which stays
    # `recipient_key`; a command signed by any of them is the recipient's.
    more_recipient_keys: tuple[bytes, ...] = ()

    @property
    def recipient_keys(self) -> tuple[bytes, ...]:
        return (self.recipient_key, *self.more_recipient_keys)


@dataclass(frozen=True, slots=True)
class Message:
    msg_id: bytes  # 24 bytes
    ts: int  # Unix seconds when the router accepted the SEND
    flags: bytes  # as sent; b"" for the quota marker
    body: bytes  # as sent; b"" for the quota marker
    quota: bool = False  # the QUOTA marker (docs/protocol.md#behaviour)


SERVICE_ROLES = (b"M", b"N", b"P")  # messaging (SUBS), notifier (NSUBS), proxy


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """A service identity (docs/protocol.md#services): one per certificate and role.

    The id is the router's; the certificate is what the service proved in its TLS
    handshake. The same certificate with another role is another service."""

    service_id: bytes
    role: bytes  # one of SERVICE_ROLES
    cert: bytes  # DER of the service's identity certificate (the chain's root)
    cert_hash: bytes  # SHA-256 of `cert`
    created_at: int  # Unix seconds


EMPTY_IDS_HASH = bytes(16)


@dataclass(frozen=True, slots=True)
class ServiceQueues:
    """What SUBS/NSUBS compare with the client's own figures: how many queues are
    associated with a service on one side, and the XOR of the MD5 of their ids
    (recipient ids for RECIPIENT, notifier ids for NOTIFIER). A store keeps both
    current as queues are associated, released and deleted: never a scan."""

    count: int = 0
    ids_hash: bytes = EMPTY_IDS_HASH


class WriteResult(Enum):
    STORED_INTO_EMPTY = "stored-into-empty"  # a delivery trigger (docs/protocol.md#behaviour)
    STORED = "stored"
    QUOTA_EXCEEDED = "quota-exceeded"  # refused; the marker is now at the tail
    STORE_FULL = "store-full"  # refused: the store's total size cap (nothing was changed)


class QueueStore(Protocol):
    async def add_queue(
        self, record: QueueRecord, link: QueueLinkData | None = None
    ) -> ErrorType | None:
        """Store a new queue, with its link if given (together: both or neither;
        `record.link_id` must be `link.link_id`); DUPLICATE if any of its ids is
        taken, the link id included."""

    async def get_queue(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        """Look a queue up by the id of one party (recipient, sender, notifier or link)."""

    async def get_queues(
        self, party: Party, entity_ids: Sequence[bytes]
    ) -> list[QueueRecord | None]:
        """`get_queue` for every id of a block, in one store call (one query on a
        database), in the order given."""

    async def get_link(self, recipient_id: bytes) -> QueueLinkData | None:
        """The queue's link; None if the queue does not exist or has no link."""

    async def set_link(self, recipient_id: bytes, link: QueueLinkData) -> ErrorType | None:
        """LSET: give the queue a link, or replace its user data. AUTH if the queue
        is not there, if it has a link with another link id or other fixed data, or
        if the link id belongs to another queue."""

    async def delete_link(self, recipient_id: bytes) -> ErrorType | None:
        """LDEL: remove the queue's link and free its id (fine if it has none);
        AUTH if the queue is not there."""

    async def secure_queue(self, recipient_id: bytes, sender_key: bytes) -> ErrorType | None:
        """Set the sender key once; the same key again is fine, another is AUTH."""

    async def add_notifier(self, recipient_id: bytes, creds: NotifierCreds) -> ErrorType | None:
        """Add or replace the notifier; DUPLICATE if the notifier id is taken."""

    async def delete_notifier(self, recipient_id: bytes) -> NotifierCreds | None:
        """Remove the notifier; returns what was removed (None if there was none)."""

    async def suspend_queue(self, recipient_id: bytes) -> ErrorType | None: ...

    async def set_service(
        self, recipient_id: bytes, party: Party, service_id: bytes | None
    ) -> ErrorType | None:
        """Associate the queue's recipient or notifier side with a service (or none)."""

    async def service_queue_page(
        self, service_id: bytes, party: Party, after: bytes | None, limit: int
    ) -> list[bytes]:
        """One page of the queues whose `party` side (RECIPIENT or NOTIFIER) is associated
        with the service: the ids that side's figures hash (recipient ids, notifier ids),
        ascending, the first `limit` of those greater than `after` (from the first if
        None). A walk passes the last id of a page as the next `after` (keyset
        pagination: one indexed query per page on a database), so it holds one page at a
        time whatever the count, and no queue associated throughout comes twice or is
        missed, whatever is associated, released or deleted meanwhile."""

    async def set_queues_service(
        self, recipient_ids: Sequence[bytes], party: Party, service_id: bytes | None
    ) -> list[ErrorType | None]:
        """`set_service` for every queue of a block, in one store write, in the order given."""

    async def add_service(self, record: ServiceRecord) -> ServiceRecord:
        """The stored service with this record's role and certificate hash, stored
        first if there is none (then `record` itself is returned)."""

    async def service_summary(self, service_id: bytes, party: Party) -> ServiceQueues:
        """The count and ids hash of the queues associated with the service on `party`'s side."""

    async def set_recipient_keys(
        self, recipient_id: bytes, keys: tuple[bytes, ...]
    ) -> ErrorType | None:
        """RKEY: replace the queue's recipient keys (at least one); AUTH if the queue
        is not there."""

    async def delete_queue(self, recipient_id: bytes) -> QueueRecord | ErrorType:
        """Remove the queue and its link; returns the removed record, or AUTH if there was none."""

    def iter_queues(self) -> AsyncIterator[QueueRecord]:
        """Every stored queue, for export, migration and statistics."""

    def iter_services(self) -> AsyncIterator[ServiceRecord]:
        """Every stored service, for migration (which carries them with the
        associations their queues' records name) and its check."""

    def iter_links(self) -> AsyncIterator[tuple[bytes, QueueLinkData]]:
        """(recipient id, link) of every queue that has a link, for migration checks."""

    async def queue_count(self) -> int: ...

    async def close(self) -> None: ...


@runtime_checkable
class MessageRuns(Protocol):
    """What a message store whose every call is a round trip (PostgreSQL) adds: a
    block's run of SENDs, or of ACKs, in one call and one transaction (dispatch.py)."""

    async def write_messages(
        self, writes: Sequence[tuple[bytes, Message]], quota: int
    ) -> list[WriteResult]:
        """`write_message` of each (recipient id, message), in order: all committed, or
        none (StoreError)."""

    async def delete_messages(
        self, deletes: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[bool, Message | None]]:
        """`delete_message` of each (recipient id, message id) of distinct queues: all
        committed, or none (StoreError)."""


class MessageStore(Protocol):
    async def write_message(
        self, recipient_id: bytes, message: Message, quota: int
    ) -> WriteResult:
        """Append a message; once `quota` messages are stored, append the QUOTA marker
        (with this message's id and time) and refuse every write until the queue is empty.
        Returns only once the message is as durable as the backend promises."""

    async def peek_message(self, recipient_id: bytes) -> Message | None:
        """The oldest message, or None."""

    async def peek_messages(self, recipient_ids: Sequence[bytes]) -> list[Message | None]:
        """`peek_message` for every queue of a block, in one store call, in the order given."""

    async def delete_message(
        self, recipient_id: bytes, msg_id: bytes
    ) -> tuple[bool, Message | None]:
        """Delete the oldest message if its id is `msg_id`; returns (deleted, new oldest)."""

    async def delete_queue_messages(self, recipient_id: bytes) -> int:
        """Drop every message of the queue; returns how many."""

    async def queue_size(self, recipient_id: bytes) -> int:
        """Messages stored in the queue, the QUOTA marker included."""

    async def expire_messages(self, recipient_id: bytes, before_ts: int) -> int:
        """Delete the queue's messages older than `before_ts`; returns how many."""

    def queue_ids(self) -> AsyncIterator[bytes]:
        """Recipient ids of every queue that holds at least one message."""

    def iter_messages(self, recipient_id: bytes) -> AsyncIterator[Message]:
        """Every message of the queue, oldest first, the QUOTA marker included
        (for export and migration); nothing is removed."""

    async def close(self) -> None: ...
