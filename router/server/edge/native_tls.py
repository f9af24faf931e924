"""Native SMP over TLS beside WebSocket on the router's one port
(docs/protocol.md#native-tls).

SimpleX apps speak SMP blocks straight over TLS (ALPN `smp/1`); browsers speak
HTTP and WebSocket. One listener serves both, and tells them apart before the
request head is read:

1. The first byte of a connection: a TLS handshake record (0x16) is TLS; on a
   listener without a configured certificate anything else is plain HTTP
   (ws://). A listener with a configured certificate is TLS only.
2. The client hello's ALPN extension, read before OpenSSL sees it: a client
   offering `smp/1` gets the router's identity chain as its TLS certificate
   (the online certificate, then the identity certificate whose SHA-256 is the
   key hash in the address); any other gets the configured web certificate if
   there is one, else the identity chain too. (The reference chooses by the
   server name instead; browsers and the project's wss:// clients to an IP
   address send none, so the ALPN offer is what tells them apart here.)
3. The ALPN agreed in the TLS handshake: `smp/1` is SMP with every version the
   router serves; `http/1.1` is HTTP. A client that agreed none is SMP with the
   legacy range (as the reference offers a client without ALPN only its oldest
   version), unless it speaks first: an SMP client waits for the router's hello,
   an HTTP client sends its request at once.

`TlsBlockTransport` carries 16384-byte blocks with no framing. The session id
of the SMP handshake is the TLS `tls-unique` channel binding, which both ends
read from their own TLS state. A silent client is found by TCP keepalive with
the listener's keepalive interval and timeout, since SMP over TLS has no ping
frame of its own (clients send PING commands).
"""

from __future__ import annotations

import math
import select
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio
from OpenSSL import SSL

from router.protocol.block import BLOCK_SIZE

from ..settings.edge_limits import EdgeLimits
from .arrivals import arrivals
from .block_stream import (
    RECEIVE_BUFFER_SIZE,
    STREAM_GONE,
    StalledPeer,
    TransportClosed,
    WritesSocketNow,
    send_on_socket,
)
from .identity import RouterIdentity
from .openssl_tls import OpenSslStream, identity_openssl_context, service_chain_error

SMP_ALPN = "smp/1"
HTTP_ALPN = "http/1.1"
TLS_HANDSHAKE_RECORD = 0x16
_RECORD_HEADER = 5
# A client hello bigger than this (one record, with room for large key shares) is
# not read for its extensions; it gets the default certificate.
MAX_CLIENT_HELLO_RECORD = 16384 + 256
# How long a TLS client that agreed no ALPN has to speak first before it is taken
# for an SMP client waiting for the router's hello.
NO_ALPN_WAIT = 0.5
_PEEK_INTERVAL = 0.01  # seconds between two looks at a client hello still arriving
_EXT_SERVER_NAME = 0
_EXT_ALPN = 16
_KEEPALIVE_PROBES = 3


# --- the client hello, read for the certificate choice --------------------------------


@dataclass(frozen=True, slots=True)
class ClientHelloOffer:
    """What a TLS client hello offers that decides the certificate."""

    alpn: tuple[str, ...]
    server_name: bool  # a server name (SNI) was sent


def read_client_hello_offer(record: bytes) -> ClientHelloOffer | None:
    """The ALPN names and whether a server name is sent, from the first TLS record
    (RFC 8446 §4.1.2); None if the record is not a whole client hello."""
    try:
        if record[0] != TLS_HANDSHAKE_RECORD or record[_RECORD_HEADER] != 1:  # client_hello
            return None
        body_length = int.from_bytes(record[_RECORD_HEADER + 1:_RECORD_HEADER + 4], "big")
        at = _RECORD_HEADER + 4 + 2 + 32  # legacy_version, random
        end = _RECORD_HEADER + 4 + body_length
        if end > len(record):
            return None
        at += 1 + record[at]  # legacy_session_id
        at += 2 + int.from_bytes(record[at:at + 2], "big")  # cipher_suites
        at += 1 + record[at]  # legacy_compression_methods
        if at == end:
            return ClientHelloOffer((), False)
        extensions_end = at + 2 + int.from_bytes(record[at:at + 2], "big")
        at += 2
        alpn: tuple[str, ...] = ()
        server_name = False
        while at + 4 <= extensions_end:
            kind = int.from_bytes(record[at:at + 2], "big")
            length = int.from_bytes(record[at + 2:at + 4], "big")
            data = record[at + 4:at + 4 + length]
            at += 4 + length
            if kind == _EXT_SERVER_NAME:
                server_name = True
            elif kind == _EXT_ALPN:
                alpn = _alpn_names(data)
        return ClientHelloOffer(alpn, server_name)
    except IndexError:
        return None


