"""`SMPClient`: the SMP commands as methods, over one `Connection`.

High-level methods raise `SMPError` when the router answers `ERR` and
`BadResponse` when it answers something that does not fit the command. The
low-level `command` / `commands` return every response as it came, `ERR`
included, for tests that probe the router with odd input.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import trio

from router.protocol import crypto
from router.protocol.handshake import SMP_VERSION_MAX, SMP_VERSION_MIN
from router.protocol.types import (
    ACK,
    DEL,
    ERR,
    GET,
    IDS,
    INFO,
    KEY,
    MSG,
    NDEL,
    NEW,
    NID,
    NKEY,
    NO_IDS_HASH,
    NSUB,
    NSUBS,
    OFF,
    OK,
    PING,
    PKEY,
    PONG,
    PRES,
    QUE,
    SEND,
    SKEY,
    SOK,
    SOKS,
    SUB,
    SUBS,
    Command,
    ErrorType,
    ProtocolError,
    Response,
)

from ._address import RouterAddress, parse_address
from ._connection import Connection, Request, Result
from ._errors import BadResponse, ConnectionClosed, SMPError
from ._handshake import Session, client_handshake, new_challenge
from ._proxied import (
    ProxiedSession,
    ProxyError,
    accept_pkey,
    forward_request,
    open_pres,
    prxy_command,
)
from ._service import ServiceCertificate
from ._transport import connect_transport
from ._types import (
    ClientStatistics,
    Event,
    MessageEvent,
    NotifierCredentials,
    RawResponse,
    RecipientQueue,
    UndecryptedMessageEvent,
)

R = TypeVar("R")

DEFAULT_EVENT_BUFFER = 65536


@asynccontextmanager
async def open_client(
    url_or_address: str,
    key_hash: bytes | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    versions: tuple[int, int] = (SMP_VERSION_MIN, SMP_VERSION_MAX),
    event_buffer: float = DEFAULT_EVENT_BUFFER,
    proxy_server: bool = False,
    service_cert: ServiceCertificate | None = None,
) -> AsyncIterator[SMPClient]:
    """Connect, handshake, and yield a ready `SMPClient`; closed on exit.

    `url_or_address` is ``smp://<keyHash>@host:port`` (SMP over TLS, checked
    against the key hash, docs/protocol.md#native-tls) or a ``ws(s)://`` URL with
    `key_hash`. An `ssl_context` makes a WebSocket connection use TLS (wss).
    `event_buffer` bounds the events waiting to be read; when it is full the
    reader waits, so a client that subscribes more queues than that with
    messages waiting must read events while it subscribes. `proxy_server` is
    for a router connecting as a proxy
    (docs/protocol.md#private-message-routing): the hello says so, blocks are not
    encrypted, and `SMPClient.session` keeps what forwarding needs. With
    `service_cert` (an ``smp://`` address only) the client acts for the service of
    that TLS client certificate (docs/protocol.md#client-service): the router's
    service id is `SMPClient.service_id`, and `subscribe_service` sends its figures.
    """
    address = parse_address(url_or_address, key_hash, secure=ssl_context is not None)
    try:
        async with trio.open_nursery() as nursery:
            # The web identity proof is for WebSocket; over TLS the TLS chain proves it.
            challenge = None if address.native else new_challenge()
            client_cert = None
            if service_cert is not None:
                client_cert = (Path(service_cert.cert_file), Path(service_cert.key_file))
            transport = await connect_transport(nursery, address, ssl_context, challenge,
                                                short_session_id=proxy_server,
                                                client_cert=client_cert)
            try:
                session = await client_handshake(
                    transport, address.key_hash, versions, challenge,
                    proxy_server, service_cert,
                )
            except BaseException:
                await transport.aclose()
                raise
            conn = Connection(
                transport, session.version, session.session_id, event_buffer, session.cipher
            )
            client = SMPClient(conn, address)
            client.session = session
            if session.service is not None:
                conn.service = session.service
                client.service_id = session.service.service_id
            await nursery.start(conn.run)
            try:
                yield client
            finally:
                await client.aclose()
    except BaseExceptionGroup as group:
        # The client's own tasks never raise, so the nursery only wraps the one
        # exception of the setup or of the caller's block: hand that back as it was.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class SMPClient:
    """One connection to a router, speaking as recipient, sender and notifier."""

    def __init__(self, conn: Connection, address: RouterAddress) -> None:
        self._conn = conn
        self.address = address
        self.service_id: bytes | None = None
        # The router's count and ids hash of the last SOKS (docs/protocol.md#service-subscriptions).
        self.service_figures: tuple[int, bytes] | None = None
        self.session: Session | None = None  # the handshake's outcome, set by open_client

    # --- connection ----------------------------------------------------------

    @property
    def certificate_service(self) -> bool:
        """Whether this client acts for a service by its TLS client certificate."""
        return self._conn.service is not None

    @property
    def version(self) -> int:
        """The negotiated SMP version (9 or 10)."""
        return self._conn.version

    @property
    def session_id(self) -> bytes:
        """The session id from the server hello; every signature covers it."""
        return self._conn.session_id

    @property
    def closed(self) -> ConnectionClosed | None:
        """Why the connection ended, or None while it is open."""
        return self._conn.closed

    def statistics(self) -> ClientStatistics:
        """Counters of this connection: waiting commands and events, blocks each way."""
        return self._conn.statistics()

    async def aclose(self) -> None:
        """Close the connection; waiting callers get `ConnectionClosed`. Idempotent."""
        await self._conn.aclose()

    # --- queues this client can decrypt for ------------------------------------

    def add_queue(self, queue: RecipientQueue) -> None:
        """Let this connection open the MSGs of a queue created elsewhere."""
        self._conn.queues[queue.recipient_id] = queue

    def forget_queue(self, queue: RecipientQueue) -> None:
        self._conn.queues.pop(queue.recipient_id, None)

    def add_notifier(self, creds: NotifierCredentials) -> None:
        """Let this connection open NMSG metadata for `creds.notifier_id`."""
        self._conn.notifiers[creds.notifier_id] = creds

    # --- low level -------------------------------------------------------------

    async def command(
        self, entity_id: bytes, cmd: Command | bytes, key_seed: bytes | None = None,
        *, corr_id: bytes | None = None,
    ) -> Response:
        """Send one command (bytes are sent as they are), signed when `key_seed` is given.
        `corr_id` is for commands whose corrId is also a nonce (RFWD); unique on this
        connection, else a fresh one is made."""
        return _unwrap((await self._conn.request([(entity_id, cmd, key_seed)],
                                                 corr_id=corr_id))[0])

    async def commands(self, requests: Iterable[Request]) -> list[Response]:
        """Send `(entity_id, cmd, key_seed)` requests packed into as few blocks as fit."""
        results = await self._conn.request(list(requests))
        return [_unwrap(r) for r in results]

    async def send_raw_block(self, block: bytes) -> None:
        """Send `block` as one WebSocket message, as it is."""
        await self._conn.send_raw_block(block)

    async def next_raw_response(self) -> Response:
        """The next response that answers no pending command (e.g. `ERR BLOCK`)."""
        raw = await self._conn.next_raw()
        if raw.response is None:
            raise BadResponse(f"unparsable response {raw.command[:16]!r}")
        return raw.response

    async def next_raw_transmission(self) -> RawResponse:
        """Like `next_raw_response`, with the corrId and entity id it came with."""
        return await self._conn.next_raw()

    # --- events ------------------------------------------------------------------

    async def next_event(self) -> Event:
        """The next pushed event; `ConnectionClosed` once the connection is over."""
        return await self._conn.next_event()

    def next_event_nowait(self) -> Event | None:
        """The next event if one is already waiting, else None."""
        return self._conn.next_event_nowait()

    def events(self) -> AsyncIterator[Event]:
        """Iterate over events; ends when this client closes, raises if the router does."""
        return _EventIterator(self._conn)

    # --- recipient -----------------------------------------------------------------

    async def create_queue(
        self, subscribe: bool = False, snd_secure: bool = True, basic_auth: bytes | None = None
    ) -> RecipientQueue:
        """NEW: a queue with fresh keys, registered so its MSGs are decrypted."""
        seed, auth_key = crypto.new_ed25519()
        dh_priv, dh_key = crypto.new_x25519()
        cmd = NEW(auth_key, dh_key, basic_auth, subscribe, snd_secure)
        ids = _expect(await self.command(b"", cmd, seed), IDS)
        try:
            box = crypto.box_key(dh_priv, ids.srv_dh_key)
        except ProtocolError as e:
            raise BadResponse(f"router DH key unusable: {e}") from e
        queue = RecipientQueue(
            ids.rcv_id, ids.snd_id, seed, auth_key, dh_priv, ids.srv_dh_key, box, ids.snd_secure
        )
        self.add_queue(queue)
        return queue

    async def secure_queue(self, queue: RecipientQueue, sender_key: bytes) -> None:
        """KEY: only `sender_key` may send to the queue from now on."""
        await self._recipient_ok(queue, KEY(sender_key))

    async def subscribe(self, queue: RecipientQueue) -> None:
        """SUB: a waiting message arrives as a `MessageEvent`."""
        self.add_queue(queue)
        resp = (await self._conn.request([_sub(queue)], route_msg=True))[0]
        _expect(_unwrap(resp), OK, SOK, MSG)

    async def subscribe_many(self, queues: Sequence[RecipientQueue]) -> list[ErrorType | None]:
        """SUB for every queue, packed into few blocks; None or the error, per queue."""
        for queue in queues:
            self.add_queue(queue)
        results = await self._conn.request([_sub(q) for q in queues], route_msg=True)
        return [_error_of(_unwrap(r), OK, SOK, MSG) for r in results]

    async def ack(self, queue: RecipientQueue, msg_id: bytes) -> None:
        """ACK: the next message, if the router sends it along, becomes an event."""
        self.add_queue(queue)
        request = (queue.recipient_id, ACK(msg_id), queue.rcv_auth_seed)
        resp = (await self._conn.request([request], route_msg=True))[0]
        _expect(_unwrap(resp), OK, MSG)

    async def ack_many(
        self, acks: Sequence[tuple[RecipientQueue, bytes]]
    ) -> list[ErrorType | None]:
        """ACK several `(queue, msg_id)` at once, packed into few blocks; None or the
        error, per ACK. Next messages the router sends along become events."""
        requests: list[Request] = []
        for queue, msg_id in acks:
            self.add_queue(queue)
            requests.append((queue.recipient_id, ACK(msg_id), queue.rcv_auth_seed))
        results = await self._conn.request(requests, route_msg=True)
        return [_error_of(_unwrap(r), OK, MSG) for r in results]

    async def get(self, queue: RecipientQueue) -> MessageEvent | UndecryptedMessageEvent | None:
        """GET: the head message, or None when the queue is empty."""
        self.add_queue(queue)
        resp = _expect(await self._recipient(queue, GET()), OK, MSG)
        if type(resp) is OK:
            return None
        return self._conn.message_event(queue.recipient_id, resp)  # type: ignore[arg-type]

    async def suspend(self, queue: RecipientQueue) -> None:
        """OFF: senders are refused from now on."""
        await self._recipient_ok(queue, OFF())

    async def delete(self, queue: RecipientQueue) -> None:
        """DEL: the queue and its messages are gone."""
        await self._recipient_ok(queue, DEL())
        self.forget_queue(queue)

    async def info(self, queue: RecipientQueue) -> dict:
        """QUE: the router's debugging view of the queue, as parsed JSON."""
        resp = _expect(await self._recipient(queue, QUE()), INFO)
        try:
            return json.loads(resp.json)
        except ValueError as e:
            raise BadResponse(f"INFO is not JSON: {e}") from e

    # --- sender ------------------------------------------------------------------------

    async def secure_sender(self, sender_id: bytes, sender_seed: bytes, sender_key: bytes) -> None:
        """SKEY: the sender secures the queue with its own key (signed with it)."""
        _expect(await self.command(sender_id, SKEY(sender_key), sender_seed), OK)

    async def send(
        self,
        sender_id: bytes,
        body: bytes,
        *,
        sender_seed: bytes | None = None,
        notify: bool = False,
    ) -> None:
        """SEND `body`; signed when the queue is secured (`sender_seed`)."""
        cmd = SEND(b"T" if notify else b"F", body)
        _expect(await self.command(sender_id, cmd, sender_seed), OK)

    async def ping(self) -> None:
        """PING; the router answers PONG (OK is accepted too,
        docs/protocol.md#reference-differences)."""
        _expect(await self.command(b"", PING()), PONG, OK)

    async def websocket_ping(self) -> None:
        """A WebSocket-level ping (a few bytes, not a 16 KB block), answered by the
        router's WebSocket layer: a cheap keepalive for an idle connection."""
        await self._conn.websocket_ping()

    # --- through this router as a proxy (docs/protocol.md#private-message-routing) ----------

    async def open_proxied_session(
        self, destination: str | RouterAddress, basic_auth: bytes | None = None
    ) -> ProxiedSession:
        """PRXY: ask this router for a route to `destination` (an smp:// address) and
        check the destination's keys it answers with. `ProxyError` if the router
        refuses (``PROXY BASIC_AUTH``, ``PROXY BROKER ...``) or its PKEY does not prove
        the destination's identity."""
        address = destination if isinstance(destination, RouterAddress) else (
            parse_address(destination)
        )
        resp = await self.command(b"", prxy_command(address, basic_auth))
        if type(resp) is ERR:
            raise ProxyError(resp.error)
        return accept_pkey(address, _expect(resp, PKEY), basic_auth)

    async def proxied_command(
        self, session: ProxiedSession, entity_id: bytes, cmd: Command | bytes,
        key_seed: bytes | None = None,
    ) -> Response:
        """PFWD: `cmd` for `entity_id` on the destination of `session`, signed with
        `key_seed`; the destination's answer as it came (its ERR included). An error
        of the proxy itself raises `ProxyError` (``PROXY NO_SESSION`` when the route is
        gone: open a new session)."""
        forward = forward_request(session, entity_id, cmd, key_seed)
        resp = await self.command(session.session_id, forward.pfwd, corr_id=forward.corr_id)
        if type(resp) is ERR:
            raise ProxyError(resp.error)
        return open_pres(session, forward, _expect(resp, PRES).enc_response)

    async def proxied_send(
        self,
        session: ProxiedSession,
        sender_id: bytes,
        body: bytes,
        *,
        sender_seed: bytes | None = None,
        notify: bool = False,
    ) -> None:
        """SEND `body` to a queue on the destination through this router: the
        destination's ERR raises `SMPError`, the proxy's raises `ProxyError`."""
        cmd = SEND(b"T" if notify else b"F", body)
        _expect(await self.proxied_command(session, sender_id, cmd, sender_seed), OK)

    # --- notifications -----------------------------------------------------------------

    async def enable_notifications(self, queue: RecipientQueue) -> NotifierCredentials:
        """NKEY with fresh keys; the returned credentials are registered here."""
        seed, notifier_key = crypto.new_ed25519()
        dh_priv, dh_key = crypto.new_x25519()
        nid = _expect(await self._recipient(queue, NKEY(notifier_key, dh_key)), NID)
        try:
            box = crypto.box_key(dh_priv, nid.srv_ntf_dh_key)
        except ProtocolError as e:
            raise BadResponse(f"router notifier DH key unusable: {e}") from e
        creds = NotifierCredentials(
            queue.recipient_id, nid.notifier_id, seed, notifier_key, dh_priv,
            nid.srv_ntf_dh_key, box,
        )
        self.add_notifier(creds)
        return creds

    async def disable_notifications(self, queue: RecipientQueue) -> None:
        """NDEL: the queue has no notifier any more."""
        await self._recipient_ok(queue, NDEL())

    async def subscribe_notifications(self, creds: NotifierCredentials) -> None:
        """NSUB: NMSGs for this notifier arrive as `NotificationEvent`s."""
        self.add_notifier(creds)
        _expect(await self.command(creds.notifier_id, NSUB(), creds.notifier_seed), OK, SOK)

    # --- service subscriptions (docs/protocol.md#service-subscriptions) ---------------------------

    async def subscribe_service(self, count: int = -1, ids_hash: bytes = NO_IDS_HASH) -> int:
        """SUBS for this client's service; returns how many queues it covers. From v19
        `count` and `ids_hash` are the client's own figures
        (docs/protocol.md#service-subscriptions); `service_figures` has the router's."""
        return await self._service_command(SUBS(count, ids_hash))

    async def subscribe_service_notifications(
        self, count: int = -1, ids_hash: bytes = NO_IDS_HASH
    ) -> int:
        """NSUBS for this client's service; returns how many notifiers it covers."""
        return await self._service_command(NSUBS(count, ids_hash))

    async def _service_command(self, cmd: Command) -> int:
        service = self._conn.service
        if service is None or self.service_id is None:
            raise ValueError("this client was opened without a service certificate")
        seed = service.session_seed  # the session key the certificate signed
        soks = _expect(await self.command(self.service_id, cmd, seed), SOKS)
        self.service_figures = (soks.count, soks.ids_hash)
        return soks.count

    # --- helpers -------------------------------------------------------------------------

    async def _recipient(self, queue: RecipientQueue, cmd: Command) -> Response:
        return await self.command(queue.recipient_id, cmd, queue.rcv_auth_seed)

    async def _recipient_ok(self, queue: RecipientQueue, cmd: Command) -> None:
        _expect(await self._recipient(queue, cmd), OK)


class _EventIterator:
    """`async for` over a connection's events (no async generator to finalize)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __aiter__(self) -> _EventIterator:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self._conn.next_event()
        except ConnectionClosed as e:
            if e.local:
                raise StopAsyncIteration from None
            raise


def _sub(queue: RecipientQueue) -> Request:
    return (queue.recipient_id, SUB(), queue.rcv_auth_seed)


def _unwrap(result: Result) -> Response:
    if isinstance(result, BadResponse):
        raise result
    return result


def _expect(resp: Response, *kinds: type[R]) -> R:
    """`resp` if it is one of `kinds`; `SMPError` for ERR, `BadResponse` otherwise."""
    if isinstance(resp, kinds):
        return resp
    if type(resp) is ERR:
        raise SMPError(resp.error)
    names = "/".join(k.__name__ for k in kinds)
    raise BadResponse(f"expected {names}, got {type(resp).__name__}")


def _error_of(resp: Response, *kinds: type) -> ErrorType | None:
    """None when `resp` is one of `kinds`, the ERR's error otherwise."""
    if isinstance(resp, kinds):
        return None
    if type(resp) is ERR:
        return resp.error
    raise BadResponse(f"unexpected {type(resp).__name__}")

