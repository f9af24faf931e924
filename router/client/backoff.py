"""Reconnection delays: exponential, bounded, with jitter.

After the n-th failed attempt in a row the agent waits `Backoff.delay(n)`:
the ceiling `initial * factor**n`, capped at `maximum`, less a random part
of at most `jitter` of it. The random part spreads clients that lost the
same router at the same moment, so they do not all come back in one burst.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    initial: float = 0.5  # seconds before the first retry
    maximum: float = 30.0  # no delay is longer than this
    factor: float = 2.0  # growth per failed attempt
    jitter: float = 0.5  # fraction of the ceiling that is random (0: none, 1: 0..ceiling)

    def __post_init__(self) -> None:
        if not (0 < self.initial <= self.maximum and math.isfinite(self.maximum)):
            raise ValueError("backoff needs 0 < initial <= maximum < infinity")
        if self.factor < 1:
            raise ValueError("backoff factor must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be within 0..1")

    def ceiling(self, attempt: int) -> float:
        """The longest delay after `attempt` (0-based) failures in a row."""
        if self.factor == 1:
            return self.initial
        # Past this exponent the cap applies anyway; stopping there avoids overflow.
        limit = math.ceil(math.log(self.maximum / self.initial, self.factor)) + 1
        return min(self.maximum, self.initial * self.factor ** min(max(attempt, 0), limit))

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A delay in `[ceiling * (1 - jitter), ceiling]` for `attempt`."""
        ceiling = self.ceiling(attempt)
        r = (rng or random).random()
        return ceiling - ceiling * self.jitter * r