def _alpn_names(data: bytes) -> tuple[str, ...]:
    names = []
    at = 2
    while at < len(data):
        length = data[at]
        names.append(data[at + 1:at + 1 + length].decode("latin-1"))
        at += 1 + length
    return tuple(names)


# --- the TLS contexts --------------------------------------------------------------------


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_TICKET
    context.num_tickets = 0  # no resumption: every session id is a fresh tls-unique
    return context


def identity_tls_context(identity: RouterIdentity) -> SSL.Context:
    """The TLS context whose certificate chain is the router's identity chain: the
    online certificate (its key signs the handshake) and the identity certificate.
    A pyOpenSSL context, so that a service's self-signed client certificate can be
    accepted (openssl_tls.py)."""
    return identity_openssl_context(identity)


def web_tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The TLS context of the configured (web) certificate chain and its key."""
    context = _server_context()
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols([HTTP_ALPN])
    return context


# --- telling the two apart -------------------------------------------------------------


class ReplayedStream(trio.abc.Stream):
    """A stream that gives back the bytes read ahead of it before reading on (the
    request a TLS client without ALPN sent while the router waited to see)."""

    def __init__(self, inner: trio.abc.Stream, head: bytes) -> None:
        self.inner = inner
        self._head = head

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._head:
            size = len(self._head) if max_bytes is None else max_bytes
            data, self._head = self._head[:size], self._head[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self.inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class NativeEdge:
    """Decides what a connection on the router's port is: HTTP (plain or TLS), or
    SMP over TLS (a `TlsBlockTransport`)."""

    def __init__(
        self, identity_context: SSL.Context, web_context: ssl.SSLContext | None,
        limits: EdgeLimits,
    ) -> None:
        self._identity = identity_context
        self._web = web_context
        self._limits = limits

    async def open(
        self, raw: trio.SocketStream, remote: str, on_established: Callable[[], None],
    ) -> trio.abc.Stream | TlsBlockTransport | None:
        """The HTTP stream, the SMP transport, or None for a client that left or
        failed TLS. Runs within the caller's upgrade deadline."""
        head = await _peek_first_record(raw)
        if not head:
            return None
        if head[0] != TLS_HANDSHAKE_RECORD:
            return raw if self._web is None else None
        context = self._context_for(read_client_hello_offer(head))
        tls: trio.SSLStream | OpenSslStream
        if isinstance(context, SSL.Context):
            tls = OpenSslStream(raw, context)
        else:
            tls = trio.SSLStream(raw, context, server_side=True)
        # The handshake's first step (the key exchange, the certificate's signature) is
        # the costliest work a connection brings: a crowd reconnecting takes turns.
        await arrivals().admit_later()
        try:
            await tls.do_handshake()
        except (*STREAM_GONE, ssl.SSLError):
            return None
        agreed = tls.selected_alpn_protocol()
        if agreed == HTTP_ALPN:
            return tls
        if agreed is None and context is not self._web:
            with trio.move_on_after(NO_ALPN_WAIT):
                try:
                    early = await tls.receive_some(RECEIVE_BUFFER_SIZE)
                except (*STREAM_GONE, ssl.SSLError):
                    return None
                return ReplayedStream(tls, early) if early else None
        elif agreed is None:
            return tls
        peer_chain: tuple[bytes, ...] = ()
        if isinstance(tls, OpenSslStream):
            session_id = tls.tls_unique()
            peer_chain = tls.peer_chain()
            if service_chain_error(peer_chain) is not None:
                await trio.aclose_forcefully(tls)  # the reference rejects it in the handshake
                return None
        else:
            session_id = tls.get_channel_binding("tls-unique")
        if session_id is None:
            return None
        _keep_alive(raw, self._limits)
        transport = TlsBlockTransport(
            tls, remote, self._limits, session_id, legacy=agreed is None,
            on_established=on_established,
        )
        transport.peer_chain = peer_chain
        return transport

    def _context_for(self, offer: ClientHelloOffer | None) -> SSL.Context | ssl.SSLContext:
        if self._web is None:
            return self._identity
        if offer is not None and SMP_ALPN in offer.alpn:
            return self._identity
        return self._web


