"""The journal's files: message records, state lines, open-file LRU and recovery.

Formats: docs/store-log.md §3. The store itself, and the order in which it
writes and fsyncs these files, is in store/journal/messages.py.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..durability import atomic_write, write_all
from ..interfaces import Message
from .logfile import encode_line, log, read_log

# --- message records ---------------------------------------------------------------
#
# record  = u32 length of payload | u32 CRC-32 of payload | payload   (big endian)
# payload = kind ('M' message, 'Q' QUOTA marker) | u8 n | msg_id (n bytes) | i64 ts
#           | u16 m | flags (m bytes) | body (the rest)

_HEADER = struct.Struct(">II")
_META = struct.Struct(">qH")
_MAX_PAYLOAD = 1 << 24  # far above any SMP message: a larger length is damage
_KIND_MESSAGE, _KIND_QUOTA = ord("M"), ord("Q")


def encode_message(m: Message) -> bytes:
    """A message's record, header included."""
    payload = b"".join(
        (
            bytes((_KIND_QUOTA if m.quota else _KIND_MESSAGE, len(m.msg_id))),
            m.msg_id,
            _META.pack(m.ts, len(m.flags)),
            m.flags,
            m.body,
        )
    )
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _meta(payload: bytes) -> tuple[bool, bytes, int, int]:
    """(quota, msg_id, ts, offset of flags) of a payload; ValueError if malformed."""
    if len(payload) < 2 or payload[0] not in (_KIND_MESSAGE, _KIND_QUOTA):
        raise ValueError("unknown record kind")
    n = payload[1]
    if len(payload) < 2 + n + _META.size:
        raise ValueError("record too short")
    ts, m = _META.unpack_from(payload, 2 + n)
    start = 2 + n + _META.size
    if len(payload) < start + m:
        raise ValueError("flags run past the record")
    return payload[0] == _KIND_QUOTA, payload[2 : 2 + n], ts, start


def decode_message(record: bytes) -> Message:
    """The message of one whole record; ValueError if it is torn or corrupt."""
    if len(record) < _HEADER.size:
        raise ValueError("record too short")
    n, crc = _HEADER.unpack_from(record)
    payload = record[_HEADER.size :]
    if len(payload) != n or zlib.crc32(payload) != crc:
        raise ValueError("record checksum mismatch")
    quota, msg_id, ts, start = _meta(payload)
    m = _META.unpack_from(payload, start - _META.size)[1]
    return Message(msg_id, ts, payload[start : start + m], payload[start + m :], quota)


# --- positions and the state log ------------------------------------------------------

_INT = re.compile(r"[0-9]+")
_FILE = re.compile(r"([0-9a-f]+)\.([0-9]+)\.msgs")


@dataclass(frozen=True, slots=True, order=True)
class Pos:
    """A place in a queue's files: file number, byte offset, messages in that file before it."""

    seq: int
    offset: int
    count: int = field(default=0, compare=False)


_ORIGIN = Pos(0, 0, 0)


def state_line(rid: bytes, read: Pos, write: Pos) -> str:
    return f"{rid.hex()} {read.seq} {read.offset} {write.seq} {write.offset} {write.count}"


def parse_state_line(payload: str) -> tuple[bytes, tuple[Pos, Pos] | None]:
    """(recipient id, (read, write)) of a state line, or (id, None) for a forgotten queue."""
    parts = payload.split(" ")
    if not re.fullmatch(r"(?:[0-9a-f]{2})+", parts[0]):
        raise ValueError("bad queue id")
    rid = bytes.fromhex(parts[0])
    if parts[1:] == ["-"]:
        return rid, None
    if len(parts) != 6 or not all(_INT.fullmatch(p) for p in parts[1:]):
        raise ValueError("a state line has a queue id and five numbers")
    rs, ro, ws, wo, wc = map(int, parts[1:])
    read, write = Pos(rs, ro), Pos(ws, wo, wc)
    if read > write:
        raise ValueError("read position after write position")
    return rid, (read, write)


# --- in-memory state ---------------------------------------------------------------------


class Handle:
    __slots__ = ("fd", "pins", "doomed")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0  # writes waiting for an fsync of this file
        self.doomed = False  # close once unpinned


