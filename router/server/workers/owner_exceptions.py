"""The ids whose queue is not in the worker the ownership function names: those of
queues moved from another count of workers (docs/workers.md#another-count-of-workers).

Ids cannot change (clients hold them), and ids minted under one count map to
unrelated workers under another: a moved queue lives in one worker (its *home*)
and every id of it that the function maps elsewhere is written here, with its
home. Every worker loads the table at start (`Ownership.exceptions`) and a front
reads it before the function. New queues never need one (minted for their owner).

`DIR/OWNER_EXCEPTIONS`: a header line naming the count of workers it is for, then
one record per id: the id's length (one byte), the id, its home (two bytes, big
endian). Absent when there is none.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from store.durability import atomic_write

from ..core.ownership import Ownership
from ..settings.config import StartupError

OWNER_EXCEPTIONS_FILE = "OWNER_EXCEPTIONS"
_HEADER = b"smp-router owner exceptions for %d workers\n"


def write_owner_exceptions(data_dir: Path, workers: int, table: dict[bytes, int]) -> None:
    """Record `table` (id -> home) for `workers` workers; remove the file if it is empty."""
    path = data_dir / OWNER_EXCEPTIONS_FILE
    if not table:
        path.unlink(missing_ok=True)
        return
    atomic_write(path, (_HEADER % workers, *(
        bytes((len(entity_id),)) + entity_id + home.to_bytes(2, "big")
        for entity_id, home in table.items())))


def read_owner_exceptions(data_dir: Path, workers: int) -> dict[bytes, int]:
    """The table for `workers` workers; StartupError (one line) if the file is for
    another count or is cut short."""
    path = data_dir / OWNER_EXCEPTIONS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    header, _, records = data.partition(b"\n")
    if header + b"\n" != _HEADER % workers:
        raise StartupError(f"{path} is not the owner exceptions of {workers} workers "
                           f"({header[:60]!r}): run workers-move again")
    table: dict[bytes, int] = {}
    at, end = 0, len(records)
    while at < end:
        size = records[at]
        entity_id, home = records[at + 1:at + 1 + size], records[at + 1 + size:at + 3 + size]
        if len(entity_id) != size or len(home) != 2 or int.from_bytes(home, "big") >= workers:
            raise StartupError(f"{path} is damaged at byte {len(header) + 1 + at}")
        table[entity_id] = int.from_bytes(home, "big")
        at += 3 + size
    return table


def with_owner_exceptions(ownership: Ownership, data_dir: Path | None) -> Ownership:
    """`ownership` with the exceptions the data directory holds for its count."""
    if ownership.workers == 1 or data_dir is None:
        return ownership
    table = read_owner_exceptions(data_dir, ownership.workers)
    return replace(ownership, exceptions=table) if table else ownership
