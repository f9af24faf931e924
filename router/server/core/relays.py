"""The proxy's connections to destination routers (docs/protocol.md#private-message-routing).

A client's PRXY names a destination router; the proxy opens one SMP over TLS
connection to it, as a client whose hello carries the proxyServer flag, and every
later PRXY for the same destination (from any client) reuses it. PFWD finds the
connection again by its session id, which PKEY told the client.

Theory of operation. Each connection lives in a task of the pool's own nursery,
never in the task of the client that asked for it: a client that disconnects while
its PRXY waits leaves the connection attempt running to its end, so a destination
is never left half-connected for the next PRXY (the reference proxy had that bug).
A destination being connected has one attempt at a time; later PRXYs wait for it.

Bounds:

- `max_relays` connections, counting those being made.
- `connect_timeout` for TCP, TLS and the SMP handshake together;
  `answer_timeout` for each forwarded command's answer.
- `idle_timeout`: a connection no request used for this long is closed.
- `error_hold`: after a failed attempt, that client address's PRXYs for that
  destination get the same error without a new attempt for this long (the
  reference's persistErrorInterval), so a crowd of clients cannot make the proxy
  hammer a router that is down. It is kept per address, so that one address's
  failures (a destination it made fail, or named wrongly) do not hold it for all.

The pool shared fairly. The pool is one resource for every client, and a
destination that accepts TCP and never answers holds its slot for the whole
connect timeout: one address asking for ever new such destinations would fill it
and lock every other client out. So each client address (an IPv6 client by its
/64, as the listener counts them, edge/admission.py) has a share:

- at most `connects_per_address` destinations being connected for it at once,
  and at most `held_per_address` slots held (those being connected and the open
  connections it asked for first), both well below `max_relays`, so other
  addresses always find room. An address at its share waits (its PRXYs wait, and
  with them its connection's next blocks, proxy.py) until one of its own slots
  is free, at most the connect timeout; at its held bound it first closes its
  own least recently used idle connection that no other address asked for
  within a connect timeout.
- a full pool makes room by cancelling the oldest unfinished connect of the
  address holding the most slots, when the asker holds fewer; else by closing
  one of the asker's own connections as above; else the least recently used
  connection that no request used for a connect timeout: connected destinations
  in use (a real router many clients use) are never closed for connects that
  may never finish. With no room the PRXY waits as above.
- failures cost their asker: each PRXY that fails adds to its address's debt,
  paid at `failures_per_second` after a burst of `failure_burst` (a GCRA), and an
  address in debt has its next PRXYs wait their turns (`turn`), so a client that
  keeps asking for routes that fail is answered at that pace, not in a tight loop.
- at most `forwards_per_address` of its forwarded commands wait for their answers
  (`request`): the connections are shared, and a flood on one would hold up the
  other clients' answers on it.

A destination is connected to only if the policy allows its addresses
(proxy_destinations.py: no loopback, private, link-local or this machine's
addresses unless allowed); the name is resolved here, in the attempt.

An address held back by any of these starts a pressure episode: one log line
when it starts (at most one line per `LOG_INTERVAL` for all addresses, counting
those left out), counted in `PoolStatistics`, ended when the address has not been
held back for `LOG_INTERVAL` or holds and owes nothing.

A connection the destination closed is dropped the first time it is looked up (and
by the sweep); the next PRXY connects again.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from router.client import (
    ConnectionClosed,
    HandshakeError,
    IdentityMismatch,
    SMPClient,
    format_address,
    open_client,
)
from router.protocol.types import Command, Response

from .proxy_destinations import DestinationPolicy, DestinationRefused

log = logging.getLogger(__name__)

# The port of a destination address without one (docs/protocol.md#private-message-routing).
DEFAULT_SMP_PORT = 5223

# What went wrong, in the words of the reference's client errors
# (docs/protocol.md#private-message-routing, "proxy errors"):
NETWORK = "network"  # no connection: refused, unreachable, wrong identity, connect timeout
HOST = "host"  # no host the proxy may connect to (onion only, or inside: proxy_destinations)
TIMEOUT = "timeout"  # connected, but no answer in time
VERSION = "version"  # no version both speak
CLOSED = "closed"  # the connection ended while the command waited


TIMEOUTS_BEFORE_CLOSING = 3
ANYONE = ""  # the address of a request that names none (the pool's own callers, tests)
LOG_INTERVAL = 10.0  # seconds between two pressure log lines
HELD_ERRORS_PER_SLOT = 10  # held errors kept, per slot of the pool


class RelayError(Exception):
    """A destination the proxy cannot reach or that did not answer."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Destination:
    """A destination router as PRXY names it: the host connected to, port, key hash."""

    host: str
    port: int
    key_hash: bytes

    @property
    def address(self) -> str:
        return format_address(self.key_hash, self.host, self.port)


