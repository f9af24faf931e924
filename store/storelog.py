"""The store log: queue records in memory, every change appended to a text file.

Theory of operation. The file is a sequence of typed records, one per line
(`create`, `secure`, `add_notifier`, `delete_notifier`, `suspend`,
`set_service`, `delete`; see docs/store-log.md). The state is a pure fold over
them: `replay(records)` starts from no queues and applies `step` to each, and
`step` is the only code that ever changes the live table, so the router's
state is, at every moment, the replay of its own log.

A change is validated against the table, appended (write + flush to the OS),
applied, and then made as durable as the fsync policy says; validation, append
and apply run without a checkpoint, so concurrent tasks see changes atomically.

At every open the log is compacted: the current state, one `create` line per
queue, replaces the file through this sequence (each step is safe to crash in):

  1. write the snapshot to `queues.log.new` and fsync it;
  2. rename `queues.log` to the backup `queues.<UTC time>.log`;
  3. rename `queues.log.new` to `queues.log`;
  4. fsync the directory;
  5. delete the oldest backups beyond the newest `backups`.

Recovery at open: `.new` beside the log means step 1 did not finish (the log
is intact; `.new` is deleted); `.new` without the log means step 2 finished
and step 3 did not (`.new` is complete and fsynced; it is renamed into place).
"""

from __future__ import annotations

import base64
import os
import re
import time
import zlib
from array import array
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import trio

from router.protocol.types import AUTH, ErrorType

from ._logfile import (
    FsyncPolicy,
    GroupCommit,
    LogCorruptError,
    encode_line,
    fsync_dir,
    io_error,
    iter_log,
    line_payload,
    log,
    write_all,
    write_synced,
)
from .interfaces import (
    DUPLICATE,
    NotifierCreds,
    Party,
    QueueRecord,
    QueueStatus,
    StoreError,
)

__all__ = [
    "AddNotifier",
    "CreateQueue",
    "DeleteNotifier",
    "DeleteQueue",
    "FsyncPolicy",
    "LogCorruptError",
    "LogRecord",
    "QueueTable",
    "SecureQueue",
    "SetService",
    "StoreError",
    "StoreLogError",
    "StoreLogQueueStore",
    "SuspendQueue",
    "backups_of",
    "compact_file",
    "compact_records",
    "decode_record",
    "encode_record",
    "open_log",
    "iter_snapshot_lines",
    "open_store_log",
    "recover_files",
    "replay",
    "snapshot_lines",
    "step",
]


class StoreLogError(Exception):
    """The log's files are in a state no crash of ours can leave (e.g. the log is gone)."""


# --- typed records --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateQueue:
    record: QueueRecord  # the whole record; its updated_at is the time of the change


@dataclass(frozen=True, slots=True)
class SecureQueue:
    ts: int
    recipient_id: bytes
    sender_key: bytes


@dataclass(frozen=True, slots=True)
class AddNotifier:
    ts: int
    recipient_id: bytes
    notifier: NotifierCreds


@dataclass(frozen=True, slots=True)
class DeleteNotifier:
    ts: int
    recipient_id: bytes


@dataclass(frozen=True, slots=True)
class SuspendQueue:
    ts: int
    recipient_id: bytes


@dataclass(frozen=True, slots=True)
class SetService:
    ts: int
    recipient_id: bytes
    party: Party  # RECIPIENT or NOTIFIER
    service_id: bytes | None


@dataclass(frozen=True, slots=True)
class DeleteQueue:
    ts: int
    recipient_id: bytes


LogRecord = (
    CreateQueue
    | SecureQueue
    | AddNotifier
    | DeleteNotifier
    | SuspendQueue
    | SetService
    | DeleteQueue
)


def record_id(rec: LogRecord) -> bytes:
    return rec.record.recipient_id if isinstance(rec, CreateQueue) else rec.recipient_id


# --- the fold ----------------------------------------------------------------------


