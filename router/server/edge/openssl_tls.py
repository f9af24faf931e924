"""The router's identity TLS over pyOpenSSL, for client certificates
(docs/protocol.md#native-tls, #client-service).

Python's `ssl` cannot accept a self-signed client certificate: it has no
verify callback, and asking for an optional certificate fails the handshake on
any issuer it does not trust. A service proves itself with exactly such a
certificate (or a chain of 2 to 4 ending in its own root). So the identity
context is a pyOpenSSL context that asks every client for a certificate, lets
any through the handshake (a client without one is an ordinary client), and
the chain is checked afterwards as the reference checks it
(`service_chain_error`).

`OpenSslStream` drives a pyOpenSSL connection over memory BIOs as a Trio
stream, as `trio.SSLStream` drives Python's: one task may receive while
another sends; whatever either makes the TLS layer write goes out in order
under one lock.
"""

from __future__ import annotations

import datetime
import ssl

import trio
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding
from OpenSSL import SSL, crypto

from .identity import RouterIdentity

SMP_ALPN = b"smp/1"
HTTP_ALPN = b"http/1.1"
_CHUNK = 65536
MAX_SERVICE_CHAIN = 4  # leaf, identity, operator, network (the reference's chainIdCaCerts)


def _accept_any(conn: SSL.Connection, cert: crypto.X509, errno: int, depth: int, ok: int) -> bool:
    """Every client certificate passes the handshake; a service's chain is checked
    once the handshake is done (`service_chain_error`), and a client without one
    is an ordinary client."""
    return True


def _select_alpn(conn: SSL.Connection, offered: list[bytes]) -> bytes | object:
    for name in (SMP_ALPN, HTTP_ALPN):
        if name in offered:
            return name
    return SSL.NO_OVERLAPPING_PROTOCOLS  # no ALPN: the legacy range (native_tls.py)


def identity_openssl_context(identity: RouterIdentity) -> SSL.Context:
    """The identity chain's TLS context (the online certificate, then the identity
    certificate), asking every client for an optional certificate."""
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(SSL.TLS1_2_VERSION)
    context.set_options(SSL.OP_NO_TICKET | SSL.OP_NO_RENEGOTIATION)
    # No resumption: every session id is a fresh tls-unique.
    context.set_session_cache_mode(SSL.SESS_CACHE_OFF)
    # An idle connection gives its record buffers back, as Python's `ssl` does.
    context.set_mode(SSL.MODE_RELEASE_BUFFERS)
    leaf, *rest = identity.chain
    context.use_certificate(x509.load_der_x509_certificate(leaf))
    for cert in rest:
        context.add_extra_chain_cert(x509.load_der_x509_certificate(cert))
    context.use_privatekey(Ed25519PrivateKey.from_private_bytes(identity.online_seed))
    context.check_privatekey()
    context.set_verify(SSL.VERIFY_PEER, _accept_any)
    context.set_alpn_select_callback(_select_alpn)
    return context


class OpenSslStream(trio.abc.Stream):
    """A server-side TLS connection over `transport_stream`, driven through memory BIOs."""

    __slots__ = ("transport_stream", "_tls", "_send_lock", "_receiving")

    def __init__(self, transport_stream: trio.abc.Stream, context: SSL.Context) -> None:
        self.transport_stream = transport_stream
        self._tls = SSL.Connection(context, None)
        self._tls.set_accept_state()
        self._send_lock = trio.Lock()  # one writer of TLS output at a time, in order
        self._receiving = False

    # --- the handshake and what it agreed ----------------------------------------------

    async def do_handshake(self) -> None:
        """Run the handshake; `trio.BrokenResourceError` if it fails or the peer leaves."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except SSL.WantReadError:
                await self._flush()
                await self._feed()
            except SSL.Error as e:
                await self._flush_quietly()
                raise trio.BrokenResourceError(f"TLS handshake failed: {e}") from e
        await self._flush()

    def selected_alpn_protocol(self) -> str | None:
        agreed = self._tls.get_alpn_proto_negotiated()
        return agreed.decode("ascii") if agreed else None

    def tls_unique(self) -> bytes | None:
        """The `tls-unique` channel binding: the first Finished of the handshake, which
        on a full handshake (no resumption here) is the client's."""
        return self._tls.get_peer_finished()

    def peer_chain(self) -> tuple[bytes, ...]:
        """The client's certificate chain as DER, leaf first; () without one. On the
        server OpenSSL lists the chain without the leaf."""
        leaf = self._tls.get_peer_certificate()
        if leaf is None:
            return ()
        der = [leaf.to_cryptography().public_bytes(Encoding.DER)]
        for cert in self._tls.get_peer_cert_chain() or ():
            der.append(cert.to_cryptography().public_bytes(Encoding.DER))
        if len(der) > 1 and der[1] == der[0]:
            del der[0]  # a build of OpenSSL that lists the leaf too
        return tuple(der)

    # --- the stream ------------------------------------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving")
        self._receiving = True
        try:
            while True:
                try:
                    return self._tls.recv(max_bytes or _CHUNK)
                except SSL.WantReadError:
                    pass
                except SSL.ZeroReturnError:
                    return b""  # close_notify
                except SSL.SysCallError:
                    return b""  # the peer cut the connection
                except SSL.Error as e:
                    raise trio.BrokenResourceError(f"TLS error: {e}") from e
                await self._flush()  # what reading made the TLS layer write (a key update)
                if not await self._feed(eof_ok=True):
                    return b""
        finally:
            self._receiving = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = self._tls.send(view[:_CHUNK].tobytes())
            except SSL.Error as e:
                raise trio.BrokenResourceError(f"TLS error: {e}") from e
            view = view[sent:]
            await self._flush()
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        try:
            self._tls.shutdown()
            await self._flush_quietly()
        except SSL.Error:
            pass
        await self.transport_stream.aclose()

    # --- moving bytes between the BIOs and the transport -----------------------------------

    async def _feed(self, eof_ok: bool = False) -> bool:
        data = await self.transport_stream.receive_some(_CHUNK)
        if not data:
            if eof_ok:
                return False
            raise trio.BrokenResourceError("the peer left during the TLS handshake")
        self._tls.bio_write(data)
        return True

    async def _flush(self) -> None:
        async with self._send_lock:
            while True:
                try:
                    data = self._tls.bio_read(_CHUNK)
                except SSL.WantReadError:
                    return
                await self.transport_stream.send_all(data)

    async def _flush_quietly(self) -> None:
        try:
            await self._flush()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


    def memory_bios(self) -> tuple[SslObjectView, IncomingView, OutgoingView]:
        """The TLS object and its two buffers with the methods of `ssl.SSLObject` and
        `ssl.MemoryBIO` that `TlsBlockTransport` drives its socket with, once the
        handshake is done (native_tls.py: reads and writes without a scheduler pass)."""
        return SslObjectView(self._tls), IncomingView(self._tls), OutgoingView(self._tls)


