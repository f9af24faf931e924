"""Queues blocked from the control port, kept in the data directory.

`blocked-queues` holds one line per queue, `RECIPIENT_ID REASON` (base64url,
spam or content), rewritten atomically on each change, so a block outlives a
restart whatever the store kind. Without a data directory the set lives as
long as the process.
"""

from __future__ import annotations

import base64
import logging
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
        self.reasons[recipient_id] = reason
        self._save()

    def add_many(self, reasons: dict[bytes, str]) -> None:
        self.reasons.update(reasons)
        self._save()

    def remove(self, recipient_id: bytes) -> bool:
        if self.reasons.pop(recipient_id, None) is None:
            return False
        self._save()
        return True

    def _save(self) -> None:
        if self._path is None:
            return
        atomic_write(self._path, (
            f"{base64.urlsafe_b64encode(rid).decode()} {reason}\n".encode("ascii")
            for rid, reason in self.reasons.items()
        ))


def _read(path: Path) -> dict[bytes, str]:
    reasons: dict[bytes, str] = {}
    for number, line in enumerate(path.read_text(encoding="ascii").splitlines(), 1):
        fields = line.split()
        try:
            reasons[base64.urlsafe_b64decode(fields[0])] = fields[1]
        except (IndexError, ValueError):
            log.warning("%s:%d: not `ID REASON`, left out", path, number)
    return reasons
