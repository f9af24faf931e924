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

- `max_relays` connections, counting those being made. A PRXY for another
  destination when the pool is full closes the least recently used connection
  that has no request in flight; when every one is busy it fails as a connect
  failure would (`RelayError("network")`), which clients treat as temporary.
- `connect_timeout` for TCP, TLS and the SMP handshake together;
  `answer_timeout` for each forwarded command's answer.
- `idle_timeout`: a connection no request used for this long is closed.
- `error_hold`: after a failed attempt, PRXYs for that destination get the same
  error without a new attempt for this long (the reference's persistErrorInterval),
  so a crowd of clients cannot make the proxy hammer a router that is down.

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

log = logging.getLogger(__name__)

# The port of a destination address without one (docs/protocol.md#private-message-routing).
DEFAULT_SMP_PORT = 5223

# What went wrong, in the words of the reference's client errors
# (docs/protocol.md#private-message-routing, "proxy errors"):
NETWORK = "network"  # no connection: refused, unreachable, wrong identity, connect timeout
HOST = "host"  # no host the proxy may connect to (onion only)
TIMEOUT = "timeout"  # connected, but no answer in time
VERSION = "version"  # no version both speak
CLOSED = "closed"  # the connection ended while the command waited


TIMEOUTS_BEFORE_CLOSING = 3


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

    done: trio.Event = field(default_factory=trio.Event)
    relay: Relay | None = None
    error: RelayError | None = None


@dataclass(frozen=True, slots=True)
class RelayLimits:
    max_relays: int = 1000
    connect_timeout: float = 20.0
    answer_timeout: float = 15.0
    idle_timeout: float = 600.0
    error_hold: float = 30.0


class Relays:
    """The pool; `run` holds its connections and must be running for `relay` to work."""

    def __init__(
        self,
        limits: RelayLimits,
        is_own: Callable[[Destination], bool] = lambda d: False,
        versions: tuple[int, int] | None = None,
    ) -> None:
        self.limits = limits
        self._is_own = is_own
        self._versions = versions
        self._relays: dict[Destination, Relay] = {}
        self._by_session: dict[bytes, Relay] = {}
        self._attempts: dict[Destination, _Attempt] = {}
        self._held_errors: dict[Destination, tuple[RelayError, float]] = {}
        self._nursery: trio.Nursery | None = None
        self.connects = 0  # connections opened since start
        self.connect_failures = 0

    def __len__(self) -> int:
        """Connections open or being made."""
        return len(self._relays) + len(self._attempts)

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
            for dest, (_, until) in list(self._held_errors.items()):
                if until <= now:
                    del self._held_errors[dest]

    def _drop(self, relay: Relay, why: str) -> None:
        if self._relays.get(relay.destination) is relay:
            del self._relays[relay.destination]
            log.info("proxy connection to %s:%d closed: %s",
                     relay.destination.host, relay.destination.port, why)
        if self._by_session.get(relay.session_id) is relay:
            del self._by_session[relay.session_id]
        relay.close()

    # --- PRXY ----------------------------------------------------------------------------

    def is_own(self, dest: Destination) -> bool:
        return self._is_own(dest)

    def connected(self, dest: Destination) -> Relay | None:
        """The open connection to `dest`, if there is one (no waiting)."""
        relay = self._relays.get(dest)
        if relay is None:
            return None
        if not relay.alive:
            self._drop(relay, "closed by the destination")
            return None
        relay.last_used = trio.current_time()
        return relay

    async def relay(self, dest: Destination) -> Relay:
        """The open connection to `dest`, made now if there is none; `RelayError` if it
        cannot be made."""
        relay = self._relays.get(dest)
        if relay is not None:
            if relay.alive:
                relay.last_used = trio.current_time()
                return relay
            self._drop(relay, "closed by the destination")
        held = self._held_errors.get(dest)
        if held is not None:
            if held[1] > trio.current_time():
                raise held[0]
            del self._held_errors[dest]
        attempt = self._attempts.get(dest)
        if attempt is None:
            attempt = self._start(dest)
        await attempt.done.wait()
        if attempt.relay is None:
            assert attempt.error is not None
            raise attempt.error
        attempt.relay.last_used = trio.current_time()
        return attempt.relay

    def _start(self, dest: Destination) -> _Attempt:
        if self._nursery is None:
            raise RelayError(NETWORK, "the proxy is not running")
        if len(self) >= self.limits.max_relays and not self._make_room():
            raise RelayError(NETWORK, f"all {self.limits.max_relays} proxy connections busy")
        attempt = _Attempt()
        self._attempts[dest] = attempt
        self._nursery.start_soon(self._hold, dest, attempt)
        return attempt

    def _make_room(self) -> bool:
        """Close the least recently used connection without requests in flight."""
        idle = [r for r in self._relays.values() if r.in_flight == 0]
        if not idle:
            return False
        self._drop(min(idle, key=lambda r: r.last_used), "making room for another destination")
        return True

    async def _hold(self, dest: Destination, attempt: _Attempt) -> None:
        """Connect, then keep the connection open until it is closed or dies."""
        relay: Relay | None = None
        deadline = trio.current_time() + self.limits.connect_timeout
        try:
            with trio.CancelScope(deadline=deadline) as scope:
                options = {} if self._versions is None else {"versions": self._versions}
                async with open_client(dest.address, proxy_server=True, **options) as client:
                    scope.deadline = math.inf  # connected: only close() ends it now
                    relay = Relay(dest, client, self._is_own(dest), trio.current_time())
                    relay._scope = scope
                    self._relays[dest] = relay
                    self._by_session[relay.session_id] = relay
                    self.connects += 1
                    log.info("proxy connected to %s:%d (v%d)", dest.host, dest.port,
                             client.version)
                    attempt.relay = relay
                    self._finish(dest, attempt)
                    await trio.sleep_forever()
            if relay is None:  # the deadline passed while connecting
                why = f"no connection in {self.limits.connect_timeout:g} s"
                self._fail(dest, attempt, RelayError(NETWORK, why))
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
                self._fail(dest, attempt, RelayError(NETWORK, "the proxy is stopping"))

    def _finish(self, dest: Destination, attempt: _Attempt) -> None:
        if self._attempts.get(dest) is attempt:
            del self._attempts[dest]
        attempt.done.set()

    def _fail(self, dest: Destination, attempt: _Attempt, error: RelayError) -> None:
        self.connect_failures += 1
        log.warning("proxy cannot connect to %s:%d: %s", dest.host, dest.port, error)
        attempt.error = error
        if self.limits.error_hold > 0:
            self._held_errors[dest] = (error, trio.current_time() + self.limits.error_hold)
        self._finish(dest, attempt)

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

    async def request(self, relay: Relay, command: Command, corr_id: bytes) -> Response:
        """Send one command on the relay's connection with the corrId given and return
        its answer; `RelayError(TIMEOUT)` after `answer_timeout`, `RelayError(CLOSED)` if
        the connection ends meanwhile."""
        relay.in_flight += 1
        relay.last_used = trio.current_time()
        try:
            with trio.move_on_after(self.limits.answer_timeout):
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
            relay.in_flight -= 1
            relay.last_used = trio.current_time()

    def close_all(self) -> None:
        for relay in list(self._relays.values()):
            self._drop(relay, "the router stops")

