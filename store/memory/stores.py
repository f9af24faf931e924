"""In-memory queue and message stores, the default for tests and benchmarks.

Both stores sit on the router's hot path and hold 100k+ queues, so they keep
only flat dicts: queue records in a `QueueTable` (store/queue_table.py: keyed
by recipient id, with sender, notifier and service indexes), and one `deque`
of messages per queue that holds at least one message. An empty queue has no
entry in the message store at all.

No method awaits anything: every operation runs to completion without a
checkpoint, which makes each one atomic with respect to other Trio tasks.

Quota (docs/protocol.md#behaviour): the QUOTA marker is always the tail of its queue once
written, and nothing is appended after it, so "refuse writes until the queue
is empty" needs no extra state: a queue refuses while its tail is the marker.

`save(path)` / `load(path)` write and read a versioned snapshot file so that a
router on memory stores can keep its queues and undelivered messages across a
clean restart. The file is written atomically (`atomic_write`: temporary file,
fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import itertools
import struct
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from router.protocol.types import ErrorType

from ..durability import DiskReserve, atomic_write, io_error
from ..interfaces import (
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    ServiceRecord,
    WriteResult,
)
from ..queue_table import CreateQueue, LogRecord, QueueTable, TableQueueStore, decide_create

# What a message costs in memory besides its body and flags: the record (72 B),
# its id (57 B), its time (32 B), the body's and flags' bytes objects (33 B each)
# and its slot in the deque, rounded up; and what a queue holding messages costs
# besides them: its deque (about 630 B at first) and its key and slot in the
# dict. Checked against tracemalloc in tests/store/test_memory_cap.py.
MESSAGE_OVERHEAD = 240
QUEUE_COST = 768


def message_cost(message: Message) -> int:
    """What one stored message costs in memory, in bytes (what `max_bytes` caps)."""
    return MESSAGE_OVERHEAD + len(message.body) + len(message.flags)


# Room a queue record may take in the snapshot: its ids, keys, notifier and
# service ids with their length fields come to about 400 bytes.
RECORD_SNAPSHOT_BOUND = 1024
SNAPSHOT_MARGIN = 64 * 1024  # the files' heads and end marks, and the markers


class SaveReserve:
    """Room on disk for the snapshot the stores write at stop, reserved before a
    change is answered: a full disk refuses the SEND or NEW (ERR STORE) instead of
    losing everything at the save (docs/stores.md, "A full disk").

    A message takes less room in the snapshot than `message_cost` counts it in
    memory, so the stores' accounted memory bounds the snapshot. The reserve's
    file also tells the next start that this run has not saved yet.
    """

    __slots__ = ("file", "_queues", "_messages")

    def __init__(self, path: Path, queues: MemoryQueueStore, messages: MemoryMessageStore):
        self.file = DiskReserve(path)
        self._queues = queues
        self._messages = messages

    def needed(self) -> int:
        return (self._messages.stored_bytes() + SNAPSHOT_MARGIN
                + self._queues.queue_count_nowait() * RECORD_SNAPSHOT_BOUND)

    def room_for(self, extra: int) -> None:
        """Room for the stores' snapshot after `extra` more bytes; StoreError if not."""
        needed = self.needed() + extra
        if needed > self.file.size:
            try:
                self.file.ensure(needed)
            except OSError as e:
                raise io_error(e, f"reserving room for the snapshot in {self.file.path}") from e


_STORED_INTO_EMPTY = WriteResult.STORED_INTO_EMPTY
_STORED = WriteResult.STORED
_QUOTA_EXCEEDED = WriteResult.QUOTA_EXCEEDED
_STORE_FULL = WriteResult.STORE_FULL


