"""Limits against abuse by legitimate commands (README, "Limits").

A connection may create `burst` queues at once and then `rate` per second:
a token bucket, refilled from Trio's clock when NEW asks for a token. So may,
with buckets of their own, each client address (an IPv6 client by its /64)
and the router as a whole, so that spreading NEWs over many connections or
addresses does not create queues at will (`NewQueueLimits`). A NEW that finds
any of its buckets empty is answered `ERR STORE NEW_RATE_LIMIT` (not QUOTA,
which means a full queue, nor AUTH, which means a wrong password), and takes
no token from the others: the reference server has no such limit, and its
clients treat a STORE error as a failure to retry later.

With several workers (docs/workers.md#one-router-to-the-operator) each worker
keeps an equal share of the address and router buckets (rate and burst divided
by the count of workers), so that together they never allow more than one
router would: no round trip per NEW, at the cost of refusing early a client
whose NEWs all land in one worker. A connection's own bucket is whole in each
worker its NEWs run in (a NEW with short-link data runs in its queue's worker),
and a share of a burst is at least one NEW.

The memory store's cap on stored message bytes is answered
`ERR STORE MEMORY_FULL` by SEND; nothing stored is dropped to make room.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import trio

from router.protocol.types import store_error

from ..edge.admission import address_key
from ..settings.config import RouterConfig

NEW_RATE_LIMITED = store_error("NEW_RATE_LIMIT")
MEMORY_FULL = store_error("MEMORY_FULL")


class TokenBucket:
    __slots__ = ("_rate", "_burst", "_tokens", "_stamp")

    def __init__(self, rate: float, burst: float) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._stamp = trio.current_time()

    def take(self) -> bool:
        """One token if there is one (after refilling for the time passed)."""
        if not self.has_one():
            return False
        self._tokens -= 1.0
        return True

    def has_one(self) -> bool:
        """Whether a token is there (after refilling), without taking it."""
        now = trio.current_time()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        return self._tokens >= 1.0

    def is_full(self) -> bool:
        """Refilled to its burst: forgetting it changes nothing."""
        return self.has_one() and self._tokens >= self._burst


ADDRESS_BUCKETS_KEPT = 4096  # per-address buckets past which the full ones are forgotten


class NewQueueLimits:
    """The NEW token buckets of each connection, each client address and the router
    (module doc); a scale that is off in the configuration has no bucket."""

    def __init__(self, config: RouterConfig, shares: int = 1) -> None:
        self._config = config
        self._shares = shares  # this worker's share of the address and router buckets
        self._connections: WeakKeyDictionary[object, TokenBucket] = WeakKeyDictionary()
        self._addresses: dict[str, TokenBucket] = {}
        self._router = (None if config.new_queue_total_rate is None else
                        TokenBucket(config.new_queue_total_rate / shares,
                                    _share(config.new_queue_total_burst, shares)))

    def allow(self, connection: object, remote: str) -> bool:
        """Take a token from each of the connection's buckets, or from none of them."""
        buckets = [bucket for bucket in (self._connection_bucket(connection),
                                         self._address_bucket(remote), self._router)
                   if bucket is not None]
        if not all(bucket.has_one() for bucket in buckets):
            return False
        for bucket in buckets:
            bucket.take()
        return True

    def _connection_bucket(self, connection: object) -> TokenBucket | None:
        config = self._config
        if config.new_queue_rate is None:
            return None
        bucket = self._connections.get(connection)
        if bucket is None:
            bucket = TokenBucket(config.new_queue_rate, config.new_queue_burst)
            self._connections[connection] = bucket
        return bucket

    def _address_bucket(self, remote: str) -> TokenBucket | None:
        config = self._config
        if config.new_queue_address_rate is None:
            return None
        key = address_key(remote_host(remote))
        bucket = self._addresses.get(key)
        if bucket is None:
            if len(self._addresses) >= ADDRESS_BUCKETS_KEPT:
                self._addresses = {k: b for k, b in self._addresses.items() if not b.is_full()}
            bucket = TokenBucket(config.new_queue_address_rate / self._shares,
                                 _share(config.new_queue_address_burst, self._shares))
            self._addresses[key] = bucket
        return bucket


def _share(burst: int, shares: int) -> float:
    """A worker's share of a burst: at least one NEW (a burst below the count of workers
    is then that many for the router)."""
    return max(1.0, burst / shares)


def new_queue_limits(config: RouterConfig) -> tuple[float | int | None, ...]:
    """The settings NewQueueLimits is made from."""
    return (config.new_queue_rate, config.new_queue_burst, config.new_queue_address_rate,
            config.new_queue_address_burst, config.new_queue_total_rate,
            config.new_queue_total_burst)


def remote_host(remote: str) -> str:
    """The host of a transport's "host:port" or "[v6 host]:port"."""
    host = remote.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") else host