async def _peek_first_record(raw: trio.SocketStream) -> bytes:
    """The first bytes of the connection, left in the socket: the whole first TLS
    record (up to `MAX_CLIENT_HELLO_RECORD`) if they begin one, else what came first;
    b"" if the peer left. Peeking keeps the socket as it was for whoever reads it."""
    sock = raw.socket
    wanted = _RECORD_HEADER
    while True:
        try:
            head = await sock.recv(wanted, socket.MSG_PEEK)
        except OSError:
            return b""
        if not head or head[0] != TLS_HANDSHAKE_RECORD:
            return head
        if len(head) >= _RECORD_HEADER:
            wanted = min(_RECORD_HEADER + int.from_bytes(head[3:5], "big"),
                         MAX_CLIENT_HELLO_RECORD)
            if len(head) >= wanted:
                return head
        # The rest of the record is on its way: peeking again at once would spin, and
        # a peek cannot see the end of the stream behind the bytes it shows.
        if _peer_has_left(sock.fileno()):
            return b""
        await trio.sleep(_PEEK_INTERVAL)


def _peer_has_left(fd: int) -> bool:
    """Whether the peer shut its side (Linux's POLLRDHUP, seen with data still unread)."""
    rdhup = getattr(select, "POLLRDHUP", 0)
    if not rdhup:
        return False
    poller = select.poll()
    poller.register(fd, rdhup)
    return any(events & (rdhup | select.POLLHUP | select.POLLERR)
               for _, events in poller.poll(0))


def _keep_alive(raw: trio.SocketStream, limits: EdgeLimits) -> None:
    """TCP keepalive: silent for `keepalive_interval`, then probes for `keepalive_timeout`."""
    sock = raw.socket
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE,
                            max(1, int(limits.keepalive_interval)))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL,
                            max(1, int(limits.keepalive_timeout / _KEEPALIVE_PROBES)))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, _KEEPALIVE_PROBES)
    except OSError:
        pass  # the peer is already gone: the first read says so


# --- the transport ----------------------------------------------------------------------