class MemoryQueueStore(TableQueueStore):
    """Queue records in a `QueueTable`; a change is applied as soon as the rules allow it.

    With a `reserve` (a data directory), a queue is created only once the room
    its record takes in the snapshot is reserved on disk (`SaveReserve`).
    """

    __slots__ = ("_table", "_clock", "reserve")

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._table = QueueTable()
        self._clock = clock  # stamps updated_at on every change
        self.reserve: SaveReserve | None = None

    async def close(self) -> None:
        return None

    def _record(self, change: LogRecord) -> None:
        if self.reserve is not None and isinstance(change, CreateQueue):
            self.reserve.room_for(RECORD_SNAPSHOT_BOUND)

    def queue_count_nowait(self) -> int:
        return len(self._table.queues)

    # --- synchronous helpers (no checkpoint; also used by save/load) -------

    def add_queue_nowait(
        self, record: QueueRecord, link: QueueLinkData | None = None
    ) -> ErrorType | None:
        decision = decide_create(self._table, record, link)
        if isinstance(decision, ErrorType):
            return decision
        self._table.apply(decision)
        return None

    def get_queue_nowait(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        return self._table.get(party, entity_id)

    def records(self) -> Iterator[QueueRecord]:
        """Every record, without copying; do not change the store while iterating."""
        return self._table.records()

    def save(self, path: Path | str) -> int:
        """Write every queue record to `path` atomically; returns how many."""
        table = self._table
        services = () if table.services is None else table.services.by_id.values()
        items = itertools.chain(
            (_SERVICE_ITEM + item for item in _encode_services(services)),
            (_QUEUE_ITEM + item for item in _encode_records(table.records(), table.links)),
        )
        return write_snapshot(path, _QUEUES_MAGIC, items)

    @classmethod
    def load(cls, path: Path | str, *, clock: Callable[[], float] = time.time) -> MemoryQueueStore:
        """A store holding the records of a snapshot written by `save`."""
        store = cls(clock=clock)
        magic = _magic_of(path)
        if magic not in (_QUEUES_MAGIC_V1, _QUEUES_MAGIC_V2):
            magic = _QUEUES_MAGIC
        services = store._table.services
        assert services is not None
        # A service's id is the same for its queues: one object for all of them, not a
        # copy in each record (bench/RESULTS.md, "A service's queues: one SUBS against
        # SUBs in blocks").
        service_ids: dict[bytes, bytes] = {}
        for rd in read_snapshot(path, magic):
            kind = rd.byte() if magic == _QUEUES_MAGIC else _QUEUE_ITEM[0]
            if kind == _SERVICE_ITEM[0]:
                services.add(_decode_service(rd))
                continue
            if kind != _QUEUE_ITEM[0]:
                raise SnapshotError(f"{path}: unknown item kind {kind}")
            rec, link = _decode_record(rd, magic, service_ids)
            if store.add_queue_nowait(rec, link) is not None:
                raise SnapshotError(f"{path}: duplicate queue ids in snapshot")
        return store


class MemoryMessageStore:
    """One deque per non-empty queue; the deque's tail may be the QUOTA marker.

    `max_bytes` caps what the messages held cost in memory (`message_cost`: the
    record, its id, time and body, and each non-empty queue's deque): a write
    that would pass it is refused with STORE_FULL (nothing is dropped to make
    room); None: no cap. Bodies alone would let empty messages pass the cap
    for ever.
    """

    __slots__ = ("_queues", "_bytes", "max_bytes", "reserve")

    def __init__(self, *, max_bytes: int | None = None) -> None:
        self._queues: dict[bytes, deque[Message]] = {}
        self._bytes = 0  # what every message held costs in memory (message_cost)
        self.max_bytes = max_bytes
        # With a data directory: a message is stored only once its room in the
        # snapshot is reserved on disk (SaveReserve), so the save at stop fits.
        self.reserve: SaveReserve | None = None

    # --- MessageStore -----------------------------------------------------

    async def write_message(self, recipient_id: bytes, message: Message, quota: int) -> WriteResult:
        return self.write_message_nowait(recipient_id, message, quota)

    async def peek_message(self, recipient_id: bytes) -> Message | None:
        q = self._queues.get(recipient_id)
        return q[0] if q else None

    async def peek_messages(self, recipient_ids: Sequence[bytes]) -> list[Message | None]:
        queues = self._queues
        return [q[0] if (q := queues.get(rid)) else None for rid in recipient_ids]

    async def delete_message(
        self, recipient_id: bytes, msg_id: bytes
    ) -> tuple[bool, Message | None]:
        q = self._queues.get(recipient_id)
        if q is None:
            return False, None
        if q[0].msg_id != msg_id:
            return False, q[0]
        self._bytes -= message_cost(q.popleft())
        if q:
            return True, q[0]
        del self._queues[recipient_id]
        self._bytes -= QUEUE_COST
        return True, None

    async def delete_queue_messages(self, recipient_id: bytes) -> int:
        q = self._queues.pop(recipient_id, None)
        if q is None:
            return 0
        self._bytes -= sum(map(message_cost, q)) + QUEUE_COST
        return len(q)

    async def queue_size(self, recipient_id: bytes) -> int:
        q = self._queues.get(recipient_id)
        return 0 if q is None else len(q)

    async def expire_messages(self, recipient_id: bytes, before_ts: int) -> int:
        q = self._queues.get(recipient_id)
        if q is None:
            return 0
        n = 0
        while q and q[0].ts < before_ts:
            self._bytes -= message_cost(q.popleft())
            n += 1
        if not q:
            del self._queues[recipient_id]
            self._bytes -= QUEUE_COST
        return n

    async def queue_ids(self) -> AsyncIterator[bytes]:
        for rid in list(self._queues):
            yield rid

    async def iter_messages(self, recipient_id: bytes) -> AsyncIterator[Message]:
        for m in list(self._queues.get(recipient_id, ())):
            yield m

    async def close(self) -> None:
        return None

    # --- synchronous helpers ------------------------------------------------

    def write_message_nowait(
        self, recipient_id: bytes, message: Message, quota: int
    ) -> WriteResult:
        q = self._queues.get(recipient_id)
        size = message_cost(message) if q is not None else message_cost(message) + QUEUE_COST
        if self.max_bytes is not None and self._bytes + size > self.max_bytes and (
            q is None or (not q[-1].quota and len(q) < quota)
        ):
            return _STORE_FULL  # only when the message would be stored, not a QUOTA
        if self.reserve is not None and (q is None or (not q[-1].quota and len(q) < quota)):
            self.reserve.room_for(size)  # StoreError (ERR STORE) if the disk has no room
        if q is None:
            if quota > 0:
                self._queues[recipient_id] = deque((message,))
                self._bytes += size
                return _STORED_INTO_EMPTY
            q = self._queues[recipient_id] = deque()
            self._bytes += QUEUE_COST
        elif q[-1].quota:
            return _QUOTA_EXCEEDED
        elif len(q) < quota:
            q.append(message)
            self._bytes += size
            return _STORED
        marker = Message(message.msg_id, message.ts, b"", b"", True)
        q.append(marker)
        self._bytes += message_cost(marker)  # one per queue at most: never refused
        return _QUOTA_EXCEEDED

    def messages(self, recipient_id: bytes) -> list[Message]:
        """The queue's messages, oldest first (the marker included)."""
        return list(self._queues.get(recipient_id, ()))

    def stored_bytes(self) -> int:
        """What every message held costs in memory (what `max_bytes` caps)."""
        return self._bytes

    def message_count(self) -> int:
        """Messages (and markers) stored across every queue."""
        return sum(map(len, self._queues.values()))

    def save(self, path: Path | str) -> int:
        """Write every undelivered message to `path` atomically; returns how many."""
        return write_snapshot(path, _MESSAGES_MAGIC, _encode_messages(self._queues))

    @classmethod
    def load(cls, path: Path | str) -> MemoryMessageStore:
        """A store holding the messages of a snapshot written by `save`."""
        store = cls()
        queues = store._queues
        for rid, msg in _decode_messages(read_snapshot(path, _MESSAGES_MAGIC)):
            q = queues.get(rid)
            if q is None:
                queues[rid] = deque((msg,))
                store._bytes += QUEUE_COST
            else:
                q.append(msg)
            store._bytes += message_cost(msg)
        return store


# --- snapshot files -----------------------------------------------------------
#
# Layout: magic (8 bytes, ends with the format version) | items | end mark |
# crc32 of everything before it (4 bytes). Each item is a tag byte followed by
# fields; a byte string is a u32 length and the bytes (0xFFFFFFFF = None).

# v3: each item starts with its kind (a queue, a service identity:
# docs/protocol.md#services), and a queue ends with its recipient keys after the first (RKEY)
_QUEUES_MAGIC = b"SMPQUEv3"
_QUEUES_MAGIC_V2 = b"SMPQUEv2"  # still read: v2 added the queue mode and the link (v15)
_QUEUES_MAGIC_V1 = b"SMPQUEv1"  # still read: a snapshot written before links
_QUEUE_ITEM = b"\x00"
_SERVICE_ITEM = b"\x01"
_MESSAGES_MAGIC = b"SMPMSGv1"
_ITEM = b"\x01"
_END = b"\x00"
_NONE = 0xFFFFFFFF
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_CHUNK = 1 << 16


class SnapshotError(Exception):
    """A snapshot file is truncated, corrupt or of an unknown format."""


def write_snapshot(path: Path | str, magic: bytes, items: Iterable[bytes]) -> int:
    """Write magic, items, end mark and crc to `path` atomically; returns the item count."""
    count = [0]
    atomic_write(path, _snapshot_chunks(magic, items, count))
    return count[0]


def _snapshot_chunks(magic: bytes, items: Iterable[bytes], count: list[int]) -> Iterator[bytes]:
    crc = zlib.crc32(magic)
    yield magic
    for item in items:
        chunk = _ITEM + item
        crc = zlib.crc32(chunk, crc)
        count[0] += 1
        yield chunk
    yield _END + _U32.pack(zlib.crc32(_END, crc))


def _magic_of(path: Path | str) -> bytes:
    with open(path, "rb") as f:
        return f.read(len(_QUEUES_MAGIC))


def read_snapshot(path: Path | str, magic: bytes) -> Iterator[_Reader]:
    """Check the file's magic and crc, then yield a reader positioned at each item in turn.

    The file is read twice (checksum, then parse) rather than held in memory:
    a message snapshot can be as large as every undelivered message.
    """
    path = Path(path)
    size = path.stat().st_size
    if size < len(magic) + 5:
        raise SnapshotError(f"{path}: too short to be a snapshot")
    with open(path, "rb") as f:
        if f.read(len(magic)) != magic:
            raise SnapshotError(f"{path}: not a snapshot of this kind and version")
        f.seek(0)
        crc, left = 0, size - 4
        while left:
            chunk = f.read(min(_CHUNK, left))
            crc, left = zlib.crc32(chunk, crc), left - len(chunk)
        if _U32.unpack(f.read(4))[0] != crc:
            raise SnapshotError(f"{path}: checksum mismatch (truncated or corrupt)")
    return _items(path, len(magic), size - 4)


def _items(path: Path, start: int, end: int) -> Iterator[_Reader]:
    with open(path, "rb", buffering=_CHUNK) as f:
        f.seek(start)
        reader = _Reader(f)
        while True:
            tag = reader.byte()
            if tag == 0:
                if f.tell() != end:
                    raise SnapshotError(f"{path}: data after the end mark")
                return
            if tag != 1:
                raise SnapshotError(f"{path}: unknown item tag {tag}")
            yield reader


class _Reader:
    __slots__ = ("_f",)

    def __init__(self, f: BinaryIO) -> None:
        self._f = f

    def _exactly(self, n: int) -> bytes:
        data = self._f.read(n)
        if len(data) != n:
            raise SnapshotError("snapshot ends inside an item")
        return data

    def byte(self) -> int:
        return self._exactly(1)[0]

    def u32(self) -> int:
        return _U32.unpack(self._exactly(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self._exactly(8))[0]

    def opt_bytes(self) -> bytes | None:
        (n,) = _U32.unpack(self._exactly(4))
        return None if n == _NONE else self._exactly(n)

    def bytes_(self) -> bytes:
        v = self.opt_bytes()
        if v is None:
            raise SnapshotError("a required field is missing")
        return v


def _b(v: bytes | None) -> bytes:
    return _U32.pack(_NONE) if v is None else _U32.pack(len(v)) + v


_STATUS_CODES = {QueueStatus.ACTIVE: 0, QueueStatus.OFF: 1}
_STATUS_BY_CODE = {v: k for k, v in _STATUS_CODES.items()}


def _encode_records(
    records: Iterable[QueueRecord], links: dict[bytes, QueueLinkData]
) -> Iterator[bytes]:
    for r in records:
        n = r.notifier
        link = links.get(r.recipient_id) if r.link_id is not None else None
        yield b"".join(
            (
                _b(r.recipient_id),
                _b(r.sender_id),
                _b(r.recipient_key),
                _b(r.rcv_dh_secret),
                _b(r.sender_key),
                bytes((r.snd_secure, _STATUS_CODES[r.status], n is not None)),
                _b(n.notifier_id) + _b(n.notifier_key) + _b(n.rcv_ntf_dh_secret) if n else b"",
                _b(r.rcv_service_id),
                _b(r.ntf_service_id),
                _I64.pack(r.updated_at),
                _b(r.queue_mode),
                _b(link.link_id) + _b(link.fixed_data) + _b(link.user_data) if link else _b(None),
                _U32.pack(len(r.more_recipient_keys)),
                *(_b(k) for k in r.more_recipient_keys),
            )
        )


def _encode_services(services: Iterable[ServiceRecord]) -> Iterator[bytes]:
    for s in services:
        yield b"".join(
            (_b(s.service_id), _b(s.role), _b(s.cert), _b(s.cert_hash), _I64.pack(s.created_at))
        )


def _decode_service(rd: _Reader) -> ServiceRecord:
    return ServiceRecord(rd.bytes_(), rd.bytes_(), rd.bytes_(), rd.bytes_(), rd.i64())


def _decode_record(
    rd: _Reader, magic: bytes, service_ids: dict[bytes, bytes]
) -> tuple[QueueRecord, QueueLinkData | None]:
    rid, sid, rkey, rdh, skey = (
        rd.bytes_(),
        rd.bytes_(),
        rd.bytes_(),
        rd.bytes_(),
        rd.opt_bytes(),
    )
    snd_secure, status, has_ntf = rd.byte(), rd.byte(), rd.byte()
    notifier = NotifierCreds(rd.bytes_(), rd.bytes_(), rd.bytes_()) if has_ntf else None
    if status not in _STATUS_BY_CODE:
        raise SnapshotError(f"unknown queue status code {status}")
    rsvc, nsvc, updated_at = rd.opt_bytes(), rd.opt_bytes(), rd.i64()
    if rsvc is not None:
        rsvc = service_ids.setdefault(rsvc, rsvc)
    if nsvc is not None:
        nsvc = service_ids.setdefault(nsvc, nsvc)
    mode, link = None, None
    if magic != _QUEUES_MAGIC_V1:
        mode, link_id = rd.opt_bytes(), rd.opt_bytes()
        if link_id is not None:
            link = QueueLinkData(link_id, rd.bytes_(), rd.bytes_())
    more_keys: tuple[bytes, ...] = ()
    if magic == _QUEUES_MAGIC:
        more_keys = tuple(rd.bytes_() for _ in range(rd.u32()))
    record = QueueRecord(
        recipient_id=rid,
        sender_id=sid,
        recipient_key=rkey,
        rcv_dh_secret=rdh,
        sender_key=skey,
        snd_secure=bool(snd_secure),
        status=_STATUS_BY_CODE[status],
        notifier=notifier,
        rcv_service_id=rsvc,
        ntf_service_id=nsvc,
        updated_at=updated_at,
        queue_mode=mode,
        link_id=None if link is None else link.link_id,
        more_recipient_keys=more_keys,
    )
    return record, link


def _encode_messages(queues: dict[bytes, deque[Message]]) -> Iterator[bytes]:
    for rid, q in queues.items():
        head = _b(rid)
        for m in q:
            yield b"".join(
                (head, _b(m.msg_id), _I64.pack(m.ts), bytes((m.quota,)), _b(m.flags), _b(m.body))
            )


def _decode_messages(items: Iterator[_Reader]) -> Iterator[tuple[bytes, Message]]:
    for rd in items:
        rid, msg_id, ts, quota = rd.bytes_(), rd.bytes_(), rd.i64(), rd.byte()
        yield rid, Message(msg_id, ts, rd.bytes_(), rd.bytes_(), bool(quota))
