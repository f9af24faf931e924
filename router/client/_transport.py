"""The connection under the client: SMP blocks straight over TLS for an ``smp://``
address (docs/protocol.md#native-tls), or one block per binary WebSocket message
for a ``ws(s)://`` URL (docs/protocol.md#websocket).

This is the one place that touches TLS, trio-websocket and sockets. Every failure
below is translated here, once, into `ConnectionClosed`; code above it never
catches a trio, trio-websocket or OS exception.
"""

from __future__ import annotations

import base64
import math
import ssl
from pathlib import Path

import trio
import trio_websocket

from router.protocol.block import BLOCK_SIZE

from ._address import RouterAddress
from ._errors import ConnectionClosed, UpgradeRejected

# A received message is one block; the library's limit only has to admit it.
MAX_MESSAGE_SIZE = 4 * BLOCK_SIZE
# Read whole blocks (and a little more) per socket read rather than 4 KiB pieces.
RECEIVE_BUFFER_SIZE = 4 * BLOCK_SIZE
# Blocks trio-websocket may hold before its reader waits for ours.
MESSAGE_QUEUE_SIZE = 16
CLOSE_TIMEOUT = 5.0
CONNECT_TIMEOUT = 10.0  # seconds for TCP, TLS and the WebSocket upgrade

_TRANSPORT_ERRORS = (
    trio_websocket.ConnectionClosed,
    trio_websocket.HandshakeError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
)


SMP_ALPN = "smp/1"


class Transport:
    """One open WebSocket carrying SMP blocks."""

    __slots__ = ("_ws", "_stream")
    # No TLS channel binding: the router's hello brings the session id.
    tls_unique: bytes | None = None
    tls_certificate: bytes | None = None

    def __init__(self, ws: trio_websocket.WebSocketConnection, stream: trio.abc.Stream) -> None:
        self._ws = ws
        # Kept so that closing always releases the socket: trio-websocket's own
        # aclose returns early, stream still open, after an abnormal close.
        self._stream = stream

    @classmethod
    async def connect(
        cls,
        nursery: trio.Nursery,
        address: RouterAddress,
        ssl_context: ssl.SSLContext | None = None,
        challenge: bytes | None = None,
    ) -> Transport:
        """Open the WebSocket; its reader task runs in `nursery` until `aclose`.

        A `challenge` goes into the URL for the router to sign in its hello
        (docs/protocol.md#web-identity-proof).

        TCP, TLS and the upgrade must be done within `CONNECT_TIMEOUT`: a router
        at its limits may close a connection before it answers the upgrade, and
        trio-websocket then waits for the answer for ever.
        """
        stream: trio.abc.Stream | None = None
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                stream = await _open_stream(address, ssl_context)
                ws = await nursery.start(_run_websocket, stream, address, challenge)
        except UpgradeRejected:
            await trio.aclose_forcefully(stream)
            raise
        except (*_TRANSPORT_ERRORS, trio.TooSlowError) as e:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            why = f"no answer in {CONNECT_TIMEOUT:g} s" if isinstance(e, trio.TooSlowError) else e
            raise ConnectionClosed(
                f"cannot connect to {address.host}:{address.port}: {why}"
            ) from e
        return cls(ws, stream)

    async def send_block(self, block: bytes) -> None:
        try:
            await self._ws.send_message(block)
        except _TRANSPORT_ERRORS as e:
            raise ConnectionClosed(_reason(e)) from e

    async def ping(self) -> None:
        """A WebSocket ping, returning once the peer's WebSocket layer has answered."""
        try:
            await self._ws.ping()
        except _TRANSPORT_ERRORS as e:
            raise ConnectionClosed(_reason(e)) from e

    async def receive_block(self) -> bytes:
        """The next message; it must be a binary message of exactly one block."""
        try:
            message = await self._ws.get_message()
        except _TRANSPORT_ERRORS as e:
            raise ConnectionClosed(_reason(e)) from e
        if not isinstance(message, bytes) or len(message) != BLOCK_SIZE:
            raise ConnectionClosed(f"router sent a message of {len(message)} bytes, not a block")
        return message

    async def aclose(self) -> None:
        """Close the WebSocket; gives up politeness after `CLOSE_TIMEOUT`. Idempotent.

        A caller that is already cancelled skips the closing handshake: the
        library's reader task has been cancelled with it, so no reply could be read.
        """
        if trio.current_effective_deadline() != -math.inf:
            with trio.move_on_after(CLOSE_TIMEOUT) as scope:
                scope.shield = True
                try:
                    await self._ws.aclose()
                except _TRANSPORT_ERRORS:
                    pass  # already broken: nothing left to close politely
        await trio.aclose_forcefully(self._stream)