def step(old: QueueRecord | None, rec: LogRecord) -> QueueRecord | None:
    """The queue `record_id(rec)` after `rec`, given what it was (None: no queue).

    A change to a queue that does not exist leaves it absent; `create` replaces
    whatever was there. A log the store wrote never relies on either rule.
    """
    if isinstance(rec, CreateQueue):
        return rec.record
    if old is None or isinstance(rec, DeleteQueue):
        return None
    if isinstance(rec, SecureQueue):
        return replace(old, sender_key=rec.sender_key, updated_at=rec.ts)
    if isinstance(rec, AddNotifier):
        # A new notifier starts without a service: the old association was for the old id.
        return replace(old, notifier=rec.notifier, ntf_service_id=None, updated_at=rec.ts)
    if isinstance(rec, DeleteNotifier):
        return replace(old, notifier=None, ntf_service_id=None, updated_at=rec.ts)
    if isinstance(rec, SuspendQueue):
        return replace(old, status=QueueStatus.OFF, updated_at=rec.ts)
    if rec.party is Party.RECIPIENT:
        return replace(old, rcv_service_id=rec.service_id, updated_at=rec.ts)
    return replace(old, ntf_service_id=rec.service_id, updated_at=rec.ts)


class QueueTable:
    """Queue records by recipient id, with the reverse indexes lookups need.

    `apply` is the only mutator; the indexes are derived from the records, so
    they are updated by removing the old record's entries and adding the new's.
    """

    __slots__ = ("queues", "senders", "notifiers", "rcv_services", "ntf_services")

    def __init__(self) -> None:
        self.queues: dict[bytes, QueueRecord] = {}
        self.senders: dict[bytes, bytes] = {}  # sender id -> recipient id
        self.notifiers: dict[bytes, bytes] = {}  # notifier id -> recipient id
        self.rcv_services: dict[bytes, set[bytes]] = {}  # service id -> recipient ids
        self.ntf_services: dict[bytes, set[bytes]] = {}

    def apply(self, rec: LogRecord) -> None:
        rid = record_id(rec)
        old = self.queues.get(rid)
        new = step(old, rec)
        if old is not None:
            self._unindex(old)
            del self.queues[rid]
        if new is not None:
            self.queues[rid] = new
            self._index(new)

    def get(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        if party is Party.RECIPIENT:
            return self.queues.get(entity_id)
        rid = (self.senders if party is Party.SENDER else self.notifiers).get(entity_id)
        return None if rid is None else self.queues.get(rid)

    def _index(self, rec: QueueRecord) -> None:
        rid = rec.recipient_id
        self.senders[rec.sender_id] = rid
        _add(self.rcv_services, rec.rcv_service_id, rid)
        if rec.notifier is not None:
            self.notifiers[rec.notifier.notifier_id] = rid
            _add(self.ntf_services, rec.ntf_service_id, rid)

    def _unindex(self, rec: QueueRecord) -> None:
        rid = rec.recipient_id
        if self.senders.get(rec.sender_id) == rid:
            del self.senders[rec.sender_id]
        _discard(self.rcv_services, rec.rcv_service_id, rid)
        if rec.notifier is not None:
            if self.notifiers.get(rec.notifier.notifier_id) == rid:
                del self.notifiers[rec.notifier.notifier_id]
            _discard(self.ntf_services, rec.ntf_service_id, rid)


def _add(index: dict[bytes, set[bytes]], key: bytes | None, rid: bytes) -> None:
    if key is not None:
        index.setdefault(key, set()).add(rid)


def _discard(index: dict[bytes, set[bytes]], key: bytes | None, rid: bytes) -> None:
    rids = index.get(key) if key is not None else None
    if rids is not None:
        rids.discard(rid)
        if not rids:
            del index[key]


def replay(records: Iterable[LogRecord]) -> QueueTable:
    """The state a log describes: the fold of `step` over its records, from no queues."""
    table = QueueTable()
    for rec in records:
        table.apply(rec)
    return table


# --- the line format (docs/store-log.md) --------------------------------------------

E = TypeVar("E")
_INT = re.compile(r"-?[0-9]+")
_B64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_STATUS = {QueueStatus.ACTIVE: "active", QueueStatus.OFF: "off"}
_STATUS_BY_NAME = {v: k for k, v in _STATUS.items()}
_PARTY = {Party.RECIPIENT: "r", Party.NOTIFIER: "n"}
_PARTY_BY_NAME = {v: k for k, v in _PARTY.items()}
_FIELDS = {  # every field a record may have, in the order they are written
    "create": (
        "ts rid sid rkey rdh skey secure status nid nkey ndh rsvc nsvc",
        "ts rid sid rkey rdh secure status",
    ),
    "secure": ("ts rid skey", "ts rid skey"),
    "add_notifier": ("ts rid nid nkey ndh", "ts rid nid nkey ndh"),
    "delete_notifier": ("ts rid", "ts rid"),
    "suspend": ("ts rid", "ts rid"),
    "set_service": ("ts rid party svc", "ts rid party"),
    "delete": ("ts rid", "ts rid"),
}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    if not _B64.fullmatch(text) or len(text) % 4:
        raise ValueError(f"not padded base64url: {text[:20]!r}")
    return base64.b64decode(text, altchars=b"-_", validate=True)


def _create_fields(r: QueueRecord) -> list[tuple[str, str | None]]:
    n = r.notifier
    return [
        ("ts", str(r.updated_at)),
        ("rid", b64(r.recipient_id)),
        ("sid", b64(r.sender_id)),
        ("rkey", b64(r.recipient_key)),
        ("rdh", b64(r.rcv_dh_secret)),
        ("skey", None if r.sender_key is None else b64(r.sender_key)),
        ("secure", "1" if r.snd_secure else "0"),
        ("status", _STATUS[r.status]),
        ("nid", None if n is None else b64(n.notifier_id)),
        ("nkey", None if n is None else b64(n.notifier_key)),
        ("ndh", None if n is None else b64(n.rcv_ntf_dh_secret)),
        ("rsvc", None if r.rcv_service_id is None else b64(r.rcv_service_id)),
        ("nsvc", None if r.ntf_service_id is None else b64(r.ntf_service_id)),
    ]


def _fields(rec: LogRecord) -> tuple[str, list[tuple[str, str | None]]]:
    if isinstance(rec, CreateQueue):
        return "create", _create_fields(rec.record)
    head = [("ts", str(rec.ts)), ("rid", b64(rec.recipient_id))]
    if isinstance(rec, SecureQueue):
        return "secure", head + [("skey", b64(rec.sender_key))]
    if isinstance(rec, AddNotifier):
        n = rec.notifier
        return "add_notifier", head + [
            ("nid", b64(n.notifier_id)),
            ("nkey", b64(n.notifier_key)),
            ("ndh", b64(n.rcv_ntf_dh_secret)),
        ]
    if isinstance(rec, SetService):
        svc = None if rec.service_id is None else b64(rec.service_id)
        return "set_service", head + [("party", _PARTY[rec.party]), ("svc", svc)]
    names = {DeleteNotifier: "delete_notifier", SuspendQueue: "suspend", DeleteQueue: "delete"}
    return names[type(rec)], head


def encode_record(rec: LogRecord) -> str:
    """The payload of a record's line (without checksum and LF)."""
    op, fields = _fields(rec)
    return " ".join([op, *(f"{k}={v}" for k, v in fields if v is not None)])


def _split(payload: str) -> tuple[str, dict[str, str]]:
    op, *pairs = payload.split(" ")
    if op not in _FIELDS:
        raise ValueError(f"unknown record {op!r}")
    allowed, required = (set(s.split()) for s in _FIELDS[op])
    fields: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in allowed or key in fields:
            raise ValueError(f"bad field {key!r} in {op}")
        fields[key] = value
    if missing := required - fields.keys():
        raise ValueError(f"{op} lacks {', '.join(sorted(missing))}")
    return op, fields


def _int(text: str) -> int:
    if not _INT.fullmatch(text):
        raise ValueError(f"not an integer: {text[:20]!r}")
    return int(text)


def _opt(fields: dict[str, str], key: str) -> bytes | None:
    return unb64(fields[key]) if key in fields else None


def _enum(table: dict[str, E], text: str, what: str) -> E:
    if text not in table:
        raise ValueError(f"unknown {what} {text!r}")
    return table[text]


def _notifier(f: dict[str, str]) -> NotifierCreds | None:
    present = [k for k in ("nid", "nkey", "ndh") if k in f]
    if not present:
        return None
    if len(present) != 3:
        raise ValueError("a notifier needs nid, nkey and ndh")
    return NotifierCreds(unb64(f["nid"]), unb64(f["nkey"]), unb64(f["ndh"]))


def _decode_create(f: dict[str, str]) -> CreateQueue:
    if f["secure"] not in ("0", "1"):
        raise ValueError(f"secure must be 0 or 1, not {f['secure']!r}")
    return CreateQueue(
        QueueRecord(
            recipient_id=unb64(f["rid"]),
            sender_id=unb64(f["sid"]),
            recipient_key=unb64(f["rkey"]),
            rcv_dh_secret=unb64(f["rdh"]),
            sender_key=_opt(f, "skey"),
            snd_secure=f["secure"] == "1",
            status=_enum(_STATUS_BY_NAME, f["status"], "status"),
            notifier=_notifier(f),
            rcv_service_id=_opt(f, "rsvc"),
            ntf_service_id=_opt(f, "nsvc"),
            updated_at=_int(f["ts"]),
        )
    )


def decode_record(payload: str) -> LogRecord:
    """The record of a line's payload; ValueError if it is not one."""
    op, f = _split(payload)
    if op == "create":
        return _decode_create(f)
    ts, rid = _int(f["ts"]), unb64(f["rid"])
    if op == "secure":
        return SecureQueue(ts, rid, unb64(f["skey"]))
    if op == "add_notifier":
        notifier = _notifier(f)
        assert notifier is not None  # all three fields are required for add_notifier
        return AddNotifier(ts, rid, notifier)
    if op == "set_service":
        return SetService(ts, rid, _enum(_PARTY_BY_NAME, f["party"], "party"), _opt(f, "svc"))
    return {"delete_notifier": DeleteNotifier, "suspend": SuspendQueue, "delete": DeleteQueue}[op](
        ts, rid
    )


def snapshot_lines(table: QueueTable) -> list[str]:
    """The compacted log of a state: one `create` line per queue, sorted, without LF."""
    lines = (encode_line(encode_record(CreateQueue(r))) for r in table.queues.values())
    return sorted(line[:-1].decode("ascii") for line in lines)


def compact_records(lines: Iterable[str]) -> list[str]:
    """Compact a log given as its lines (checksum included, LF optional).

    The reference for any other compactor (the Spark pipeline): its output,
    sorted, must equal this list line for line. A line that fails its checksum
    or does not parse raises ValueError.
    """
    records = []
    for no, line in enumerate(lines, 1):
        payload = line_payload(line.rstrip("\n").encode("ascii"))
        if payload is None:
            raise ValueError(f"line {no}: checksum mismatch")
        records.append(decode_record(payload))
    return snapshot_lines(replay(records))


# --- files: recovery, compaction, backups -----------------------------------------------


def _new_path(path: Path) -> Path:
    return path.with_name(path.name + ".new")


def _backup_pattern(path: Path) -> re.Pattern[str]:
    stem, suffix = re.escape(path.stem), re.escape(path.suffix)
    return re.compile(rf"{stem}\.[0-9]{{8}}T[0-9]{{12}}Z{suffix}")


def backups_of(path: Path) -> list[Path]:
    """The log's backups, oldest first."""
    pattern = _backup_pattern(path)
    names = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    return sorted(names, key=lambda p: p.name)


def _backup_path(path: Path) -> Path:
    now = datetime.now(UTC)
    while True:
        candidate = path.with_name(f"{path.stem}.{now:%Y%m%dT%H%M%S%f}Z{path.suffix}")
        if not candidate.exists():
            return candidate
        now += timedelta(microseconds=1)  # two compactions within one microsecond: keep order


def recover_files(path: Path) -> None:
    """Finish or undo a compaction that a crash interrupted (see the module comment)."""
    new = _new_path(path)
    if path.exists():
        if new.exists():
            log.warning("%s: removing an unfinished compaction", new)
            new.unlink()
    elif new.exists():
        log.warning("%s: completing an interrupted compaction", path)
        os.replace(new, path)
        fsync_dir(path.parent)
    elif backups_of(path):
        raise StoreLogError(
            f"{path} is missing but backups of it exist; restore the newest backup "
            f"({backups_of(path)[-1].name}) as {path.name} to start"
        )


def compact_file(path: Path, lines: Iterable[str], backups: int) -> None:
    """Replace the log with `lines` through the numbered steps of the module comment."""
    new = _new_path(path)
    write_synced(new, (line.encode("ascii") + b"\n" for line in lines))  # 1
    os.rename(path, _backup_path(path))  # 2
    os.rename(new, path)  # 3
    fsync_dir(path.parent)  # 4
    prune_backups(path, backups)  # 5


def prune_backups(path: Path, keep: int) -> None:
    old = backups_of(path)
    for backup in old[: max(0, len(old) - keep)]:
        backup.unlink()


def open_log(path: Path, *, backups: int, skip_corrupt: bool) -> QueueTable:
    """Recover, read and compact the log at `path` (blocking); returns its state.

    Streams: the log is read a chunk at a time and folded as it is read, and
    the snapshot is written one line at a time, so the memory this takes is
    that of the live queues, whatever the length of the log.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_files(path)
    if not path.exists():
        write_synced(path, ())
        fsync_dir(path.parent)
        return QueueTable()
    table, compacted = _replay_file(path, skip_corrupt)
    if compacted and len(table.queues) == compacted:
        prune_backups(path, backups)  # the log is already its own snapshot
    else:
        compact_file(path, iter_snapshot_lines(table), backups)
    return table


def _replay_file(path: Path, skip_corrupt: bool) -> tuple[QueueTable, int]:
    """The log's state, and its line count if the log is exactly a snapshot (else 0).

    A log is its own snapshot when every line is a `create` in canonical form
    (what `encode_record` writes), in strictly increasing order, and no two
    create the same queue (the caller compares the count with the table's).
    Checking that while reading spares a second pass over the file.
    """
    table = QueueTable()
    canonical = True
    previous = b""
    count = 0
    for rec, line in iter_log(path, decode_record, skip_corrupt=skip_corrupt):
        if rec is None:  # a skipped corrupt line: the log must be rewritten
            canonical = False
            continue
        if canonical:
            canonical = (
                isinstance(rec, CreateQueue)
                and line > previous
                and encode_line(encode_record(rec))[:-1] == line
            )
            previous = line
        table.apply(rec)
        count += 1
    return table, count if canonical else 0


def iter_snapshot_lines(table: QueueTable) -> Iterator[str]:
    """`snapshot_lines(table)` one line at a time: the same lines in the same order.

    Sorting the lines themselves would hold the whole snapshot in memory. The
    lines start with their checksum in fixed-width lowercase hex, so they sort
    by checksum first; only the rare lines that share one are compared whole.
    """
    records = list(table.queues.values())
    crcs = array("L", map(_snapshot_crc, records))
    order = sorted(range(len(records)), key=crcs.__getitem__)
    i = 0
    while i < len(order):
        j = i + 1
        while j < len(order) and crcs[order[j]] == crcs[order[i]]:
            j += 1
        group = [_snapshot_line(records[k]) for k in order[i:j]]
        yield from sorted(group) if len(group) > 1 else group
        i = j


def _snapshot_line(record: QueueRecord) -> str:
    return encode_line(encode_record(CreateQueue(record)))[:-1].decode("ascii")


def _snapshot_crc(record: QueueRecord) -> int:
    return zlib.crc32(encode_record(CreateQueue(record)).encode("ascii"))


# --- the store -------------------------------------------------------------------------


class StoreLogQueueStore:
    """A QueueStore kept in memory and made durable by its append-only store log."""

    def __init__(
        self,
        path: Path,
        table: QueueTable,
        fd: int,
        *,
        fsync: FsyncPolicy,
        window: float,
        clock: Callable[[], float],
    ) -> None:
        self._path = path
        self._table = table
        self._fd = fd
        self._size = os.fstat(fd).st_size
        self._policy = fsync
        self._clock = clock
        self._closed = False
        self._group = GroupCommit(self._fsync, window if fsync is FsyncPolicy.BATCH else 0.0)

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        fsync: FsyncPolicy | str = FsyncPolicy.BATCH,
        backups: int = 5,
        skip_corrupt: bool = False,
        window: float = 0.002,
        clock: Callable[[], float] = time.time,
    ) -> StoreLogQueueStore:
        """Recover and compact the log at `path` (created if missing) and open it for appends.

        Raises LogCorruptError for a corrupt line before the last one (unless
        `skip_corrupt`) and StoreLogError for files no crash can leave.
        """
        path = Path(path)
        table = await trio.to_thread.run_sync(
            lambda: open_log(path, backups=backups, skip_corrupt=skip_corrupt)
        )
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        return cls(path, table, fd, fsync=FsyncPolicy(fsync), window=window, clock=clock)

    # --- QueueStore -----------------------------------------------------------------

    async def add_queue(self, record: QueueRecord) -> ErrorType | None:
        t = self._table
        nid = record.notifier.notifier_id if record.notifier else None
        if (
            record.recipient_id in t.queues
            or record.sender_id in t.senders
            or (nid is not None and nid in t.notifiers)
        ):
            return DUPLICATE
        await self._change(CreateQueue(record))
        return None

    async def get_queue(self, party: Party, entity_id: bytes) -> QueueRecord | None:
        return self._table.get(party, entity_id)

    async def secure_queue(self, recipient_id: bytes, sender_key: bytes) -> ErrorType | None:
        rec = self._table.queues.get(recipient_id)
        if rec is None:
            return AUTH
        if rec.sender_key is not None:
            return None if rec.sender_key == sender_key else AUTH
        await self._change(SecureQueue(self._now(), recipient_id, sender_key))
        return None

    async def add_notifier(self, recipient_id: bytes, creds: NotifierCreds) -> ErrorType | None:
        if recipient_id not in self._table.queues:
            return AUTH
        if creds.notifier_id in self._table.notifiers:
            return DUPLICATE
        await self._change(AddNotifier(self._now(), recipient_id, creds))
        return None

    async def delete_notifier(self, recipient_id: bytes) -> NotifierCreds | None:
        rec = self._table.queues.get(recipient_id)
        if rec is None or rec.notifier is None:
            return None
        await self._change(DeleteNotifier(self._now(), recipient_id))
        return rec.notifier

    async def suspend_queue(self, recipient_id: bytes) -> ErrorType | None:
        rec = self._table.queues.get(recipient_id)
        if rec is None:
            return AUTH
        if rec.status is not QueueStatus.OFF:
            await self._change(SuspendQueue(self._now(), recipient_id))
        return None

    async def set_service(
        self, recipient_id: bytes, party: Party, service_id: bytes | None
    ) -> ErrorType | None:
        if party not in (Party.RECIPIENT, Party.NOTIFIER):
            raise ValueError(f"a service covers the recipient or notifier side, not {party}")
        rec = self._table.queues.get(recipient_id)
        if rec is None or (party is Party.NOTIFIER and rec.notifier is None):
            return AUTH
        await self._change(SetService(self._now(), recipient_id, party, service_id))
        return None

    async def service_queues(self, service_id: bytes, party: Party) -> list[QueueRecord]:
        t = self._table
        index = t.rcv_services if party is Party.RECIPIENT else t.ntf_services
        return [t.queues[rid] for rid in index.get(service_id, ())]

    async def delete_queue(self, recipient_id: bytes) -> QueueRecord | ErrorType:
        rec = self._table.queues.get(recipient_id)
        if rec is None:
            return AUTH
        await self._change(DeleteQueue(self._now(), recipient_id))
        return rec

    async def iter_queues(self) -> AsyncIterator[QueueRecord]:
        for rec in list(self._table.queues.values()):  # a snapshot: callers may await
            yield rec

    async def queue_count(self) -> int:
        return len(self._table.queues)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._policy is not FsyncPolicy.NEVER:
                await self._group.wait(hurry=True)  # covers every change made before
        finally:
            os.close(self._fd)

    # --- appending ---------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    def _now(self) -> int:
        return int(self._clock())

    async def _change(self, rec: LogRecord) -> None:
        """Append `rec`, apply it, then wait until it is as durable as the policy says.

        Nothing before the first await may checkpoint: the caller validated the
        change against the table and the table must not move under it.
        """
        if self._closed:
            raise trio.ClosedResourceError("the queue store is closed")
        line = encode_line(encode_record(rec))
        try:
            write_all(self._fd, line)
        except OSError as exc:
            self._cut_back()
            raise io_error(exc, f"appending to {self._path}") from exc
        self._size += len(line)
        self._table.apply(rec)
        if self._policy is not FsyncPolicy.NEVER:
            await self._group.wait()

    def _cut_back(self) -> None:
        """Remove a partly written line, so the log ends with the last whole change."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as exc:  # the next open drops the torn line instead
            log.error("%s: cannot remove a partly written line: %s", self._path, exc)

    async def _fsync(self) -> None:
        try:
            await trio.to_thread.run_sync(os.fsync, self._fd)
        except OSError as exc:
            # The change stays applied: the OS holds it and a later fsync may
            # still make it durable; the caller learns that this one did not.
            raise io_error(exc, f"fsync of {self._path}") from exc


@asynccontextmanager
async def open_store_log(path: Path | str, **options: Any) -> AsyncIterator[StoreLogQueueStore]:
    """`StoreLogQueueStore.open(path, **options)`, closed on exit."""
    store = await StoreLogQueueStore.open(path, **options)
    try:
        yield store
    finally:
        await store.close()
