"""The router as a proxy: PRXY and PFWD (docs/protocol.md#private-message-routing).

PRXY asks for a session with a destination router: the proxy connects to it (or
reuses its connection, relays.py) and answers PKEY with that connection's session
id, the versions the client may use through it and the destination's certificate
chain and signed session key, which the client checks against the destination's
key hash. PFWD carries one transmission encrypted for the destination; the proxy
wraps it in RFWD on the connection PKEY named, and answers PRES with the
destination's still encrypted answer. The proxy never sees the command, the
destination never sees the client.

Waiting for a destination does not hold up the client's other commands: like the
reference's forked commands, a PRXY that has to connect and every PFWD run in a
task of the client's connection, which puts the answer in the outbox when it
comes; one connection has at most `proxy_client_concurrency` of them, and its next
block waits while it has that many.

The pool of destination connections is shared fairly between client addresses
(relays.py): a PRXY names its client's address (an IPv6 client by its /64), whose
share bounds the destinations being connected for it, and whose failures slow it
down: while the address owes for PRXYs that failed, its next PRXYs wait in such a
task before they are worked on, so that a client asking for routes that fail is
answered at the pace its failures are paid, not in a tight loop. Destinations on
loopback, private and link-local addresses or on this router's machine are
refused (proxy_destinations.py).

Errors, as the reference names them: a PRXY the router does not allow (proxying
off, or not the password) `PROXY BASIC_AUTH`; a PFWD for a session the proxy does
not have (never, or closed since) `PROXY NO_SESSION`; a destination that cannot be
reached `PROXY BROKER NETWORK` (refused, down, wrong identity, no connection in
time), that does not answer in time `PROXY BROKER TIMEOUT`, with no host reachable
without Tor or a host inside (proxy_destinations.py) `PROXY BROKER HOST`, with no
common version `PROXY BROKER TRANSPORT VERSION`; an `ERR e` of the destination
reaches the client as `PROXY PROTOCOL e`.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from router.protocol import proxying, versions
from router.protocol.codec import encode_response_transmission
from router.protocol.errors import (
    BROKER_HOST,
    BROKER_NETWORK,
    BROKER_TIMEOUT,
    TRANSPORT_NO_AUTH,
    TRANSPORT_VERSION,
    proxy_broker_error,
    proxy_protocol_error,
    proxy_transport_error,
)
from router.protocol.handshake import SMP_VERSION_MAX
from router.protocol.types import (
    ERR,
    INTERNAL,
    PFWD,
    PKEY,
    PRES,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    PRXY,
    RFWD,
    RRES,
    ErrorType,
    ProtocolError,
    Response,
)

from ..edge.admission import address_key
from .limits import remote_host
from .proxy_destinations import DestinationRefused
from .relays import (
    CLOSED,
    HOST,
    NETWORK,
    TIMEOUT,
    VERSION,
    Destination,
    Relay,
    RelayError,
    Relays,
    destination,
)
from .verified import Verified, error_transmission

if TYPE_CHECKING:
    from ..settings.config import RouterConfig
    from .counters import Counters
    from .subscriptions import ClientSubscriptions

log = logging.getLogger(__name__)

RFWD_CORR_ID_SIZE = 24  # the RFWD's corrId is its box nonce
# The versions a client may speak to a destination through this proxy: from 8 to this
# router's current one, as the reference caps them (proxiedSMPRelayVRange) so that a
# client's version does not tell it apart.
PROXIED_VERSIONS = (versions.SENDING_PROXY, SMP_VERSION_MAX)
# What the client is told of a destination the proxy could not use (`PROXY BROKER ...`);
# the temporary failures are the statistics' connect errors, the others "other".
_BROKER = {NETWORK: BROKER_NETWORK, CLOSED: BROKER_NETWORK, TIMEOUT: BROKER_TIMEOUT,
           HOST: BROKER_HOST}
_TEMPORARY = (NETWORK, CLOSED, TIMEOUT)


def relay_error(e: RelayError) -> ErrorType:
    if e.kind == VERSION:
        return proxy_transport_error(TRANSPORT_VERSION)
    return proxy_broker_error(_BROKER[e.kind])


class Proxy:
    """PRXY and PFWD for the command handlers; `relays` must be running."""

    def __init__(
        self, relays: Relays, counters: Counters, config: Callable[[], RouterConfig]
    ) -> None:
        self.relays = relays
        self._counters = counters
        self._config = config  # read per command: enable and password change live
        self._limiters: dict[int, trio.CapacityLimiter] = {}  # connection id -> its forks

    def forget(self, conn_id: int) -> None:
        """The connection closed."""
        self._limiters.pop(conn_id, None)

    # --- PRXY ----------------------------------------------------------------------------

    async def prxy(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        cmd: PRXY = verified.command  # type: ignore[assignment]
        if not self._allowed(cmd.basic_auth):
            return _answer(verified, PROXY_BASIC_AUTH)
        address = client_address(client)
        wait = self.relays.turn(address)
        if wait > 0:  # it owes for failures: it waits its turn first
            await self._fork(client, verified, self._slowed, verified, address, wait)
            return []
        route = self._route(cmd, address)
        if not isinstance(route, Destination):
            return _answer(verified, route)
        relay = self.relays.connected(route, address)
        if relay is not None:  # the common case: answered at once
            return _answer(verified, self._session(relay))
        await self._fork(client, verified, self._connect_and_answer, verified, route, address)
        return []

    def _route(self, cmd: PRXY, address: str, paid: bool = False) -> Destination | ErrorType:
        """The destination PRXY names, or why the proxy will not connect to it."""
        try:
            dest = destination(cmd.hosts, cmd.port, cmd.key_hash)
            self.relays.policy.check_literal(dest.host)
        except RelayError as e:
            error, failure = relay_error(e), _failure(e)
        except DestinationRefused as e:
            log.debug("PRXY refused: %s", e)
            self.relays.stats.refused_destinations += 1
            error, failure = proxy_broker_error(BROKER_HOST), "errors_other"
        else:
            return dest
        self._counters.count_proxy("sessions", "requests", False)
        self._counters.count_proxy("sessions", failure, False)
        if not paid:
            self.relays.failed(address)
        return error

    async def _slowed(self, verified: Verified, address: str, wait: float) -> bytes:
        """A PRXY that waited its turn, its failure paid in advance (`Relays.turn`)."""
        await trio.sleep(wait)
        route = self._route(verified.command, address, paid=True)  # type: ignore[arg-type]
        if not isinstance(route, Destination):
            return _encode(verified, route)
        return await self._connect_and_answer(verified, route, address, paid=True)

    def _allowed(self, basic_auth: bytes | None) -> bool:
        config = self._config()
        if not config.allow_proxy:
            return False
        password = config.proxy_password or config.password
        return password is None or (
            basic_auth is not None and hmac.compare_digest(password, basic_auth)
        )

    async def _connect_and_answer(self, verified: Verified, dest: Destination,
                                  address: str, paid: bool = False) -> bytes:
        try:
            relay = await self.relays.relay(dest, address)
        except RelayError as e:
            own = self.relays.is_own(dest)
            self._counters.count_proxy("sessions", "requests", own)
            self._counters.count_proxy("sessions", _failure(e), own)
            if not paid:
                self.relays.failed(address)
            return _encode(verified, relay_error(e))
        return _encode(verified, self._session(relay))

    def _session(self, relay: Relay) -> Response | ErrorType:
        """PKEY for the relay's connection, or why the client cannot use it."""
        counters, own = self._counters, relay.own
        counters.count_proxy("sessions", "requests", own)
        session = relay.client.session
        assert session is not None
        hello = session.server_hello
        low = max(hello.min_version, PROXIED_VERSIONS[0])
        high = min(hello.max_version, PROXIED_VERSIONS[1])
        if low > high or relay.version < versions.SENDING_PROXY:
            counters.count_proxy("sessions", "errors_compat", own)
            return proxy_transport_error(TRANSPORT_VERSION)
        if hello.signed_key is None or not hello.cert_chain or _secret(relay) is None:
            counters.count_proxy("sessions", "errors_compat", own)
            return proxy_transport_error(TRANSPORT_NO_AUTH)
        counters.count_proxy("sessions", "successes", own)
        return PKEY(relay.session_id, low, high, tuple(hello.cert_chain), hello.signed_key)

    # --- PFWD ----------------------------------------------------------------------------

    async def pfwd(self, client: ClientSubscriptions, verified: Verified) -> list[bytes]:
        relay = self.relays.by_session(verified.entity_id)
        if relay is None:
            self._counters.count_proxy("messages", "requests", False)
            self._counters.count_proxy("messages", "errors_connect", False)
            return _answer(verified, PROXY_NO_SESSION)
        self._counters.count_proxy("messages", "requests", relay.own)
        await self._fork(client, verified, self._forward, verified, relay,
                         client_address(client))
        return []

    async def _forward(self, verified: Verified, relay: Relay, address: str) -> bytes:
        cmd: PFWD = verified.command  # type: ignore[assignment]
        counters, own = self._counters, relay.own
        secret = _secret(relay)
        assert secret is not None  # PKEY was given for this relay only with one
        corr_id = os.urandom(RFWD_CORR_ID_SIZE)
        body = proxying.wrap_forward(
            secret, corr_id, verified.corr_id, cmd.version, cmd.client_key, cmd.enc_transmission
        )
        try:
            answer = await self.relays.request(relay, RFWD(body), corr_id, address)
        except RelayError as e:
            counters.count_proxy("messages", "errors_other", own)
            return _encode(verified, relay_error(e))
        if isinstance(answer, RRES):
            try:
                _, enc_response = proxying.unwrap_forward_response(
                    secret, corr_id, answer.enc_fwd_response)
            except ProtocolError as e:
                counters.count_proxy("messages", "errors_other", own)
                return _encode(verified, e.error)
            counters.count_proxy("messages", "successes", own)
            return _encode(verified, PRES(enc_response))
        if isinstance(answer, ERR):  # the destination's own refusal, forwarded
            counters.count_proxy("messages", "successes", own)
            return _encode(verified, proxy_protocol_error(answer.error))
        counters.count_proxy("messages", "errors_other", own)
        log.warning("destination %s:%d answered RFWD with %s", relay.destination.host,
                    relay.destination.port, type(answer).__name__)
        return _encode(verified, proxy_broker_error(b"UNEXPECTED", type(answer).__name__))

    # --- forks ---------------------------------------------------------------------------

    async def _fork(
        self, client: ClientSubscriptions, verified: Verified,
        work: Callable[..., Awaitable[bytes]], *args: object,
    ) -> None:
        """Run `work` in a task of the client's connection; its answer goes to the outbox.
        Waits (holding up the connection's next block) while it has as many running as
        `proxy_client_concurrency`."""
        conn = client.conn
        limiter = self._limiters.get(conn.id)
        if limiter is None:
            limiter = trio.CapacityLimiter(self._config().proxy_client_concurrency)
            self._limiters[conn.id] = limiter
        token = object()
        await limiter.acquire_on_behalf_of(token)

        async def run() -> None:
            try:
                try:
                    answer = await work(*args)
                except Exception:
                    log.exception("%s from %r failed", type(verified.command).__name__, conn)
                    answer = error_transmission(verified.corr_id, verified.entity_id,
                                                INTERNAL, verified.version)
            finally:
                limiter.release_on_behalf_of(token)
            await conn.push([answer])

        conn.spawn(run)


def client_address(client: ClientSubscriptions) -> str:
    """The client's address as the pool's shares count it (an IPv6 client by its /64)."""
    return address_key(remote_host(client.conn.transport.remote))


def _secret(relay: Relay) -> bytes | None:
    """The box key of RFWD on this relay: the proxy's hello key with the destination's
    session key (docs/protocol.md#private-message-routing), made once."""
    if relay.forward_secret is None:
        session = relay.client.session
        if session is None or session.client_private is None or session.router_dh_key is None:
            return None
        try:
            relay.forward_secret = proxying.session_secret(
                session.client_private, session.router_dh_key)
        except ProtocolError:
            return None
    return relay.forward_secret


def _failure(e: RelayError) -> str:
    return "errors_connect" if e.kind in _TEMPORARY else "errors_other"


def _encode(verified: Verified, resp: Response | ErrorType) -> bytes:
    if isinstance(resp, ErrorType):
        return error_transmission(verified.corr_id, verified.entity_id, resp, verified.version)
    return encode_response_transmission(verified.corr_id, verified.entity_id, resp,
                                        verified.version)


def _answer(verified: Verified, resp: Response | ErrorType) -> list[bytes]:
    return [_encode(verified, resp)]

