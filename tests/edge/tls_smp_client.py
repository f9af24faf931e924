"""A native SMP-over-TLS client written from the protocol's description of the
TLS handshake (docs/protocol.md#native-tls), not from the project's client.

It uses the ssl module and Trio, and the pure codec only to read the router's
hello and write its own. What it checks is what a SimpleX app checks:

- the TLS certificate chain is two certificates, the online certificate first;
  the SHA-256 of the second (the identity certificate) is the key hash of the
  router's address, and its key signed the first;
- the ALPN agreed is `smp/1`;
- the session id in the router's hello equals the TLS `tls-unique` binding the
  client reads from its own side of the TLS session.
"""

from __future__ import annotations

import _ssl
import hashlib
import ssl
from dataclasses import dataclass

import trio
from nacl.signing import VerifyKey

from router.protocol.block import BLOCK_SIZE, pad_block, unpad_block
from router.protocol.handshake import (
    ClientHello,
    ServerHello,
    decode_server_hello,
    encode_client_hello,
)
from router.protocol.x509 import certificate_spki, signed_object_parts
from router.server.edge.block_stream import TransportClosed  # what a scenario's session expects

_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


class IdentityMismatch(Exception):
    """The router's TLS identity is not the one its address names."""


def client_context(
    alpn: list[str] | None = ("smp/1",), max_version: ssl.TLSVersion | None = None,  # type: ignore[assignment]
) -> ssl.SSLContext:
    """A TLS client context that checks the chain itself (against the key hash),
    not against a certificate authority."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(list(alpn))
    if max_version is not None:
        context.maximum_version = max_version
    return context


def peer_chain(stream: trio.SSLStream) -> list[bytes]:
    """The certificate chain the router sent, DER (public as get_unverified_chain
    from Python 3.13; read from the SSL object below it before that)."""
    ssl_object = stream._ssl_object  # noqa: SLF001
    getter = getattr(ssl_object, "get_unverified_chain", None)
    if getter is None:
        getter = ssl_object._sslobj.get_unverified_chain  # noqa: SLF001
    chain = getter() or []
    return [c if isinstance(c, bytes) else c.public_bytes(_ssl.ENCODING_DER) for c in chain]


def check_chain(chain: list[bytes], key_hash: bytes) -> None:
    if len(chain) != 2:
        raise IdentityMismatch(f"a chain of {len(chain)} certificates")
    online, identity = chain
    if hashlib.sha256(identity).digest() != key_hash:
        raise IdentityMismatch("the identity certificate is not the address's")
    spki = certificate_spki(identity)
    if not spki.startswith(_ED25519_SPKI_PREFIX):
        raise IdentityMismatch("the identity key is not Ed25519")
    tbs, signature = signed_object_parts(online)
    VerifyKey(spki[len(_ED25519_SPKI_PREFIX):]).verify(tbs, signature)


@dataclass
class TlsSmpConnection:
    """Blocks over TLS (the `send_block`/`receive_block` a scenario's session uses)."""

    stream: trio.SSLStream
    tls_unique: bytes
    alpn: str | None
    chain: list[bytes]
    server_hello: ServerHello
    buffer: bytes = b""

    async def send_block(self, block: bytes) -> None:
        assert len(block) == BLOCK_SIZE
        await self.stream.send_all(block)

    async def receive_block(self) -> bytes:
        while len(self.buffer) < BLOCK_SIZE:
            data = await self.stream.receive_some(65536)
            if not data:
                raise TransportClosed("router closed the connection")
            self.buffer += data
        block, self.buffer = self.buffer[:BLOCK_SIZE], self.buffer[BLOCK_SIZE:]
        return block

    async def hello(self, version: int, key_hash: bytes, client_key: bytes | None = None) -> None:
        await self.send_block(pad_block(encode_client_hello(
            ClientHello(version, key_hash, client_key)
        )))

    async def aclose(self, timeout: float = 0) -> None:
        await trio.aclose_forcefully(self.stream)


async def tls_connect(
    port: int, key_hash: bytes | None, context: ssl.SSLContext | None = None,
    source: str | None = None,
) -> TlsSmpConnection:
    """TCP (from the loopback address `source` if given), TLS, then the router's hello;
    the chain checked against `key_hash` (unless None) and the session id against
    tls-unique."""
    if source is None:
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
    else:
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
        await sock.bind((source, 0))
        await sock.connect(("127.0.0.1", port))
        tcp = trio.SocketStream(sock)
    stream = trio.SSLStream(tcp, context or client_context())
    try:
        await stream.do_handshake()
        chain = peer_chain(stream)
        if key_hash is not None:
            check_chain(chain, key_hash)
        tls_unique = stream.get_channel_binding("tls-unique")
        assert tls_unique
        connection = TlsSmpConnection(
            stream, tls_unique, stream.selected_alpn_protocol(), chain,
            ServerHello(0, 0, b""),
        )
        connection.server_hello = decode_server_hello(unpad_block(await connection.receive_block()))
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    if connection.server_hello.session_id != tls_unique:
        await trio.aclose_forcefully(stream)
        raise IdentityMismatch("the hello's session id is not the TLS tls-unique binding")
    return connection