def destination(hosts: tuple[str, ...], port: str, key_hash: bytes) -> Destination:
    """The destination to connect to: the first host that is not an onion address
    (the proxy has no Tor), the default port if none is given; `RelayError(HOST)`
    when there is no such host, `RelayError(NETWORK)` for a port that is not one."""
    usable = [h for h in hosts if h and not h.lower().endswith(".onion")]
    if not usable:
        raise RelayError(HOST, "no host reachable without Tor")
    try:
        number = int(port) if port else DEFAULT_SMP_PORT
    except ValueError:
        raise RelayError(NETWORK, f"bad port {port!r}") from None
    if not 0 < number < 65536:
        raise RelayError(NETWORK, f"bad port {port!r}")
    return Destination(usable[0].strip("[]"), number, key_hash)


@dataclass(eq=False)
class Relay:
    """One open connection to a destination."""

    destination: Destination
    client: SMPClient
    own: bool  # the destination is this router or one of its operator's
    last_used: float = 0.0
    owner: str = ANYONE  # the client address that asked for it first (its share holds it)
    others_used: float = -math.inf  # when another address last asked for it
    in_flight: int = 0
    timeouts: int = 0  # answers missed in a row
    forward_secret: bytes | None = None  # RFWD's box key, made at the first PRXY (proxy.py)
    _scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    @property
    def session_id(self) -> bytes:
        return self.client.session_id

    @property
    def version(self) -> int:
        return self.client.version

    @property
    def alive(self) -> bool:
        return self.client.closed is None

    def close(self) -> None:
        self._scope.cancel()


@dataclass(eq=False)
class _Attempt:
    """A connection being made; PRXYs for the same destination wait for it."""

    owner: str
    destination: Destination
    done: trio.Event = field(default_factory=trio.Event)
    relay: Relay | None = None
    error: RelayError | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    evicted: bool = False  # cancelled to make room for another address


@dataclass(eq=False)
class _Share:
    """One client address's part of the pool (module doc)."""

    attempts: dict[_Attempt, None] = field(default_factory=dict)  # oldest first
    relays: dict[Relay, None] = field(default_factory=dict)  # open, asked for first here
    paid_until: float = -math.inf  # its failures' GCRA: when its debt is paid
    pressed: bool = False  # in a pressure episode
    last_pressed: float = -math.inf  # when it was last held back
    forwarding: int = 0  # its forwarded commands waiting for their answers
    forwarded: trio.Event = field(default_factory=trio.Event)  # set when one is answered

    @property
    def held(self) -> int:
        return len(self.attempts) + len(self.relays)

    def idle(self) -> bool:
        return not self.attempts and not self.relays and not self.forwarding


@dataclass(slots=True)
class PoolStatistics:
    """How the pool was shared, since start (metrics.py)."""

    waited: int = 0  # PRXYs that waited for their address's share or a free slot
    slowed: int = 0  # PRXYs that waited for their address's failures (`turn`)
    evicted: int = 0  # unfinished connects cancelled to make room for another address
    no_room: int = 0  # PRXYs that found no room within the connect timeout
    forwards_waited: int = 0  # PFWDs that waited for their address's forwards in flight
    refused_destinations: int = 0  # destinations refused by the policy (proxy_destinations)
    pressure_episodes: int = 0