@dataclass(slots=True, eq=False)
class Entry:
    queue: QueueFiles
    seq: int
    offset: int
    size: int
    end: Pos  # the write position just after this record
    msg_id: bytes
    ts: int
    quota: bool
    handle: Handle | None = None  # pinned until its commit round ends
    failed: bool = False  # rolled back: its writer gets StoreError
    discarded: bool = False  # its queue was emptied before the commit: nothing to record


class QueueFiles:
    """One queue's messages: `entries[:visible]` committed, the rest pending."""

    __slots__ = ("rid", "entries", "visible", "write", "logged", "committed", "first_seq", "head")

    def __init__(self, rid: bytes, write: Pos = _ORIGIN, first_seq: int = 0) -> None:
        self.rid = rid
        self.entries: deque[Entry] = deque()
        self.visible = 0
        self.write = write  # where the next record goes (pending writes included)
        self.logged = write  # the write position in the queue's latest state line
        self.committed = write  # the write position that is durable and visible
        self.first_seq = first_seq  # the oldest file of the queue that may exist
        self.head: Message | None = None  # entries[0], read from disk once

    def read_pos(self) -> Pos:
        if self.visible:
            e = self.entries[0]
            return Pos(e.seq, e.offset)
        return self.committed


class Handles:
    """An LRU of open message files; pinned handles are never evicted."""

    def __init__(self, directory: Path, limit: int) -> None:
        self._dir = directory
        self._limit = limit
        self._open: OrderedDict[tuple[bytes, int], Handle] = OrderedDict()
        self.evicted: list[tuple[bytes, int]] = []  # for the store to forget idle empty queues

    def path(self, rid: bytes, seq: int) -> Path:
        return self._dir / f"{rid.hex()}.{seq}.msgs"

    def get(self, rid: bytes, seq: int, *, create: bool, empty: bool = False) -> Handle:
        """The file's handle; `create` makes the file, `empty` also cuts it to nothing."""
        key = (rid, seq)
        h = self._open.get(key)
        if h is not None:
            self._open.move_to_end(key)
            return h
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        if empty:
            flags |= os.O_TRUNC  # a fresh file must not carry anything left from before
        h = self._open[key] = Handle(os.open(self.path(rid, seq), flags, 0o600))
        self._evict()
        return h

    def open_count(self) -> int:
        return len(self._open)

    def is_open(self, rid: bytes, seq: int) -> bool:
        return (rid, seq) in self._open

    def _evict(self) -> None:
        excess = len(self._open) - self._limit
        if excess <= 0:
            return
        victims = []
        for key, h in self._open.items():
            if not h.pins:
                victims.append(key)
                if len(victims) == excess:
                    break
        for key in victims:
            self.release(self._open.pop(key))
            self.evicted.append(key)

    def drop(self, rid: bytes, seq: int) -> None:
        h = self._open.pop((rid, seq), None)
        if h is not None:
            self.release(h)

    @staticmethod
    def release(h: Handle) -> None:
        if h.pins:
            h.doomed = True
        else:
            os.close(h.fd)

    @staticmethod
    def unpin(h: Handle) -> None:
        h.pins -= 1
        if not h.pins and h.doomed:
            os.close(h.fd)

    def close_all(self) -> None:
        for h in self._open.values():
            self.release(h)
        self._open.clear()


# --- recovery (blocking; runs on a worker thread at open) ------------------------------


@dataclass(slots=True)
class Scanned:
    offset: int
    size: int
    msg_id: bytes
    ts: int
    quota: bool


def scan_file(path: Path, start: int, limit: int | None) -> tuple[int, list[Scanned]]:
    """The whole records of `path` from `start` up to `limit` (None: the end of the file).

    Returns where the last good record ends and the records; stops at the
    first record that is incomplete, fails its CRC or does not parse.
    """
    out: list[Scanned] = []
    with open(path, "rb", buffering=1 << 16) as f:
        size = os.fstat(f.fileno()).st_size
        end = size if limit is None else min(limit, size)
        off = min(start, end)
        f.seek(off)
        while off + _HEADER.size <= end:
            n, crc = _HEADER.unpack(f.read(_HEADER.size))
            if n > _MAX_PAYLOAD or off + _HEADER.size + n > end:
                break
            payload = f.read(n)
            if zlib.crc32(payload) != crc:
                break
            try:
                quota, msg_id, ts, _ = _meta(payload)
            except ValueError:
                break
            out.append(Scanned(off, _HEADER.size + n, msg_id, ts, quota))
            off += _HEADER.size + n
    if off < end:
        log.warning("%s: damaged record at byte %d; dropping the rest of the file", path, off)
    return off, out


