"""Stored positions for incremental `stats --follow` runs.

Theory of operation
-------------------
Each router's log is one ordered partition; the checkpoint keeps, per log, the
byte offset just past the last complete line already processed (and the file's
inode, to notice a log replaced by a new file). A run:

1. reads, per log, the complete lines appended since its offset (a torn last
   line waits for the next run);
2. stages them as Parquet batch `<checkpoint>/lines/batch=<n>`, where n is the
   run number stored in the checkpoint; a rerun after a crash has the same n and
   the same offsets, so it overwrites the same batch with the same lines (or more);
3. recomputes every output period that the new lines touch from all staged
   lines of those periods, and replaces exactly those output partitions;
4. only then commits the new offsets and n + 1 (write, fsync, rename).

A crash anywhere before 4 leaves the old offsets, and the rerun produces the
same outputs: processing is at least once, and because the outputs are
replaced, not added to, the result is as if exactly once. Lines read twice
(a replaced log read again from its start) are removed by the transforms'
(router, period, time) de-duplication.

First sight of a log: `--start beginning` reads it whole, `latest` skips what is
there now, a timestamp keeps only lines whose period starts at or after it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
HEADER_PREFIX = "time,"


@dataclass(slots=True)
class LogPosition:
    router: str
    offset: int = 0
    inode: int = 0
    since: str | None = None  # keep lines with time >= since (ISO, Z)


@dataclass(slots=True)
class Checkpoint:
    next_batch: int = 0
    logs: dict[str, LogPosition] = field(default_factory=dict)
    batches: dict[int, tuple[str, str]] = field(default_factory=dict)  # n -> (first, last day)

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": CHECKPOINT_VERSION,
                "next_batch": self.next_batch,
                "logs": {path: asdict(pos) for path, pos in sorted(self.logs.items())},
                "batches": {str(n): list(days) for n, days in sorted(self.batches.items())},
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        data = json.loads(text)
        if data.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"unknown checkpoint version {data.get('version')!r}")
        return cls(
            next_batch=int(data["next_batch"]),
            logs={path: LogPosition(**pos) for path, pos in data["logs"].items()},
            batches={int(n): (days[0], days[1]) for n, days in data["batches"].items()},
        )


def checkpoint_file(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / "positions.json"


def load_checkpoint(directory: str | os.PathLike[str]) -> Checkpoint:
    path = checkpoint_file(directory)
    return Checkpoint.from_json(path.read_text()) if path.exists() else Checkpoint()


def commit_checkpoint(directory: str | os.PathLike[str], checkpoint: Checkpoint) -> None:
    """Replace the stored positions atomically; the last step of a run."""
    path = checkpoint_file(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(checkpoint.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# --- start points ---------------------------------------------------------------


def parse_start(text: str) -> str:
    """`beginning`, `latest`, or a timestamp normalised to `YYYY-MM-DDTHH:MM:SSZ` (UTC)."""
    if text in ("beginning", "latest"):
        return text
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--start takes beginning, latest or an ISO 8601 time, not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def first_position(path: Path, router: str, start: str) -> LogPosition:
    """Where to begin in a log seen for the first time."""
    stat = path.stat()
    if start == "beginning":
        return LogPosition(router, 0, stat.st_ino)
    if start == "latest":
        return LogPosition(router, _complete_length(path, 0, stat.st_size), stat.st_ino)
    return LogPosition(router, 0, stat.st_ino, since=start)


def _complete_length(path: Path, offset: int, size: int) -> int:
    """The offset just past the last newline in [offset, size)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size - offset)
    return offset + data.rfind(b"\n") + 1


# --- reading what was appended ----------------------------------------------------


def read_appended(path: Path, position: LogPosition) -> tuple[list[str], LogPosition]:
    """Complete lines appended since `position`, prefixed with the router name.

    A log whose inode changed or which is now shorter than the offset was
    replaced: it is read again from its start.
    """
    stat = path.stat()
    offset = position.offset
    if stat.st_ino != position.inode or stat.st_size < offset:
        log.warning("stats log %s was replaced; reading it from the start", path)
        offset = 0
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(stat.st_size - offset)
    complete = data[: data.rfind(b"\n") + 1]
    lines = [
        f"{position.router},{line}"
        for line in complete.decode("ascii", errors="replace").splitlines()
        if line and not line.startswith(HEADER_PREFIX) and _kept(line, position.since)
    ]
    moved = LogPosition(position.router, offset + len(complete), stat.st_ino, position.since)
    return lines, moved


def _kept(line: str, since: str | None) -> bool:
    # the time field is fixed-width ISO 8601 UTC, so text order is time order
    return since is None or line[:20] >= since


def line_days(lines: list[str]) -> tuple[str, str]:
    """The first and last UTC day (YYYY-MM-DD) among router-prefixed lines."""
    days = [line.split(",", 2)[1][:10] for line in lines]
    return min(days), max(days)


def first_day_needed(first_new_day: str) -> str:
    """The earliest day whose lines a run must read again: the start of the week
    or month (whichever is earlier) that holds the first new line."""
    day = date.fromisoformat(first_new_day)
    week = day - timedelta(days=day.weekday())
    return min(week, day.replace(day=1)).isoformat()


def batches_since(checkpoint: Checkpoint, first_day: str) -> list[int]:
    """Staged batches that hold lines of `first_day` or later."""
    return sorted(n for n, (_, last) in checkpoint.batches.items() if last >= first_day)