class TlsBlockTransport(WritesSocketNow):
    """Blocks in and out of one TLS connection, no framing (docs/protocol.md#native-tls).

    A block's bytes, once they begin, must all arrive within `message_timeout`;
    a peer that does not take a write within `stalled_timeout` is dropped.

    Over a plain TCP socket (the listener's case) the TLS state that
    `trio.SSLStream` made in the handshake is driven here, as the WebSocket
    transport drives its framing: a read is one pass of the scheduler (the
    wake-up when the socket became readable, or one pass when the bytes were
    there already), and a write the socket takes at once costs none; only a
    write the peer is slow to take waits, for `stalled_timeout` at most. No lock:
    the connection's writer sends one write at a time, and TLS records that a
    read makes (a TLS 1.3 key update's answer) are sent by whoever is writing
    (`_write_pending`). On any other stream the `SSLStream` does the I/O.
    """

    __slots__ = (
        "_stream", "_tls", "_incoming", "_outgoing", "_socket", "_limits",
        "_on_established", "_buffer", "_writing", "_unsent", "_arrivals",
        "remote", "stalled", "web_challenge", "session_id", "legacy", "peer_chain",
    )

    def __init__(
        self,
        stream: trio.SSLStream | OpenSslStream,
        remote: str,
        limits: EdgeLimits,
        session_id: bytes,
        *,
        legacy: bool,
        on_established: Callable[[], None] | None = None,
    ) -> None:
        self._stream = stream
        self._limits = limits
        self._on_established = on_established
        self._buffer = b""
        self._writing = False  # a task is in `_write_pending`
        self._unsent = b""  # what the socket did not take of a `send_blocks_now`
        self._arrivals = arrivals()
        self._tls, self._incoming, self._outgoing, self._socket = _tls_state(stream)
        self.remote = remote
        self.stalled = False
        self.web_challenge: bytes | None = None
        self.session_id = session_id  # tls-unique
        self.legacy = legacy  # no ALPN agreed: the legacy version range
        # The client's certificate chain, leaf first (a service's: docs/protocol.md#client-service).
        self.peer_chain: tuple[bytes, ...] = ()

    def established(self) -> None:
        if self._on_established is not None:
            self._on_established()
            self._on_established = None

    async def receive_block(self) -> bytes:
        if self._socket is None:
            return await self._receive_block_from_stream()
        buffer = self._buffer
        timeout = self._limits.message_timeout
        tls, incoming, sock = self._tls, self._incoming, self._socket
        # Waiting for a block is unbounded (TCP keepalive finds a dead peer): an idle
        # connection waits with no cancel scope, and in this frame, not a helper's
        # (each is memory it keeps). Once a block's first bytes are in, the rest has
        # `message_timeout`.
        deadline = trio.current_time() + timeout if buffer else math.inf
        read_socket = waited = False
        while len(buffer) < BLOCK_SIZE:
            data = _read_nowait(tls)
            if self._outgoing.pending:  # the read made records to send (a key update's)
                await self._write_pending()
            if data is None:  # the TLS layer needs more bytes from the socket
                # Not inside an `except`: the caught error, its traceback and their
                # frames would stay alive as long as the wait.
                read_socket = True
                while (raw := _recv_nowait(sock)) is None:
                    waited = True
                    if deadline == math.inf:
                        await trio.lowlevel.wait_readable(sock)
                    else:
                        with trio.move_on_at(deadline) as scope:
                            await trio.lowlevel.wait_readable(sock)
                        if scope.cancelled_caught:
                            raise TransportClosed(f"block not complete in {timeout} s")
                    # Readable: a place in this pass's arrivals before the read, so
                    # that a crowd's blocks are not all read in one pass; a peer that
                    # has gone waits behind connected clients' blocks (arrivals.py).
                    await self._arrivals.admit_read(sock)
                if deadline == math.inf:
                    deadline = trio.current_time() + timeout
                if raw:
                    incoming.write(raw)
                else:
                    incoming.write_eof()  # the next read says how the peer left
                continue
            if not data:
                raise TransportClosed("peer closed the connection")
            buffer += data
        if read_socket and not waited:
            # Read without waiting: still one pass of the scheduler and a place in the
            # arrivals per read, so that clients that keep their sockets full do not
            # hold up the others. (A block that was in already, as a second block of
            # one read, costs neither.)
            await self._arrivals.admit_after_pass()
        self._buffer = buffer[BLOCK_SIZE:]
        return buffer[:BLOCK_SIZE]

    def block_ready(self) -> bool:
        """Whether a whole block is in already (decrypting what the socket gave, no
        I/O): `receive_block` then returns it without waiting."""
        buffer = self._buffer
        if len(buffer) >= BLOCK_SIZE:
            return True
        if self._tls is None:
            return False
        while len(buffer) < BLOCK_SIZE:
            try:
                data = self._tls.read(RECEIVE_BUFFER_SIZE)
            except ssl.SSLError:  # more is needed, or the next read says what went wrong
                break
            if not data:
                break
            buffer += data
        self._buffer = buffer
        return len(buffer) >= BLOCK_SIZE

    async def _receive_block_from_stream(self) -> bytes:
        buffer = self._buffer
        timeout = self._limits.message_timeout
        deadline = trio.current_time() + timeout if buffer else math.inf
        while len(buffer) < BLOCK_SIZE:
            try:
                if deadline == math.inf:
                    data = await self._stream.receive_some(RECEIVE_BUFFER_SIZE)
                    deadline = trio.current_time() + timeout
                else:
                    with trio.move_on_at(deadline) as scope:
                        data = await self._stream.receive_some(RECEIVE_BUFFER_SIZE)
                    if scope.cancelled_caught:
                        raise TransportClosed(f"block not complete in {timeout} s")
            except (*STREAM_GONE, ssl.SSLError) as e:
                raise TransportClosed("peer closed the connection") from e
            if not data:
                raise TransportClosed("peer closed the connection")
            buffer += data
        self._buffer = buffer[BLOCK_SIZE:]
        return buffer[:BLOCK_SIZE]

    async def send_block(self, block: bytes) -> None:
        await self.send_blocks([block])

    async def send_blocks(self, blocks: list[bytes]) -> None:
        """Send blocks in one write; a peer that does not take them in time is dropped."""
        data = blocks[0] if len(blocks) == 1 else b"".join(blocks)
        if self._socket is None:
            with trio.move_on_after(self._limits.stalled_timeout) as scope:
                try:
                    await self._stream.send_all(data)
                except (*STREAM_GONE, ssl.SSLError) as e:
                    raise TransportClosed("peer closed the connection") from e
            if scope.cancelled_caught:
                self.stalled = True
                raise TransportClosed(f"peer did not read for {self._limits.stalled_timeout} s")
            return
        self._encrypt(data)
        del data
        await self._write_pending()

    def _encrypt(self, data: bytes) -> None:
        """Into the outgoing memory buffer: always whole."""
        assert self._tls is not None
        if data:
            try:
                self._tls.write(data)
            except ssl.SSLError as e:
                raise TransportClosed("the TLS connection failed") from e

    def _take_data(self) -> bytes:
        """What is to be written next, in order: the rest of a write made now, then
        the records made since."""
        assert self._outgoing is not None
        data = self._outgoing.read()
        if self._unsent:
            data, self._unsent = self._unsent + data, b""
        return data

    def can_send_now(self) -> bool:
        return self._socket is not None

    def send_blocks_now(self, blocks: list[bytes]) -> bool:
        """Encrypt `blocks` and write what the socket takes now, without waiting (from
        any task: nothing here yields); False when some is left for the next write."""
        self._encrypt(blocks[0] if len(blocks) == 1 else b"".join(blocks))
        return self._write_queued_now()

    async def _write_pending(self) -> None:
        """Send the TLS records waiting in the outgoing buffer; if another task is
        writing, it does (it looks again before it returns)."""
        if self._writing:
            return
        assert self._outgoing is not None
        self._writing = True
        try:
            while data := self._take_data():
                await self._send_all(data)
                del data
        finally:
            self._writing = False

    async def _send_all(self, data: bytes) -> None:
        """Write `data`; a peer that does not take it within `stalled_timeout` is dropped."""
        assert self._socket is not None
        try:
            await send_on_socket(self._socket, data, self._limits.stalled_timeout)
        except StalledPeer:
            self.stalled = True
            raise

    async def aclose(self, timeout: float) -> None:
        """Send TLS close_notify within `timeout` (none if zero), then close the socket."""
        if self._socket is None:
            if timeout > 0 and not self.stalled:
                with trio.move_on_after(timeout):
                    try:
                        await self._stream.aclose()
                        return
                    except (*STREAM_GONE, ssl.SSLError):
                        pass
            await trio.aclose_forcefully(self._stream)
            return
        if timeout > 0 and not self.stalled and not self._writing:
            assert self._tls is not None
            with trio.move_on_after(timeout):
                try:
                    self._tls.unwrap()  # puts close_notify in the outgoing buffer
                except ssl.SSLWantReadError:
                    pass  # the peer's close_notify is not waited for
                except ssl.SSLError:
                    pass
                try:
                    await self._write_pending()
                except TransportClosed:
                    pass
        await trio.aclose_forcefully(self._stream.transport_stream)


