"""Queues blocked from the control port, kept in the data directory.

`blocked-queues` holds one line per queue, `RECIPIENT_ID REASON` (base64url,
spam or content), rewritten atomically on each change, so a block outlives a
restart whatever the store kind. Without a data directory the set lives as
long as the process.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
from pathlib import Path

from store.durability import atomic_write

log = logging.getLogger(__name__)

BLOCKED_FILE = "blocked-queues"


class BlockedQueues:
    __slots__ = ("_path", "reasons")

    def __init__(self, data_dir: Path | None) -> None:
        self._path = None if data_dir is None else data_dir / BLOCKED_FILE
        self.reasons: dict[bytes, str] = {}  # read directly on the command path
        if self._path is not None and self._path.exists():
            self.reasons = _read(self._path)

    def get(self, recipient_id: bytes) -> str | None:
        return self.reasons.get(recipient_id)

    def add(self, recipient_id: bytes, reason: str) -> None:
        self._change({recipient_id: reason})

    def add_many(self, reasons: dict[bytes, str]) -> None:
        self._change(reasons)

    def remove(self, recipient_id: bytes) -> bool:
        if recipient_id not in self.reasons:
            return False
        self._change({}, recipient_id)
        return True

    def _change(self, added: dict[bytes, str], removed: bytes | None = None) -> None:
        """Apply the change to the file as it is now, not as this process last saw it:
        the workers of a shared store (docs/workers.md#stores) keep one data directory,
        each blocking its own queues, and a file rewritten from one worker's memory
        would drop the others' blocks. The directory's lock makes each change whole."""
        path = self._path
        if path is None:
            reasons = self.reasons
            _apply(reasons, added, removed)
        else:
            directory = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.flock(directory, fcntl.LOCK_EX)  # released as it closes
                reasons = _read(path) if path.exists() else {}
                _apply(reasons, added, removed)
                atomic_write(path, (
                    f"{base64.urlsafe_b64encode(rid).decode()} {reason}\n".encode("ascii")
                    for rid, reason in reasons.items()
                ))
            finally:
                os.close(directory)
        self.reasons = reasons


def _apply(reasons: dict[bytes, str], added: dict[bytes, str], removed: bytes | None) -> None:
    reasons.update(added)
    if removed is not None:
        reasons.pop(removed, None)


def _read(path: Path) -> dict[bytes, str]:
    reasons: dict[bytes, str] = {}
    for number, line in enumerate(path.read_text(encoding="ascii").splitlines(), 1):
        fields = line.split()
        try:
            reasons[base64.urlsafe_b64decode(fields[0])] = fields[1]
        except (IndexError, ValueError):
            log.warning("%s:%d: not `ID REASON`, left out", path, number)
    return reasons
