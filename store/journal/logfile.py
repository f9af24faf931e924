"""Checksummed line logs and torn-tail recovery.

Shared by the store log (queue records, store/journal/storelog.py) and the journal's
state log (store/journal/messages.py). Both are text files of lines

    <crc> SP <payload> LF

where <crc> is the CRC-32 (zlib / IEEE 802.3, the same as java.util.zip.CRC32
and Spark's `crc32`) of the payload's ASCII bytes, written as exactly 8
lowercase hex digits. docs/store-log.md describes the format in full.

Reading a log (`read_log`): a crash can only tear what was being appended, so
bytes after the last LF, and a last complete line that fails its checksum, are
a torn tail: they are cut off the file with a warning. A bad line anywhere
else means the file was damaged; the open stops with `LogCorruptError` naming
file and line, or, with `skip_corrupt`, the line is skipped with a warning.

The files are written and made durable with store/durability.py.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ..durability import truncate_file

log = logging.getLogger("store")

T = TypeVar("T")

_CRC_HEX = re.compile(rb"[0-9a-f]{8}")


class LogCorruptError(Exception):
    """A line that is not the last one fails its checksum or does not parse."""

    def __init__(self, path: Path, line_no: int, reason: str) -> None:
        super().__init__(f"{path}:{line_no}: {reason}")
        self.path = path
        self.line_no = line_no


# --- lines ------------------------------------------------------------------------


def encode_line(payload: str) -> bytes:
    """One log line, LF included."""
    data = payload.encode("ascii")
    return b"%08x %s\n" % (zlib.crc32(data), data)


def line_payload(line: bytes) -> str | None:
    """The payload of one line (without its LF) if the checksum holds, else None."""
    if len(line) < 9 or line[8:9] != b" " or not _CRC_HEX.fullmatch(line[:8]):
        return None
    data = line[9:]
    if zlib.crc32(data) != int(line[:8], 16):
        return None
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        return None


def _parse(line: bytes, parse: Callable[[str], T]) -> T | str:
    """The parsed record, or a reason why the line is bad (as a str)."""
    payload = line_payload(line)
    if payload is None:
        return "checksum mismatch"
    try:
        return parse(payload)
    except ValueError as exc:
        return f"unreadable record ({exc})"


def read_log(path: Path, parse: Callable[[str], T], *, skip_corrupt: bool = False) -> list[T]:
    """Every record of the log at `path`, in order; cuts a torn tail off the file.

    `parse` turns a payload into a record and raises ValueError for one it
    cannot read. Nothing here is parsed lazily: a caller gets every record or
    an exception.
    """
    records = iter_log(path, parse, skip_corrupt=skip_corrupt)
    return [record for record, _line in records if record is not None]


READ_CHUNK = 1 << 20  # bytes read at a time by `iter_log`


def iter_log(
    path: Path, parse: Callable[[str], T], *, skip_corrupt: bool = False
) -> Iterator[tuple[T | None, bytes]]:
    """The log at `path` line by line, in order, holding one chunk of it at a time.

    Yields `(record, line)` for every complete line (LF excluded), `record`
    being None for a corrupt line skipped under `skip_corrupt`. The same rules
    as `read_log`: a torn tail is cut off the file once the whole log has been
    read (so a caller that stops early changes nothing), a bad line elsewhere
    raises `LogCorruptError` where it is met.
    """
    line_no = 0
    keep = 0  # bytes of the file that stay: every line up to the last good one
    pending: bytes | None = None  # the last complete line, held back: it may be torn
    fragment = b""
    with open(path, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            lines = (fragment + chunk).split(b"\n")
            fragment = lines.pop()
            for line in lines:
                if pending is not None:
                    line_no += 1
                    yield _checked(path, line_no, pending, parse, skip_corrupt)
                    keep += len(pending) + 1
                pending = line
    if pending is not None:
        line_no += 1
        parsed = _parse(pending, parse)
        if isinstance(parsed, str) and not fragment:
            log.warning("%s:%d: dropping a torn last line (%s)", path, line_no, parsed)
        else:
            yield _checked(path, line_no, pending, parse, skip_corrupt, parsed)
            keep += len(pending) + 1
    if fragment:
        log.warning(
            "%s:%d: dropping a torn last line (%d bytes, no newline)",
            path, line_no + 1, len(fragment),
        )
    if keep < path.stat().st_size:
        truncate_file(path, keep)


def _checked(
    path: Path,
    line_no: int,
    line: bytes,
    parse: Callable[[str], T],
    skip_corrupt: bool,
    parsed: T | str | None = None,
) -> tuple[T | None, bytes]:
    """A line that is not the torn tail: its record, None if skipped, or LogCorruptError."""
    if parsed is None:
        parsed = _parse(line, parse)
    if not isinstance(parsed, str):
        return parsed, line
    if not skip_corrupt:
        raise LogCorruptError(path, line_no, parsed)
    log.warning("%s:%d: skipping a corrupt line (%s)", path, line_no, parsed)
    return None, line