def _list_files(directory: Path) -> dict[bytes, dict[int, Path]]:
    files: dict[bytes, dict[int, Path]] = {}
    for p in directory.iterdir():
        m = _FILE.fullmatch(p.name)
        if m and len(m[1]) % 2 == 0:
            files.setdefault(bytes.fromhex(m[1]), {})[int(m[2])] = p
    return files


def _truncate(path: Path, size: int) -> None:
    if path.stat().st_size > size:
        log.warning("%s: truncating a torn or uncommitted tail at byte %d", path, size)
        os.truncate(path, size)


def _recover_queue(rid: bytes, read: Pos, write: Pos, files: dict[int, Path]) -> QueueFiles:
    """A queue's committed messages, with its files cut back to them (blocking)."""
    q = QueueFiles(rid)
    for seq in range(read.seq, write.seq + 1):
        path = files.get(seq)
        if path is None:
            if seq < write.seq or write.offset:
                log.warning("%s.%d.msgs is missing; its messages are lost", rid.hex(), seq)
            end, records = 0, []
        else:
            start = read.offset if seq == read.seq else 0
            end, records = scan_file(path, start, write.offset if seq == write.seq else None)
        if seq == write.seq:  # the next record goes where the last good one ends
            if path is not None:
                _truncate(path, end)
            if end < write.offset:
                log.warning("%s.%d.msgs: %d bytes lost", rid.hex(), seq, write.offset - end)
            write = Pos(write.seq, end, write.count)
        for r in records:  # `end` only matters for pending entries; these are committed
            q.entries.append(Entry(q, seq, r.offset, r.size, write, r.msg_id, r.ts, r.quota))
    q.visible = len(q.entries)
    q.write = q.logged = q.committed = write
    q.first_seq = q.entries[0].seq if q.entries else write.seq
    return q


def _delete_files(paths: Iterable[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)


def recover(directory: Path, *, skip_corrupt: bool) -> dict[bytes, QueueFiles]:
    """Read the state log, cut every queue's files back to it, compact the state log."""
    directory.mkdir(parents=True, exist_ok=True)
    state = directory / "state.log"
    new = directory / "state.log.new"
    if new.exists():
        log.warning("%s: removing an unfinished compaction", new)
        new.unlink()
    positions: dict[bytes, tuple[Pos, Pos]] = {}
    if state.exists():
        for rid, pos in read_log(state, parse_state_line, skip_corrupt=skip_corrupt):
            if pos is None:
                positions.pop(rid, None)
            else:
                positions[rid] = pos
    files = _list_files(directory)
    queues: dict[bytes, QueueFiles] = {}
    for rid, (read, write) in positions.items():
        q = _recover_queue(rid, read, write, files.get(rid, {}))
        keep = range(q.first_seq, q.write.seq + 1) if q.entries else range(0)
        _delete_files(p for seq, p in files.get(rid, {}).items() if seq not in keep)
        if q.entries:
            queues[rid] = q
    for rid in files.keys() - positions.keys():
        _delete_files(files[rid].values())
    lines = [state_line(q.rid, q.read_pos(), q.committed) for q in queues.values()]
    data = b"".join(map(encode_line, lines))
    if not state.exists() or state.read_bytes() != data:
        try:
            atomic_write(state, (data,), temp_suffix=".new")
        except OSError as e:
            if not state.exists():
                raise
            # A full disk: the log as it is says the same once replayed (its torn
            # tail, if any, is already cut off), so the start goes on without it.
            log.warning("%s: not compacted at start: %s", state, e.strerror or e)
    return queues


def write_state_new(directory: Path, data: bytes, *, sync: bool) -> int:
    new = directory / "state.log.new"
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        new.unlink(missing_ok=True)
        raise
    return fd
