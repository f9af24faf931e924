"""The queue table every queue store shares: its changes, its fold and its rules.

A change to a queue is a typed record (`CreateQueue`, `SecureQueue`, ...);
`step` is the pure function that gives a queue after a change, and
`QueueTable.apply` the only code that changes a table of queues. The rules a
change must pass (DUPLICATE for a taken id, AUTH for a queue that is not
there, a sender key set once, a link's fixed data kept) are the `decide_*`
functions: each looks at the queue as it is and returns the change to make,
the error to answer, or None when there is nothing to do.

Every queue store uses the same three pieces: the memory store decides and
applies; the store log decides, appends the change to its file, then
applies; SQLite decides against its cached record, writes `step`'s result to
its row, and keeps its cache in a `QueueTable`.

A queue's short link (v15) is part of its state: the record carries its link
id (indexed like the sender id), and the table keeps the link itself beside
the record (`links`), because the router reads it only for LGET and LKEY. A
link comes with the queue (`CreateQueue.link`), is set or replaced by
`SetLink` and removed by `DeleteLink` or with its queue.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from sortedcontainers import SortedList

from router.protocol.ids_hash import id_digest, ids_hash_bytes
from router.protocol.types import AUTH, ErrorType

from .interfaces import (
    DUPLICATE,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    ServiceQueues,
    ServiceRecord,
)

# --- changes ----------------------------------------------------------------------
#
# Each change knows what it makes of its queue (`after`): a method of the
# change rather than one function testing its type, and plain (not frozen)
# dataclasses, because the memory store makes and applies one on every command
# and a frozen dataclass takes several times as long to make. Nothing changes
# a change once made.


@dataclass(slots=True)
class CreateQueue:
    record: QueueRecord  # the whole record; its updated_at is the time of the change
    link: QueueLinkData | None = None  # the queue's link (record.link_id is its id)

    sets_link: ClassVar[bool] = True  # applied, it makes `link` the queue's link (None: none)

    @property
    def recipient_id(self) -> bytes:
        return self.record.recipient_id

    def after(self, old: QueueRecord | None) -> QueueRecord:
        return self.record  # whatever was there


class _Update(ABC):
    """A change to a queue that exists: a queue that is not there stays absent."""

    __slots__ = ()
    ts: int
    sets_link: ClassVar[bool] = False  # SetLink and DeleteLink: as CreateQueue's

    def after(self, old: QueueRecord | None) -> QueueRecord | None:
        return None if old is None else replace(old, updated_at=self.ts, **self.changed())

    @abstractmethod
    def changed(self) -> dict[str, Any]:
        """The fields of the queue record this change sets, besides updated_at."""


@dataclass(slots=True)
class SecureQueue(_Update):
    ts: int
    recipient_id: bytes
    sender_key: bytes

    def changed(self) -> dict[str, Any]:
        return {"sender_key": self.sender_key}


@dataclass(slots=True)
class AddNotifier(_Update):
    ts: int
    recipient_id: bytes
    notifier: NotifierCreds

    def changed(self) -> dict[str, Any]:
        # A new notifier starts without a service: the old association was for the old id.
        return {"notifier": self.notifier, "ntf_service_id": None}


@dataclass(slots=True)
class DeleteNotifier(_Update):
    ts: int
    recipient_id: bytes

    def changed(self) -> dict[str, Any]:
        return {"notifier": None, "ntf_service_id": None}


@dataclass(slots=True)
class SuspendQueue(_Update):
    ts: int
    recipient_id: bytes

    def changed(self) -> dict[str, Any]:
        return {"status": QueueStatus.OFF}


@dataclass(slots=True)
class SetService(_Update):
    ts: int
    recipient_id: bytes
    party: Party  # RECIPIENT or NOTIFIER
    service_id: bytes | None

    def changed(self) -> dict[str, Any]:
        side = "rcv_service_id" if self.party is Party.RECIPIENT else "ntf_service_id"
        return {side: self.service_id}

    def changes_anything(self, rec: QueueRecord | None) -> bool:
        if rec is None:
            return False
        side = rec.rcv_service_id if self.party is Party.RECIPIENT else rec.ntf_service_id
        return side != self.service_id


@dataclass(slots=True)
class SetLink(_Update):
    ts: int
    recipient_id: bytes
    link: QueueLinkData

    sets_link: ClassVar[bool] = True

    def changed(self) -> dict[str, Any]:
        return {"link_id": self.link.link_id}


@dataclass(slots=True)
class DeleteLink(_Update):
    ts: int
    recipient_id: bytes

    sets_link: ClassVar[bool] = True
    link: ClassVar[None] = None

    def changed(self) -> dict[str, Any]:
        return {"link_id": None}


@dataclass(slots=True)
class SetRecipientKeys(_Update):
    """RKEY (docs/protocol.md#rkey): the first key stays `recipient_key`."""

    ts: int
    recipient_id: bytes
    keys: tuple[bytes, ...]  # at least one

    def changed(self) -> dict[str, Any]:
        return {"recipient_key": self.keys[0], "more_recipient_keys": tuple(self.keys[1:])}


@dataclass(slots=True)
class DeleteQueue:
    ts: int
    recipient_id: bytes

    def after(self, old: QueueRecord | None) -> None:
        return None


@dataclass(slots=True)
class AddService:
    """A service identity stored (docs/protocol.md#services): not a change to a queue."""

    service: ServiceRecord

    sets_link: ClassVar[bool] = False


LogRecord = (
    AddService
    | CreateQueue
    | SecureQueue
    | AddNotifier
    | DeleteNotifier
    | SuspendQueue
    | SetService
    | SetLink
    | DeleteLink
    | SetRecipientKeys
    | DeleteQueue
)


def step(old: QueueRecord | None, rec: LogRecord) -> QueueRecord | None:
    """The queue `rec.recipient_id` after `rec`, given what it was (None: no queue).

    A change to a queue that does not exist leaves it absent; `create` replaces
    whatever was there. A log the store wrote never relies on either rule.
    """
    return rec.after(old)


# --- service associations, kept as counts and ids hashes ---------------------------------


def service_sides(rec: QueueRecord | None) -> set[tuple[Party, bytes, bytes]]:
    """(side, service id, the id that side hashes) of each associated side of a queue:
    the recipient id for the recipient side, the notifier id for the notifier's."""
    sides: set[tuple[Party, bytes, bytes]] = set()
    if rec is None:
        return sides
    if rec.rcv_service_id is not None:
        sides.add((Party.RECIPIENT, rec.rcv_service_id, rec.recipient_id))
    if rec.notifier is not None and rec.ntf_service_id is not None:
        sides.add((Party.NOTIFIER, rec.ntf_service_id, rec.notifier.notifier_id))
    return sides


def service_changes(
    old: QueueRecord | None, new: QueueRecord | None
) -> list[tuple[Party, bytes, int, int]]:
    """What a change of a queue from `old` to `new` does to the services' figures:
    (side, service id, count delta, digest to XOR into its ids hash)."""
    before, after = service_sides(old), service_sides(new)
    if before == after:
        return []
    return [
        *((party, sid, -1, id_digest(qid)) for party, sid, qid in before - after),
        *((party, sid, 1, id_digest(qid)) for party, sid, qid in after - before),
    ]


class ServiceTable:
    """Service records by id and by (role, certificate hash), and the count and ids
    hash of every service's queues on each side, changed by one step per association."""

    __slots__ = ("by_id", "by_cert", "_figures")

    def __init__(self) -> None:
        self.by_id: dict[bytes, ServiceRecord] = {}
        self.by_cert: dict[tuple[bytes, bytes], ServiceRecord] = {}
        self._figures: dict[tuple[Party, bytes], list[int]] = {}  # [count, ids hash]

    def add(self, service: ServiceRecord) -> None:
        self.by_id[service.service_id] = service
        self.by_cert[(service.role, service.cert_hash)] = service

    def find(self, role: bytes, cert_hash: bytes) -> ServiceRecord | None:
        return self.by_cert.get((role, cert_hash))

    def change(self, party: Party, service_id: bytes, delta: int, digest: int) -> None:
        key = (party, service_id)
        figures = self._figures.get(key)
        if figures is None:
            figures = self._figures[key] = [0, 0]
        figures[0] += delta
        figures[1] ^= digest
        if not figures[0]:
            del self._figures[key]

    def summary(self, service_id: bytes, party: Party) -> ServiceQueues:
        figures = self._figures.get((party, service_id))
        if figures is None:
            return ServiceQueues()
        return ServiceQueues(figures[0], ids_hash_bytes(figures[1]))


# --- the table ---------------------------------------------------------------------


class QueueTable:
    """Queue records by recipient id, with the reverse indexes lookups need.

    `apply` changes it by a record of the log; `put` and `drop` set or remove a
    whole record (a cache that loads records from elsewhere). The indexes are
    derived from the records: a change removes the old record's entries and
    adds the new's. `queues` may be any mapping (SQLite passes an OrderedDict
    to keep its records in the order they were used). `links` holds the link
    of every queue that has one, when the table holds links at all: `apply`
    keeps it, `put` (SQLite's cache, which leaves links in the database) does not.
    """

    __slots__ = (
        "queues",
        "senders",
        "notifiers",
        "link_ids",
        "links",
        "rcv_services",
        "ntf_services",
        "services",
    )

    def __init__(
        self,
        queues: MutableMapping[bytes, QueueRecord] | None = None,
        *,
        services: bool = True,
    ) -> None:
        self.queues: MutableMapping[bytes, QueueRecord] = {} if queues is None else queues
        self.senders: dict[bytes, bytes] = {}  # sender id -> recipient id
        self.notifiers: dict[bytes, bytes] = {}  # notifier id -> recipient id
        self.link_ids: dict[bytes, bytes] = {}  # link id -> recipient id
        self.links: dict[bytes, QueueLinkData] = {}  # recipient id -> its link
        # service id -> the ids its figures hash, sorted for a walk by pages
        # (`service_page`): recipient ids, notifier ids
        self.rcv_services: dict[bytes, SortedList] = {}
        self.ntf_services: dict[bytes, SortedList] = {}
        # Service records and figures; None in a cache of some records (SQLite's),
        # whose figures could not be whole.
        self.services: ServiceTable | None = ServiceTable() if services else None

    def apply(self, rec: LogRecord) -> None:
        if type(rec) is AddService:
            assert self.services is not None
            self.services.add(rec.service)
            return
        rid = rec.recipient_id
        queues = self.queues
        old = queues.get(rid)
        new = rec.after(old)
        if new is not None and rec.sets_link:
            if rec.link is None:
                self.links.pop(rid, None)
            else:
                self.links[rid] = rec.link
        if old is not None and new is not None and _same_index(old, new):
            queues[rid] = new  # most changes leave every id and service as it was
            return
        if old is not None:
            del queues[rid]
            self._unindex(old)
            if new is None:
                self.links.pop(rid, None)
        if new is not None:
            queues[rid] = new
            self._index(new)

    def put(self, rec: QueueRecord) -> None:
        """Hold `rec` as its queue's record, replacing any record held for it."""
        self.drop(rec.recipient_id)
        self.queues[rec.recipient_id] = rec
        self._index(rec)

    def drop(self, rid: bytes) -> QueueRecord | None:
        """Stop holding the queue's record; returns it (None if none was held)."""
        old = self.queues.pop(rid, None)
        if old is not None:
            self._unindex(old)
            self.links.pop(rid, None)
        return old

    def get(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        if party is Party.RECIPIENT:
            return self.queues.get(entity_id)
        rid = self._ids_of(party).get(entity_id)
        return None if rid is None else self.queues.get(rid)

    def taken(self, party: Party, entity_id: bytes) -> bool:
        if party is Party.RECIPIENT:
            return entity_id in self.queues
        return entity_id in self._ids_of(party)

    def _ids_of(self, party: Party) -> dict[bytes, bytes]:
        if party is Party.SENDER:
            return self.senders
        return self.notifiers if party is Party.NOTIFIER else self.link_ids

    def service_page(
        self, service_id: bytes, party: Party, after: bytes | None, limit: int
    ) -> list[bytes]:
        index = self.rcv_services if party is Party.RECIPIENT else self.ntf_services
        ids = index.get(service_id)
        if ids is None:
            return []
        found = ids.irange(minimum=after, inclusive=(False, True))
        return list(itertools.islice(found, limit))

    def records(self) -> Iterator[QueueRecord]:
        return iter(self.queues.values())

    def _index(self, rec: QueueRecord) -> None:
        rid = rec.recipient_id
        self.senders[rec.sender_id] = rid
        if rec.link_id is not None:
            self.link_ids[rec.link_id] = rid
        _add(self.rcv_services, rec.rcv_service_id, rid)
        if rec.notifier is not None:
            self.notifiers[rec.notifier.notifier_id] = rid
            _add(self.ntf_services, rec.ntf_service_id, rec.notifier.notifier_id)
        if self.services is not None:
            self._count_services(rec, 1)

    def _unindex(self, rec: QueueRecord) -> None:
        rid = rec.recipient_id
        if self.senders.get(rec.sender_id) == rid:
            del self.senders[rec.sender_id]
        if rec.link_id is not None and self.link_ids.get(rec.link_id) == rid:
            del self.link_ids[rec.link_id]
        _discard(self.rcv_services, rec.rcv_service_id, rid)
        if rec.notifier is not None:
            if self.notifiers.get(rec.notifier.notifier_id) == rid:
                del self.notifiers[rec.notifier.notifier_id]
            _discard(self.ntf_services, rec.ntf_service_id, rec.notifier.notifier_id)
        if self.services is not None:
            self._count_services(rec, -1)

    def _count_services(self, rec: QueueRecord, delta: int) -> None:
        services = self.services
        assert services is not None
        if rec.rcv_service_id is not None:
            services.change(Party.RECIPIENT, rec.rcv_service_id, delta, id_digest(rec.recipient_id))
        if rec.notifier is not None and rec.ntf_service_id is not None:
            services.change(
                Party.NOTIFIER, rec.ntf_service_id, delta, id_digest(rec.notifier.notifier_id)
            )


def _same_index(old: QueueRecord, new: QueueRecord) -> bool:
    """The two records have the same entries in every index."""
    return (
        old.sender_id == new.sender_id
        and old.notifier is new.notifier
        and old.link_id == new.link_id
        and old.rcv_service_id == new.rcv_service_id
        and old.ntf_service_id == new.ntf_service_id
    )


def _add(index: dict[bytes, SortedList], key: bytes | None, entity_id: bytes) -> None:
    if key is not None:
        ids = index.get(key)
        if ids is None:
            index[key] = SortedList((entity_id,))
        else:
            ids.add(entity_id)


def _discard(index: dict[bytes, SortedList], key: bytes | None, entity_id: bytes) -> None:
    ids = index.get(key) if key is not None else None
    if ids is not None:
        ids.discard(entity_id)
        if not ids:
            del index[key]


def replay(records: Iterable[LogRecord]) -> QueueTable:
    """The state a log describes: the fold of `step` over its records, from no queues."""
    table = QueueTable()
    for rec in records:
        table.apply(rec)
    return table


# --- the rules ------------------------------------------------------------------------


class IdIndex(Protocol):
    """What the rules ask of a store: is this id of this party in use by a live queue?"""

    def taken(self, party: Party, entity_id: bytes) -> bool: ...


Decision = LogRecord | ErrorType | None  # the change to make, the answer, or nothing to do


def decide_create(
    ids: IdIndex, record: QueueRecord, link: QueueLinkData | None = None
) -> CreateQueue | ErrorType:
    check_link_id(record, link)
    notifier = record.notifier
    if (
        ids.taken(Party.RECIPIENT, record.recipient_id)
        or ids.taken(Party.SENDER, record.sender_id)
        or (notifier is not None and ids.taken(Party.NOTIFIER, notifier.notifier_id))
        or (link is not None and ids.taken(Party.LINK, link.link_id))
    ):
        return DUPLICATE
    return CreateQueue(record, link)


def check_link_id(record: QueueRecord, link: QueueLinkData | None) -> None:
    """A queue is stored with its link or without one, never half of it."""
    if record.link_id != (None if link is None else link.link_id):
        raise ValueError("a queue's link_id must be the id of the link stored with it")


def decide_secure(
    rec: QueueRecord | None, sender_key: bytes, now: int
) -> SecureQueue | ErrorType | None:
    """The sender key is set once; the same key again is fine, another is AUTH."""
    if rec is None:
        return AUTH
    if rec.sender_key is not None:
        return None if rec.sender_key == sender_key else AUTH
    return SecureQueue(now, rec.recipient_id, sender_key)


def decide_add_notifier(
    ids: IdIndex, rec: QueueRecord | None, creds: NotifierCreds, now: int
) -> AddNotifier | ErrorType:
    if rec is None:
        return AUTH
    if ids.taken(Party.NOTIFIER, creds.notifier_id):
        return DUPLICATE
    return AddNotifier(now, rec.recipient_id, creds)


def decide_delete_notifier(rec: QueueRecord | None, now: int) -> DeleteNotifier | None:
    if rec is None or rec.notifier is None:
        return None
    return DeleteNotifier(now, rec.recipient_id)


def decide_suspend(rec: QueueRecord | None, now: int) -> SuspendQueue | ErrorType | None:
    if rec is None:
        return AUTH
    return None if rec.status is QueueStatus.OFF else SuspendQueue(now, rec.recipient_id)


def decide_set_service(
    rec: QueueRecord | None, party: Party, service_id: bytes | None, now: int
) -> SetService | ErrorType:
    check_service_party(party)
    if rec is None or (party is Party.NOTIFIER and rec.notifier is None):
        return AUTH
    return SetService(now, rec.recipient_id, party, service_id)


def check_service_party(party: Party) -> None:
    if party not in (Party.RECIPIENT, Party.NOTIFIER):
        raise ValueError(f"a service covers the recipient or notifier side, not {party}")


def decide_set_link(
    ids: IdIndex,
    rec: QueueRecord | None,
    current: QueueLinkData | None,
    link: QueueLinkData,
    now: int,
) -> SetLink | ErrorType | None:
    """LSET: the fixed data of a link never changes; only its user data may be replaced.

    `current` is the queue's link as stored. A queue with a link accepts the
    same link id and fixed data (AUTH otherwise); a queue without one accepts
    a link id no other queue holds (AUTH otherwise).
    """
    if rec is None:
        return AUTH
    if current is not None:
        if current.link_id != link.link_id or current.fixed_data != link.fixed_data:
            return AUTH
        if current.user_data == link.user_data:
            return None
    elif ids.taken(Party.LINK, link.link_id):
        return AUTH
    return SetLink(now, rec.recipient_id, link)


def decide_delete_link(rec: QueueRecord | None, now: int) -> DeleteLink | ErrorType | None:
    if rec is None:
        return AUTH
    return None if rec.link_id is None else DeleteLink(now, rec.recipient_id)


def decide_set_recipient_keys(
    rec: QueueRecord | None, keys: tuple[bytes, ...], now: int
) -> SetRecipientKeys | ErrorType | None:
    check_recipient_keys(keys)
    if rec is None:
        return AUTH
    if rec.recipient_keys == tuple(keys):
        return None
    return SetRecipientKeys(now, rec.recipient_id, tuple(keys))


def check_recipient_keys(keys: tuple[bytes, ...]) -> None:
    if not keys:
        raise ValueError("a queue keeps at least one recipient key")


def decide_delete(rec: QueueRecord | None, now: int) -> DeleteQueue | ErrorType:
    return AUTH if rec is None else DeleteQueue(now, rec.recipient_id)


# --- a queue store over a table ---------------------------------------------------------


class TableQueueStore:
    """The QueueStore operations over a `QueueTable`, by the rules above.

    A change the rules allow is recorded (`_record`: nothing for the memory
    store, a line appended to the store log), applied to the table, and then,
    if the store has a `_durable` wait, made durable. Nothing from the rule's
    look at the table to the change itself may checkpoint, so the table
    cannot move in between.
    """

    __slots__ = ()

    _table: QueueTable
    _clock: Callable[[], float]
    _durable: Callable[[], Awaitable[None]] | None = None

    def _record(self, change: LogRecord) -> None:
        return None

    async def _make(self, decision: Decision) -> ErrorType | None:
        if decision is None or isinstance(decision, ErrorType):
            return decision
        self._record(decision)
        self._table.apply(decision)
        if self._durable is not None:
            await self._durable()
        return None

    def _now(self) -> int:
        return int(self._clock())

    def _queue(self, recipient_id: bytes) -> QueueRecord | None:
        return self._table.queues.get(recipient_id)

    async def add_queue(
        self, record: QueueRecord, link: QueueLinkData | None = None
    ) -> ErrorType | None:
        return await self._make(decide_create(self._table, record, link))

    async def get_queue(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        return self._table.get(party, entity_id)

    async def get_queues(
        self, party: Party, entity_ids: Sequence[bytes]
    ) -> list[QueueRecord | None]:
        get = self._table.get
        return [get(party, entity_id) for entity_id in entity_ids]

    async def secure_queue(self, recipient_id: bytes, sender_key: bytes) -> ErrorType | None:
        return await self._make(decide_secure(self._queue(recipient_id), sender_key, self._now()))

    async def add_notifier(self, recipient_id: bytes, creds: NotifierCreds) -> ErrorType | None:
        rec = self._queue(recipient_id)
        return await self._make(decide_add_notifier(self._table, rec, creds, self._now()))

    async def delete_notifier(self, recipient_id: bytes) -> NotifierCreds | None:
        rec = self._queue(recipient_id)
        await self._make(decide_delete_notifier(rec, self._now()))
        return None if rec is None else rec.notifier

    async def suspend_queue(self, recipient_id: bytes) -> ErrorType | None:
        return await self._make(decide_suspend(self._queue(recipient_id), self._now()))

    async def set_service(
        self, recipient_id: bytes, party: Party, service_id: bytes | None
    ) -> ErrorType | None:
        rec = self._queue(recipient_id)
        return await self._make(decide_set_service(rec, party, service_id, self._now()))

    async def service_queue_page(
        self, service_id: bytes, party: Party, after: bytes | None, limit: int
    ) -> list[bytes]:
        check_service_party(party)
        return self._table.service_page(service_id, party, after, limit)

    async def set_queues_service(
        self, recipient_ids: Sequence[bytes], party: Party, service_id: bytes | None
    ) -> list[ErrorType | None]:
        check_service_party(party)
        now, results, changed = self._now(), [], False
        for rid in recipient_ids:
            decision = decide_set_service(self._queue(rid), party, service_id, now)
            if isinstance(decision, ErrorType):
                results.append(decision)
                continue
            results.append(None)
            if not decision.changes_anything(self._queue(rid)):
                continue
            self._record(decision)
            self._table.apply(decision)
            changed = True
        if changed and self._durable is not None:
            await self._durable()  # one wait for the block's changes
        return results

    async def add_service(self, record: ServiceRecord) -> ServiceRecord:
        services = self._table.services
        assert services is not None
        stored = services.find(record.role, record.cert_hash)
        if stored is not None:
            return stored
        if record.service_id in services.by_id:
            raise ValueError("a service id is given once")
        await self._make(AddService(record))
        return record

    async def service_summary(self, service_id: bytes, party: Party) -> ServiceQueues:
        check_service_party(party)
        services = self._table.services
        assert services is not None
        return services.summary(service_id, party)

    async def iter_services(self) -> AsyncIterator[ServiceRecord]:
        services = self._table.services
        assert services is not None
        for record in list(services.by_id.values()):
            yield record

    async def get_link(self, recipient_id: bytes) -> QueueLinkData | None:
        return self._table.links.get(recipient_id)

    async def set_link(self, recipient_id: bytes, link: QueueLinkData) -> ErrorType | None:
        rec, current = self._queue(recipient_id), self._table.links.get(recipient_id)
        return await self._make(decide_set_link(self._table, rec, current, link, self._now()))

    async def delete_link(self, recipient_id: bytes) -> ErrorType | None:
        return await self._make(decide_delete_link(self._queue(recipient_id), self._now()))

    async def set_recipient_keys(
        self, recipient_id: bytes, keys: tuple[bytes, ...]
    ) -> ErrorType | None:
        rec = self._queue(recipient_id)
        return await self._make(decide_set_recipient_keys(rec, keys, self._now()))

    async def delete_queue(self, recipient_id: bytes) -> QueueRecord | ErrorType:
        rec = self._queue(recipient_id)
        error = await self._make(decide_delete(rec, self._now()))
        if rec is None or error is not None:
            return error or AUTH
        return rec

    async def iter_queues(self) -> AsyncIterator[QueueRecord]:
        # A snapshot, so callers may await (and other tasks may change the store) meanwhile.
        for rec in list(self._table.queues.values()):
            yield rec

    async def iter_links(self) -> AsyncIterator[tuple[bytes, QueueLinkData]]:
        for item in list(self._table.links.items()):
            yield item

    async def queue_count(self) -> int:
        return len(self._table.queues)