@dataclass(frozen=True, slots=True)
class RelayLimits:
    max_relays: int = 1000
    connect_timeout: float = 20.0
    answer_timeout: float = 15.0
    idle_timeout: float = 600.0
    error_hold: float = 30.0
    connects_per_address: int = 16
    held_per_address: int = 100
    failures_per_second: float = 2.0  # per address, after the burst
    failure_burst: int = 20
    forwards_per_address: int = 64  # PFWDs of one address waiting for their answers


class Relays:
    """The pool; `run` holds its connections and must be running for `relay` to work."""

    def __init__(
        self,
        limits: RelayLimits,
        is_own: Callable[[Destination], bool] = lambda d: False,
        versions: tuple[int, int] | None = None,
        policy: DestinationPolicy | None = None,
    ) -> None:
        self.limits = limits
        self.policy = policy or DestinationPolicy()
        self._is_own = is_own
        self._versions = versions
        self._relays: dict[Destination, Relay] = {}
        self._by_session: dict[bytes, Relay] = {}
        self._attempts: dict[Destination, _Attempt] = {}
        # (destination, the address that asked) -> the error and until when it holds
        self._held_errors: dict[tuple[Destination, str], tuple[RelayError, float]] = {}
        self._shares: dict[str, _Share] = {}
        self._changed = trio.Event()  # set (and replaced) when a slot may have freed
        self._waiting = 0  # PRXYs waiting for it
        self._nursery: trio.Nursery | None = None
        self.connects = 0  # connections opened since start
        self.connect_failures = 0
        self.stats = PoolStatistics()
        self._last_log = -math.inf
        self._unlogged = 0

    def __len__(self) -> int:
        """Connections open or being made."""
        return len(self._relays) + len(self._attempts)

    @property
    def connecting(self) -> int:
        return len(self._attempts)

    @property
    def pressed_addresses(self) -> int:
        """Client addresses in a pressure episode now."""
        return sum(share.pressed for share in self._shares.values())

    def held_by(self, address: str) -> int:
        share = self._shares.get(address)
        return 0 if share is None else share.held

    # --- running -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connections and close idle or dead ones; closes them all when
        cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._sweep)
                task_status.started()
        finally:
            self._nursery = None

    async def _sweep(self) -> None:
        period = max(0.05, min(self.limits.idle_timeout / 4, 5.0))
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            for relay in list(self._relays.values()):
                idle = relay.in_flight == 0 and now - relay.last_used >= self.limits.idle_timeout
                if not relay.alive or idle:
                    self._drop(relay, "idle" if relay.alive else "closed by the destination")
            for key, (_, until) in list(self._held_errors.items()):
                if until <= now:
                    del self._held_errors[key]
            for address, share in list(self._shares.items()):
                if share.pressed and now - share.last_pressed >= LOG_INTERVAL:
                    share.pressed = False  # held back no more: its episode is over
                self._forget_if_done(address)

    def _drop(self, relay: Relay, why: str) -> None:
        if self._relays.get(relay.destination) is relay:
            del self._relays[relay.destination]
            log.info("proxy connection to %s:%d closed: %s",
                     relay.destination.host, relay.destination.port, why)
            share = self._shares.get(relay.owner)
            if share is not None:  # forgotten by the sweep once idle
                share.relays.pop(relay, None)
            self._notify()
        if self._by_session.get(relay.session_id) is relay:
            del self._by_session[relay.session_id]
        relay.close()

    # --- shares --------------------------------------------------------------------------

    def _share(self, address: str) -> _Share:
        share = self._shares.get(address)
        if share is None:
            share = self._shares[address] = _Share()
        return share

    def _forget_if_done(self, address: str) -> None:
        """End the address's share (and its pressure episode) once it holds nothing
        and owes nothing."""
        share = self._shares.get(address)
        if share is not None and share.idle() and share.paid_until <= trio.current_time():
            del self._shares[address]

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _pressed(self, address: str, share: _Share, why: str) -> None:
        now = trio.current_time()
        share.last_pressed = now
        if share.pressed:
            return
        share.pressed = True
        self.stats.pressure_episodes += 1
        if now - self._last_log < LOG_INTERVAL:
            self._unlogged += 1
            return
        self._last_log = now
        more = f" ({self._unlogged} more addresses not logged)" if self._unlogged else ""
        self._unlogged = 0
        log.warning("proxy pool under pressure from %s: %s (%d destinations being "
                    "connected for it, %d slots held, %d in the pool of %d)%s",
                    address or "the router", why, len(share.attempts), share.held, len(self),
                    self.limits.max_relays, more)

    def turn(self, address: str) -> float:
        """Seconds `address`'s PRXY must wait for its failures (module doc); 0 when the
        address owes less than its burst. A PRXY that must wait pays for a failure in
        advance (its place in the address's queue), so the PRXYs of an address in debt
        are worked on one after another at `failures_per_second`, however many it sends."""
        share = self._shares.get(address)
        if share is None:
            return 0.0
        limits, now = self.limits, trio.current_time()
        allowance = limits.failure_burst / limits.failures_per_second
        start = share.paid_until - allowance
        if start <= now:
            return 0.0
        share.paid_until += 1 / limits.failures_per_second
        self.stats.slowed += 1
        return start - now

    def failed(self, address: str) -> None:
        """A PRXY of `address` failed that had not paid in advance: its debt grows."""
        share = self._share(address)
        limits, now = self.limits, trio.current_time()
        share.paid_until = max(share.paid_until, now) + 1 / limits.failures_per_second
        if share.paid_until - now > limits.failure_burst / limits.failures_per_second:
            self._pressed(address, share, "PRXYs that keep failing")

    # --- PRXY ----------------------------------------------------------------------------

    def is_own(self, dest: Destination) -> bool:
        return self._is_own(dest)

    def connected(self, dest: Destination, address: str = ANYONE) -> Relay | None:
        """The open connection to `dest`, if there is one (no waiting), for `address`."""
        relay = self._relays.get(dest)
        if relay is None:
            return None
        if not relay.alive:
            self._drop(relay, "closed by the destination")
            return None
        relay.last_used = trio.current_time()
        if address != relay.owner:
            relay.others_used = relay.last_used
        return relay

    async def relay(self, dest: Destination, address: str = ANYONE) -> Relay:
        """The open connection to `dest`, made now if there is none (for `address`, the
        client address asking, within its share); `RelayError` if it cannot be made."""
        deadline = trio.current_time() + self.limits.connect_timeout
        waited = False
        while True:
            relay = self.connected(dest, address)
            if relay is not None:
                return relay
            held = self._held_errors.get((dest, address))
            if held is not None:
                if held[1] > trio.current_time():
                    raise held[0]
                del self._held_errors[(dest, address)]
            attempt = self._attempts.get(dest) or self._start(dest, address)
            if attempt is not None:
                break
            if not waited:
                waited = True
                self.stats.waited += 1
            self._waiting += 1
            try:
                with trio.move_on_at(deadline):
                    await self._changed.wait()
                    continue
            finally:
                self._waiting -= 1
            self.stats.no_room += 1
            share = self._shares.get(address)
            mine = 0 if share is None else share.held
            raise RelayError(NETWORK, f"no room in the proxy's {self.limits.max_relays} "
                                      f"connections ({mine} held for this address)")
        await attempt.done.wait()
        if attempt.relay is None:
            assert attempt.error is not None
            raise attempt.error
        relay = attempt.relay
        relay.last_used = trio.current_time()
        if address != relay.owner:
            relay.others_used = relay.last_used
        return relay

    def _start(self, dest: Destination, address: str) -> _Attempt | None:
        """A new attempt for `address`, or None if it must wait for room."""
        if self._nursery is None:
            raise RelayError(NETWORK, "the proxy is not running")
        limits, share = self.limits, self._share(address)
        if len(share.attempts) >= limits.connects_per_address:
            self._pressed(address, share, "destinations being connected at its bound")
            return None
        if share.held >= limits.held_per_address and not self._drop_own_idle(share):
            self._pressed(address, share, "slots held at its bound")
            return None
        if len(self) >= limits.max_relays and not self._make_room(share):
            self._pressed(address, share, "the pool is full")
            return None
        attempt = _Attempt(address, dest)
        self._attempts[dest] = attempt
        share.attempts[attempt] = None
        self._nursery.start_soon(self._hold, dest, attempt)
        return attempt

    def _drop_own_idle(self, share: _Share) -> bool:
        """Close the address's least recently used idle connection that no other
        address asked for within a connect timeout."""
        stale = trio.current_time() - self.limits.connect_timeout
        idle = [r for r in share.relays if r.in_flight == 0 and r.others_used <= stale]
        if not idle:
            return False
        self._drop(min(idle, key=lambda r: r.last_used), "making room for its asker's next")
        return True

    def _make_room(self, share: _Share) -> bool:
        """Cancel the oldest unfinished connect of the address holding most, if the
        asker holds fewer; else close one of the asker's own idle connections; else
        the least recently used connection nobody used for a connect timeout
        (module doc)."""
        connecting = [s for s in self._shares.values() if s.attempts]
        crowd = max(connecting, key=lambda s: s.held, default=share)
        if crowd is not share and crowd.held > share.held + 1:
            victim = next(iter(crowd.attempts))
            victim.evicted = True
            victim.error = RelayError(NETWORK, "connect cancelled to make room for another "
                                               "client")
            victim.scope.cancel()
            self._finish(victim.destination, victim)  # its slot is the asker's from now
            self.stats.evicted += 1
            return True
        if self._drop_own_idle(share):
            return True
        stale = trio.current_time() - self.limits.connect_timeout
        idle = [r for r in self._relays.values() if r.in_flight == 0 and r.last_used <= stale]
        if not idle:
            return False
        self._drop(min(idle, key=lambda r: r.last_used), "making room for another destination")
        return True

    def _release(self, attempt: _Attempt) -> None:
        """The attempt no longer holds a slot (it finished, or was evicted)."""
        share = self._shares.get(attempt.owner)
        if share is not None and attempt in share.attempts:
            del share.attempts[attempt]
            self._notify()

    async def _hold(self, dest: Destination, attempt: _Attempt) -> None:
        """Connect, then keep the connection open until it is closed or dies."""
        relay: Relay | None = None
        scope = attempt.scope
        scope.deadline = trio.current_time() + self.limits.connect_timeout
        try:
            with scope:
                host = await self.policy.resolve(dest.host, dest.port, attempt.owner)
                options = {} if self._versions is None else {"versions": self._versions}
                address = format_address(dest.key_hash, host, dest.port)
                async with open_client(address, proxy_server=True, **options) as client:
                    if attempt.evicted:  # connected just as its slot was given away
                        return
                    scope.deadline = math.inf  # connected: only close() ends it now
                    relay = Relay(dest, client, self._is_own(dest), trio.current_time(),
                                  owner=attempt.owner)
                    relay._scope = scope
                    self._relays[dest] = relay
                    self._by_session[relay.session_id] = relay
                    self._release(attempt)
                    share = self._shares.get(attempt.owner)
                    if share is not None:
                        share.relays[relay] = None
                    self.connects += 1
                    log.info("proxy connected to %s:%d (v%d)", dest.host, dest.port,
                             client.version)
                    attempt.relay = relay
                    self._finish(dest, attempt)
                    await trio.sleep_forever()
            if relay is None:  # the deadline passed while connecting (or it was evicted)
                why = f"no connection in {self.limits.connect_timeout:g} s"
                self._fail(dest, attempt, RelayError(NETWORK, why))
        except DestinationRefused as e:
            self.stats.refused_destinations += 1
            self._fail(dest, attempt, RelayError(HOST, str(e)))
        except IdentityMismatch as e:  # the reference's TLS check fails the same way
            self._fail(dest, attempt, RelayError(NETWORK, str(e)))
        except HandshakeError as e:
            kind = VERSION if "no common version" in str(e) else NETWORK
            self._fail(dest, attempt, RelayError(kind, str(e)))
        except (ConnectionClosed, OSError) as e:
            if relay is None:
                self._fail(dest, attempt, RelayError(NETWORK, str(e)))
        except Exception as e:  # a bug here must not stop the pool, let alone the router
            log.exception("the proxy's connection to %s:%d failed", dest.host, dest.port)
            if relay is None:
                self._fail(dest, attempt, RelayError(NETWORK, type(e).__name__))
        finally:
            if relay is not None:
                self._drop(relay, "closed")
            elif not attempt.done.is_set():  # cancelled: the router stops
                self._fail(dest, attempt, RelayError(NETWORK, "the proxy is stopping"),
                           hold=False)

    def _finish(self, dest: Destination, attempt: _Attempt) -> None:
        if self._attempts.get(dest) is attempt:
            del self._attempts[dest]
        self._release(attempt)
        attempt.done.set()

    def _fail(self, dest: Destination, attempt: _Attempt, error: RelayError,
              *, hold: bool = True) -> None:
        if attempt.done.is_set():  # evicted: its waiters have their error already
            return
        self.connect_failures += 1
        log.info("proxy cannot connect to %s:%d: %s", dest.host, dest.port, error)
        attempt.error = error
        if hold and self.limits.error_hold > 0:
            self._hold_error((dest, attempt.owner), error)
        self._finish(dest, attempt)
        self._forget_if_done(attempt.owner)

    def _hold_error(self, key: tuple[Destination, str], error: RelayError) -> None:
        """Keep the error for `error_hold`; the oldest go first past the bound."""
        held = self._held_errors
        held.pop(key, None)
        held[key] = (error, trio.current_time() + self.limits.error_hold)
        bound = HELD_ERRORS_PER_SLOT * self.limits.max_relays
        while len(held) > bound:
            del held[next(iter(held))]

    # --- PFWD ----------------------------------------------------------------------------

    def by_session(self, session_id: bytes) -> Relay | None:
        """The open connection PKEY named with `session_id`."""
        relay = self._by_session.get(session_id)
        if relay is None:
            return None
        if not relay.alive:
            self._drop(relay, "closed by the destination")
            return None
        return relay

    async def request(self, relay: Relay, command: Command, corr_id: bytes,
                      address: str = ANYONE) -> Response:
        """Send one command on the relay's connection with the corrId given and return
        its answer; `RelayError(TIMEOUT)` after `answer_timeout`, `RelayError(CLOSED)` if
        the connection ends meanwhile. The client `address` has at most
        `forwards_per_address` commands waiting for answers, on all connections: one
        address's flood queues behind its own commands, not on the connections every
        client shares, where it would hold up the others' answers and could make a
        destination miss its answer timeouts and the connection be closed for all."""
        deadline = trio.current_time() + self.limits.answer_timeout
        share = await self._forwarding_slot(address, deadline)
        share.forwarding += 1
        relay.in_flight += 1
        relay.last_used = trio.current_time()
        try:
            with trio.move_on_at(deadline):
                answer = await relay.client.command(b"", command, corr_id=corr_id)
                relay.timeouts = 0
                return answer
            relay.timeouts += 1
            if relay.timeouts >= TIMEOUTS_BEFORE_CLOSING:
                # A destination that stopped answering: a new connection may do better,
                # and the commands left waiting on this one are let go.
                self._drop(relay, f"{relay.timeouts} answers missed in a row")
            raise RelayError(TIMEOUT, f"no answer in {self.limits.answer_timeout:g} s")
        except ConnectionClosed as e:
            self._drop(relay, str(e))
            raise RelayError(CLOSED, str(e)) from e
        finally:
            share.forwarding -= 1
            share.forwarded.set()
            share.forwarded = trio.Event()
            relay.in_flight -= 1
            relay.last_used = trio.current_time()
            if relay.in_flight == 0 and self._waiting:
                self._notify()  # an idle connection may make room

    async def _forwarding_slot(self, address: str, deadline: float) -> _Share:
        """The address's share once it has fewer than `forwards_per_address` forwarded
        commands in flight; `RelayError(TIMEOUT)` if that does not come by `deadline`."""
        waited = False
        while True:
            share = self._share(address)
            if share.forwarding < self.limits.forwards_per_address:
                return share
            if not waited:
                waited = True
                self.stats.forwards_waited += 1
                self._pressed(address, share, "forwarded commands in flight at its bound")
            with trio.move_on_at(deadline):
                await share.forwarded.wait()
                continue
            raise RelayError(TIMEOUT, f"{share.forwarding} forwarded commands of this "
                                      "address in flight")

    def close_all(self) -> None:
        for relay in list(self._relays.values()):
            self._drop(relay, "the router stops")