def _tls_state(
    stream: trio.SSLStream | OpenSslStream,
) -> tuple[ssl.SSLObject | None, ssl.MemoryBIO | None, ssl.MemoryBIO | None, socket.socket | None]:
    """The TLS object, its two memory buffers and the non-blocking socket under a
    `trio.SSLStream` over plain TCP, taken over after the handshake; Nones for any
    other stream. trio keeps them as private attributes; without them the stream's
    own methods do the I/O, a few scheduler passes more per read and per write."""
    none = (None, None, None, None)
    raw = stream.transport_stream
    if type(raw) is not trio.SocketStream:
        return none
    sock = getattr(raw.socket, "_sock", None)
    if isinstance(stream, OpenSslStream):
        if not isinstance(sock, socket.socket):
            return none
        tls_view, incoming_view, outgoing_view = stream.memory_bios()
        return tls_view, incoming_view, outgoing_view, sock  # type: ignore[return-value]
    tls = getattr(stream, "_ssl_object", None)
    incoming = getattr(stream, "_incoming", None)
    outgoing = getattr(stream, "_outgoing", None)
    if not (isinstance(sock, socket.socket) and isinstance(tls, ssl.SSLObject)
            and isinstance(incoming, ssl.MemoryBIO) and isinstance(outgoing, ssl.MemoryBIO)):
        return none
    # Records the handshake held back (trio's TLS 1.3 session-ticket workaround) go
    # first; the router sends no tickets, so there are normally none.
    delayed = getattr(stream, "_delayed_outgoing", None)
    if delayed:
        outgoing.write(delayed)
        stream._delayed_outgoing = None  # type: ignore[attr-defined]
    return tls, incoming, outgoing, sock


def _read_nowait(tls: ssl.SSLObject | None) -> bytes | None:
    """Decrypted bytes the TLS layer has (b"" once the peer closed), None if it needs
    more from the socket."""
    assert tls is not None
    try:
        return tls.read(RECEIVE_BUFFER_SIZE)
    except ssl.SSLWantReadError:
        return None
    except ssl.SSLError as e:  # close_notify, a cut connection, a bad record
        raise TransportClosed("peer closed the connection") from e


def _recv_nowait(sock: socket.socket) -> bytes | None:
    """What the socket has (b"" at its end), or None if it has nothing yet."""
    try:
        return sock.recv(RECEIVE_BUFFER_SIZE)
    except BlockingIOError:
        return None
    except OSError as e:
        raise TransportClosed("peer closed the connection") from e
