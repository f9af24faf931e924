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

With several workers (docs/workers.md#one-router-to-the-operator) the address
and router buckets are the supervisor's (`RouterBudgets`), the truth for the
router as a whole: a worker borrows a batch of tokens (a grant: each token one of
the address's bucket and one of the router's) when the grant it holds for the
client's address is spent or older than `GRANT_LIFETIME`, one round trip only
then, and gives back what it did not use once that lifetime is over (at its next NEW,
or within another lifetime without one: `give_back_old_grants`).
So every NEW uses a token of the supervisor's buckets, and a client whose NEWs all
land in one worker gets the whole budget; over any period the router allows what
one process allows plus the tokens the workers held unused when it began, at most
one grant (`GRANT_BATCH`) per worker per address (docs/workers.md). A worker that
dies loses its grants (never tokens made). The borrowing NEW waits in its
connection's own task; no answer within `BORROW_TIMEOUT`, or no supervisor, is
`NEW_RATE_LIMIT`. A borrow the supervisor cannot grant says when the buckets will
have a token again; until then, and for `REFUSAL_LIFETIME` at most (tokens another
worker gives back may come sooner), the worker refuses that address's NEWs itself,
or every NEW if the router's bucket is the empty one: a flood of NEWs from one
address (or from many, past the router's budget) costs the supervisor one round
trip per worker and refill, not one per NEW. Without a supervisor (workers in one
process, for tests) each worker keeps an equal share of the buckets (rate and burst
divided by the count of workers, a share of a burst at least one NEW). A
connection's own bucket is whole in each worker its NEWs run in (a NEW with
short-link data runs in its queue's worker).

The memory store's cap on stored message bytes is answered
`ERR STORE MEMORY_FULL` by SEND; nothing stored is dropped to make room.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, Protocol
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

    def take_up_to(self, wanted: int) -> int:
        """Up to `wanted` whole tokens (after refilling): how many were taken."""
        self.has_one()
        taken = max(0, min(wanted, int(self._tokens)))
        self._tokens -= taken
        return taken

    def give_back(self, tokens: int) -> None:
        """Tokens taken and not used: as if never taken (never above the burst)."""
        self.has_one()
        self._tokens = min(self._burst, self._tokens + tokens)

    def wait_for_one(self) -> float:
        """Seconds until a whole token is there (0 if one is), without taking it."""
        if self.has_one():
            return 0.0
        return (1.0 - self._tokens) / self._rate


ADDRESS_BUCKETS_KEPT = 4096  # per-address buckets past which the full ones are forgotten


BORROW_TIMEOUT = 5.0  # seconds a NEW waits for the supervisor's grant, then refused
GRANT_LIFETIME = 1.0  # seconds a grant's tokens may be used; then given back
GRANT_BATCH = 8  # tokens a worker borrows at most at once
GRANTS_KEPT = 4096  # addresses with a grant in a worker, past which the oldest are given back
REFUSAL_LIFETIME = 1.0  # seconds at most a worker refuses an address's NEWs itself
REFUSALS_KEPT = 4096  # addresses refused in a worker, past which the oldest are forgotten
EVERY_ADDRESS = "*"  # the key of a refusal by the router's bucket (never an address's key)


class Loan(NamedTuple):
    """The supervisor's answer to a borrow: tokens, or if none, how long it has none."""

    tokens: int
    wait: float = 0.0  # seconds until the buckets have a token (0: unknown, ask again)
    refused: str = ""  # the key the refusal is for: the address's, or EVERY_ADDRESS


class Lender(Protocol):
    """The supervisor's NEW budgets as a worker reaches them (workers/admission.py)."""

    async def borrow(self, key: str, wanted: int) -> Loan:
        """Up to `wanted` tokens of address `key`'s and the router's buckets."""
        ...

    def give_back(self, key: str, tokens: int) -> None: ...


class NewQueueLimits:
    """The NEW token buckets of each connection, each client address and the router
    (module doc); a scale that is off in the configuration has no bucket. With a
    `lender` the address and router buckets are the supervisor's, borrowed from."""

    def __init__(self, config: RouterConfig, shares: int = 1,
                 lender: Lender | None = None) -> None:
        self._config = config
        self._shares = shares  # this worker's share of the address and router buckets
        self._connections: WeakKeyDictionary[object, TokenBucket] = WeakKeyDictionary()
        self._addresses: dict[str, TokenBucket] = {}
        budgets = (config.new_queue_address_rate, config.new_queue_total_rate)
        self._lender = lender if budgets != (None, None) else None
        self._grants: dict[str, _Grant] = {}  # address key -> tokens borrowed, not used
        self._refused: dict[str, float] = {}  # address key -> refused here until (clock)
        self._swept_at = -math.inf
        if self._lender is not None:
            self._router = None
            return
        self._router = (None if config.new_queue_total_rate is None else
                        TokenBucket(config.new_queue_total_rate / shares,
                                    _share(config.new_queue_total_burst, shares)))

    async def allow(self, connection: object, remote: str) -> bool:
        """Take a token from each of the connection's buckets, or from none of them."""
        if self._lender is not None:
            return await self._allow_borrowing(connection, remote)
        buckets = [bucket for bucket in (self._connection_bucket(connection),
                                         self._address_bucket(remote), self._router)
                   if bucket is not None]
        if not all(bucket.has_one() for bucket in buckets):
            return False
        for bucket in buckets:
            bucket.take()
        return True

    async def _allow_borrowing(self, connection: object, remote: str) -> bool:
        own = self._connection_bucket(connection)
        if own is not None and not own.has_one():
            return False  # no grant asked for a NEW its own bucket refuses
        key = ("" if self._config.new_queue_address_rate is None
               else address_key(remote_host(remote)))
        if not await self._granted(key):
            return False
        if own is not None and not own.take():  # emptied by its other NEWs meanwhile
            self._grant(key).tokens += 1
            return False
        return True

    def _grant(self, key: str) -> _Grant:
        grant = self._grants.get(key)
        if grant is None:
            if len(self._grants) >= GRANTS_KEPT:
                self._give_back(next(iter(self._grants)))
            grant = self._grants[key] = _Grant()
        return grant

    async def _granted(self, key: str) -> bool:
        """One token of `key`'s grant, borrowed if the grant is spent or too old
        (module doc)."""
        self.give_back_old()
        grant = self._grant(key)
        while grant.tokens < 1 or grant.taken_at + GRANT_LIFETIME < trio.current_time():
            if grant.borrowing is not None:  # another NEW of this address asks already
                await grant.borrowing.wait()
                grant = self._grant(key)
                continue
            if grant.tokens:  # too old: back to the supervisor, a fresh grant instead
                self._give_back(key)
                grant = self._grant(key)
            if self._still_refused(key):
                return False
            grant.borrowing = borrowing = trio.Event()
            loan = Loan(0)
            try:
                assert self._lender is not None
                with trio.move_on_after(BORROW_TIMEOUT):
                    loan = await self._lender.borrow(key, GRANT_BATCH)
            finally:
                grant.borrowing = None
                borrowing.set()
            borrowed = loan.tokens
            if not borrowed:
                self._refuse(loan.refused or key, loan.wait)
                return False
            if self._grants.get(key) is not grant:  # given back while borrowing
                self._lender.give_back(key, borrowed)
                grant = self._grant(key)
                continue
            grant.tokens += borrowed
            grant.taken_at = trio.current_time()
        grant.tokens -= 1
        return True

    def _still_refused(self, key: str) -> bool:
        """The supervisor said `key`'s buckets have no token yet (module doc)."""
        if not self._refused:
            return False
        now = trio.current_time()
        for refused in (key, EVERY_ADDRESS):
            until = self._refused.get(refused)
            if until is not None:
                if now < until:
                    return True
                del self._refused[refused]
        return False

    def _refuse(self, key: str, wait: float) -> None:
        if wait <= 0:
            return
        if key not in self._refused and len(self._refused) >= REFUSALS_KEPT:
            del self._refused[next(iter(self._refused))]
        self._refused[key] = trio.current_time() + min(wait, REFUSAL_LIFETIME)

    def give_back_old(self) -> None:
        """Every grant older than GRANT_LIFETIME back to the supervisor, at most once a
        GRANT_LIFETIME: tokens unused here are another worker's to borrow. Refusals
        ended are forgotten."""
        now = trio.current_time()
        if now < self._swept_at + GRANT_LIFETIME:
            return
        self._swept_at = now
        if self._refused:
            self._refused = {key: until for key, until in self._refused.items() if until > now}
        for key, grant in list(self._grants.items()):
            if grant.borrowing is None and grant.taken_at + GRANT_LIFETIME < now:
                self._give_back(key)

    def _give_back(self, key: str) -> None:
        grant = self._grants.pop(key, None)
        if grant is not None and grant.tokens and self._lender is not None:
            self._lender.give_back(key, grant.tokens)
            grant.tokens = 0

    def give_back_all(self) -> None:
        """Every unused token back to the supervisor (the limits are replaced)."""
        for key in list(self._grants):
            self._give_back(key)

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


async def give_back_old_grants(give_back_old: Callable[[], None]) -> None:
    """Every GRANT_LIFETIME, the worker's grants older than that back to the supervisor
    (`give_back_old`), also when no NEW comes to this worker: unused here, its tokens
    are another worker's to borrow for the same address."""
    while True:
        await trio.sleep(GRANT_LIFETIME)
        give_back_old()


class _Grant:
    """Tokens a worker borrowed for one address key and has not used yet."""

    __slots__ = ("tokens", "taken_at", "borrowing")

    def __init__(self) -> None:
        self.tokens = 0
        self.taken_at = -math.inf
        self.borrowing: trio.Event | None = None  # a borrow on its way


class RouterBudgets:
    """The supervisor's NEW buckets of each client address and of the router: the
    truth the workers borrow from (module doc). A grant takes the same tokens from the
    address's bucket and the router's."""

    def __init__(self, config: RouterConfig) -> None:
        self._config = config
        self.settings = new_queue_limits(config)  # what a SIGHUP compares
        self._addresses: dict[str, TokenBucket] = {}
        self._router = (None if config.new_queue_total_rate is None else
                        TokenBucket(config.new_queue_total_rate, config.new_queue_total_burst))

    def lend(self, key: str, wanted: int) -> int:
        """Up to `wanted` tokens of `key`'s bucket and the router's, taken from both."""
        address = self._address_bucket(key)
        lent = wanted if address is None else address.take_up_to(wanted)
        if self._router is not None:
            from_router = self._router.take_up_to(lent)
            if address is not None:
                address.give_back(lent - from_router)
            lent = from_router
        return lent

    def refusal(self, key: str) -> Loan:
        """No token for `key` now: the seconds until its bucket and the router's both
        have one, for every address if the router's is the one to wait for."""
        address = self._address_bucket(key)
        own = 0.0 if address is None else address.wait_for_one()
        router = 0.0 if self._router is None else self._router.wait_for_one()
        if router > 0 and router >= own:
            return Loan(0, router, EVERY_ADDRESS)
        return Loan(0, own, key)

    def take_back(self, key: str, tokens: int) -> None:
        """A worker's unused tokens, as if never lent."""
        address = self._address_bucket(key)
        if address is not None:
            address.give_back(tokens)
        if self._router is not None:
            self._router.give_back(tokens)

    def _address_bucket(self, key: str) -> TokenBucket | None:
        config = self._config
        if config.new_queue_address_rate is None or not key:
            return None
        bucket = self._addresses.get(key)
        if bucket is None:
            if len(self._addresses) >= ADDRESS_BUCKETS_KEPT:
                self._addresses = {k: b for k, b in self._addresses.items() if not b.is_full()}
            bucket = TokenBucket(config.new_queue_address_rate, config.new_queue_address_burst)
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
