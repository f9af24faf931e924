"""Which worker process owns a queue, read from any of its ids alone (docs/workers.md).

With `--workers N` each queue lives in one worker. The owner is a function of
an id's bytes, so a worker that receives a command for an entity id knows
where the queue lives without asking anyone. Every id of one queue (recipient,
sender, notifier, a messaging queue's link id) must therefore map to the same
owner: the router mints its ids by drawing random ids until one maps to the
owner (rejection sampling: N draws on average, each id still uniformly random
among the owner's ids). Where the client chooses an id (the sender id of NEW
with short-link data, docs/protocol.md#short-links),
the owner follows from that id and the router's ids follow the owner.

One worker (N = 1) is today's router: every id is its own, and `mint` is a
single draw, as before workers existed.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

ID_SIZE = 24  # queue ids and message ids (docs/protocol.md#limits)
# The bytes of an id that choose its owner: four, so that the bias of `% N` is
# below 1e-9 for any N a machine has cores for.
OWNER_BYTES = 4


@dataclass(frozen=True, slots=True)
class Ownership:
    """The workers' share of the ids: `workers` processes, this one is `index`."""

    workers: int = 1
    index: int = 0
    # Ids whose queue lives elsewhere than their owner by the function: those of queues
    # moved from another count of workers (docs/workers.md#another-count-of-workers).
    # Empty unless a move left some, so the common path costs one truth test.
    exceptions: Mapping[bytes, int] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, not {self.workers}")
        if not 0 <= self.index < self.workers:
            raise ValueError(f"worker index {self.index} is not below {self.workers}")

    def owner_of(self, entity_id: bytes) -> int:
        """The worker owning the queue of `entity_id` (any of its ids)."""
        if self.workers == 1:
            return 0
        if self.exceptions:
            home = self.exceptions.get(entity_id)
            if home is not None:
                return home
        return int.from_bytes(entity_id[:OWNER_BYTES], "big") % self.workers

    def owns(self, entity_id: bytes) -> bool:
        return self.owner_of(entity_id) == self.index

    def mint(self, owner: int | None = None) -> bytes:
        """A fresh random id of `owner`'s queues (default: this worker's)."""
        if self.workers == 1:
            return secrets.token_bytes(ID_SIZE)
        wanted = self.index if owner is None else owner
        if not 0 <= wanted < self.workers:
            raise ValueError(f"worker {wanted} is not one of {self.workers}")
        while True:
            candidate = secrets.token_bytes(ID_SIZE)
            if int.from_bytes(candidate[:OWNER_BYTES], "big") % self.workers == wanted:
                return candidate


ONE_WORKER = Ownership()