class SslObjectView:
    """`ssl.SSLObject.read`, `write` and `unwrap`, with its exceptions."""

    __slots__ = ("_tls",)

    def __init__(self, tls: SSL.Connection) -> None:
        self._tls = tls

    def read(self, max_bytes: int) -> bytes:
        try:
            return self._tls.recv(max_bytes)
        except SSL.WantReadError:
            raise ssl.SSLWantReadError("more bytes are needed") from None
        except SSL.ZeroReturnError:
            return b""
        except SSL.Error as e:
            raise ssl.SSLError(f"TLS error: {e}") from None

    def write(self, data: bytes) -> int:
        try:
            self._tls.sendall(data)
        except SSL.Error as e:
            raise ssl.SSLError(f"TLS error: {e}") from None
        return len(data)

    def unwrap(self) -> None:
        try:
            self._tls.shutdown()  # close_notify into the outgoing buffer
        except SSL.Error as e:
            raise ssl.SSLError(f"TLS error: {e}") from None


class IncomingView:
    """`ssl.MemoryBIO.write` and `write_eof` of the bytes from the socket."""

    __slots__ = ("_tls",)

    def __init__(self, tls: SSL.Connection) -> None:
        self._tls = tls

    def write(self, data: bytes) -> int:
        return self._tls.bio_write(data)

    def write_eof(self) -> None:
        self._tls.bio_shutdown()


class OutgoingView:
    """`ssl.MemoryBIO.pending` and `read` of the TLS records to send. pyOpenSSL tells
    what is in its outgoing buffer only by reading it: `pending` keeps what it read."""

    __slots__ = ("_tls", "_taken")

    def __init__(self, tls: SSL.Connection) -> None:
        self._tls = tls
        self._taken = b""

    @property
    def pending(self) -> int:
        if not self._taken:
            self._taken = self._drain()
        return len(self._taken)

    def read(self) -> bytes:
        data, self._taken = self._taken + self._drain(), b""
        return data

    def _drain(self) -> bytes:
        parts = []
        while True:
            try:
                parts.append(self._tls.bio_read(_CHUNK))
            except SSL.WantReadError:
                return b"".join(parts)


# --- the service chain, checked as the reference checks it ------------------------------------


def service_chain_error(
    chain: tuple[bytes, ...], now: datetime.datetime | None = None
) -> str | None:
    """Why a client certificate chain is refused, or None: none at all, a self-signed
    certificate, or a chain of 2 to 4 that verifies against its own last
    certificate (validity times, signatures, CA constraints), as the reference's
    `validateClientCertificate`."""
    if not chain:
        return None
    if len(chain) > MAX_SERVICE_CHAIN:
        return "chain too long"
    try:
        certs = [crypto.X509.from_cryptography(x509.load_der_x509_certificate(c)) for c in chain]
    except ValueError as e:
        return f"not a certificate: {e}"
    store = crypto.X509Store()
    store.add_cert(certs[-1])  # the chain's own root is the only trust anchor
    store.set_flags(crypto.X509StoreFlags.PARTIAL_CHAIN)
    if now is not None:
        store.set_time(now)
    context = crypto.X509StoreContext(store, certs[0], certs[1:-1] or None)
    try:
        context.verify_certificate()
    except crypto.X509StoreContextError as e:
        return str(e)
    return None
