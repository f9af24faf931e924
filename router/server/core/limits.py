"""Limits against abuse by legitimate commands (README, "Limits").

A connection may create `burst` queues at once and then `rate` per second:
a token bucket, refilled from Trio's clock when NEW asks for a token. A NEW
that finds the bucket empty is answered `ERR STORE NEW_RATE_LIMIT` (not
QUOTA, which means a full queue, nor AUTH, which means a wrong password): the
reference server has no such limit, and its clients treat a STORE error as a
failure to retry later.

The memory store's cap on stored message bytes is answered
`ERR STORE MEMORY_FULL` by SEND; nothing stored is dropped to make room.
"""

from __future__ import annotations

import trio

from router.protocol.types import store_error

NEW_RATE_LIMITED = store_error("NEW_RATE_LIMIT")
MEMORY_FULL = store_error("MEMORY_FULL")


class TokenBucket:
    __slots__ = ("_rate", "_burst", "_tokens", "_stamp")

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._stamp = trio.current_time()

    def take(self) -> bool:
        """One token if there is one (after refilling for the time passed)."""
        now = trio.current_time()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