async def _run_websocket(
    stream: trio.abc.Stream,
    address: RouterAddress,
    challenge: bytes | None,
    *,
    task_status: trio.TaskStatus[trio_websocket.WebSocketConnection] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open the WebSocket and run its reader until the connection ends.

    trio-websocket raises a refused upgrade (an HTTP answer such as 502)
    from its reader task, into the nursery the reader runs in. Running the
    reader in a nursery of its own lets that refusal come out of `start` as
    `UpgradeRejected` instead of tearing down the caller's nursery.
    """
    try:
        async with trio.open_nursery() as nursery:
            ws = await trio_websocket.wrap_client_stream(
                nursery,
                stream,
                _host_header(address),
                _resource(address.path, challenge),
                message_queue_size=MESSAGE_QUEUE_SIZE,
                max_message_size=MAX_MESSAGE_SIZE,
                receive_buffer_size=RECEIVE_BUFFER_SIZE,
            )
            task_status.started(ws)
    except BaseExceptionGroup as group:
        rejected = group.subgroup(trio_websocket.ConnectionRejected)
        if rejected is None:
            raise
        refusal = _first_leaf(rejected)
        raise UpgradeRejected(
            refusal.status_code,
            f"{address.host}:{address.port}{address.path} refused the WebSocket upgrade "
            f"with HTTP {refusal.status_code}",
        ) from refusal


def _first_leaf(group: BaseExceptionGroup) -> trio_websocket.ConnectionRejected:
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, trio_websocket.ConnectionRejected)
    return leaf


async def _open_stream(
    address: RouterAddress, ssl_context: ssl.SSLContext | None
) -> trio.abc.Stream:
    if ssl_context is None and not address.secure:
        return await _open_tcp(address)
    context = ssl_context or ssl.create_default_context()
    return await trio.open_ssl_over_tcp_stream(
        address.host, address.port, ssl_context=context, https_compatible=True
    )


async def _open_tcp(address: RouterAddress) -> trio.SocketStream:
    """The TCP connection under a plain WebSocket or SMP over TLS."""
    return await trio.open_tcp_stream(address.host, address.port)


def _resource(path: str, challenge: bytes | None) -> str:
    if challenge is None:
        return path
    value = base64.urlsafe_b64encode(challenge).rstrip(b"=").decode()
    return f"{path}{'&' if '?' in path else '?'}challenge={value}"


def _host_header(address: RouterAddress) -> str:
    return address.host if address.port in (80, 443) else f"{address.host}:{address.port}"


def _reason(e: BaseException) -> str:
    if isinstance(e, trio_websocket.ConnectionClosed) and e.reason is not None:
        r = e.reason
        detail = f": {r.reason}" if r.reason else ""
        return f"connection closed ({r.code} {r.name}{detail})"
    return f"connection broken: {e!r}"


class TlsTransport:
    """One TLS connection carrying SMP blocks with no framing (docs/protocol.md#native-tls).

    The TLS layer checks nothing itself (no certificate authority): the handshake
    checks the router's chain against the key hash, the TLS certificate against the
    chain, and the session id against `tls_unique`.
    """

    __slots__ = ("_stream", "_buffer", "tls_unique", "tls_certificate")

    def __init__(self, stream: trio.SSLStream, tls_unique: bytes, certificate: bytes) -> None:
        self._stream = stream
        self._buffer = b""
        self.tls_unique = tls_unique  # the session id both ends read from TLS
        self.tls_certificate = certificate  # the router's TLS certificate, DER

    @classmethod
    async def connect(cls, address: RouterAddress, short_session_id: bool = False,
                      client_cert: tuple[Path, Path] | None = None) -> TlsTransport:
        """TCP and TLS with ALPN `smp/1`, within `CONNECT_TIMEOUT`.

        `short_session_id` is for a router connecting as a proxy: the session id is the
        entity id of every PFWD, whose transmission fills a block but for about 40
        bytes, and a TLS 1.3 tls-unique is 48 bytes with the SHA-384 suite Python
        cannot keep OpenSSL from choosing. TLS 1.2 with ECDHE and ChaCha20-Poly1305 (a
        suite the reference router offers) gives 12 bytes
        (docs/protocol.md#private-message-routing)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if short_session_id:
            context.maximum_version = ssl.TLSVersion.TLSv1_2
            context.set_ciphers("ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE+AESGCM:ECDHE+CHACHA20")
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the key hash is checked, not a CA
        context.set_alpn_protocols([SMP_ALPN])
        if client_cert is not None:  # a service's (docs/protocol.md#client-service)
            context.load_cert_chain(*client_cert)
        stream: trio.SSLStream | None = None
        try:
            with trio.fail_after(CONNECT_TIMEOUT):
                tcp = await _open_tcp(address)
                stream = trio.SSLStream(tcp, context)
                await stream.do_handshake()
        except (*_TRANSPORT_ERRORS, ssl.SSLError, trio.TooSlowError) as e:
            if stream is not None:
                await trio.aclose_forcefully(stream)
            why = f"no answer in {CONNECT_TIMEOUT:g} s" if isinstance(e, trio.TooSlowError) else e
            raise ConnectionClosed(
                f"cannot connect to {address.host}:{address.port}: {why}"
            ) from e
        except BaseException:  # cancelled mid-handshake: the socket now, not at a GC pass
            if stream is not None:
                await trio.aclose_forcefully(stream)
            raise
        agreed = stream.selected_alpn_protocol()
        tls_unique = stream.get_channel_binding("tls-unique")
        certificate = stream.getpeercert(binary_form=True)
        if agreed != SMP_ALPN or not tls_unique or not certificate:
            await trio.aclose_forcefully(stream)
            raise ConnectionClosed(
                f"{address.host}:{address.port} does not speak SMP over TLS (ALPN {agreed!r})"
            )
        return cls(stream, tls_unique, certificate)

    async def send_block(self, block: bytes) -> None:
        try:
            await self._stream.send_all(block)
        except (*_TRANSPORT_ERRORS, ssl.SSLError) as e:
            raise ConnectionClosed(_reason(e)) from e

    async def ping(self) -> None:
        raise ConnectionClosed("SMP over TLS has no transport ping: send PING")

    async def receive_block(self) -> bytes:
        """The next 16384 bytes of the stream."""
        buffer = self._buffer
        while len(buffer) < BLOCK_SIZE:
            try:
                data = await self._stream.receive_some(RECEIVE_BUFFER_SIZE)
            except (*_TRANSPORT_ERRORS, ssl.SSLError) as e:
                raise ConnectionClosed(_reason(e)) from e
            if not data:
                raise ConnectionClosed("router closed the connection")
            buffer += data
        self._buffer = buffer[BLOCK_SIZE:]
        return buffer[:BLOCK_SIZE]

    async def aclose(self) -> None:
        """Send close_notify within `CLOSE_TIMEOUT`, then close the socket. Idempotent."""
        if trio.current_effective_deadline() != -math.inf:
            with trio.move_on_after(CLOSE_TIMEOUT) as scope:
                scope.shield = True
                try:
                    await self._stream.aclose()
                    return
                except (*_TRANSPORT_ERRORS, ssl.SSLError):
                    pass
        await trio.aclose_forcefully(self._stream)


BlockTransport = Transport | TlsTransport


async def connect_transport(
    nursery: trio.Nursery,
    address: RouterAddress,
    ssl_context: ssl.SSLContext | None = None,
    challenge: bytes | None = None,
    short_session_id: bool = False,
    client_cert: tuple[Path, Path] | None = None,
) -> BlockTransport:
    """SMP over TLS for an ``smp://`` address, a WebSocket for a ``ws(s)://`` URL; a
    client certificate only over TLS."""
    if address.native:
        return await TlsTransport.connect(address, short_session_id, client_cert)
    if client_cert is not None:
        raise ValueError("a client certificate needs an smp:// address (native TLS)")
    return await Transport.connect(nursery, address, ssl_context, challenge)
