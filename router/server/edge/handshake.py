"""The router side of the SMP handshake (docs/protocol.md#handshake).

The router sends its hello first (the versions it serves, a fresh random 32-byte
session id, its certificate chain, its X25519 key of this connection signed by
the online key, and, when the WebSocket URL carried a challenge, the signature
of the web identity proof), then waits a bounded time for the client hello. A
version outside the range, a key hash other than the router's, a `clientService`
(docs/protocol.md#client-service), or a service proof (this router's hello
extension, docs/protocol.md#service-extension) that does not verify closes the
connection without an error block. A valid proof is kept for the service
commands. From v11 a client that sent its X25519 key (and is not a proxy) gets
block encryption (docs/protocol.md#block-encryption).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import trio

from router.protocol import versions
from router.protocol.block import pad_block, unpad_block
from router.protocol.block_encryption import BlockCipher, dh_secret
from router.protocol.crypto import verify_service_proof
from router.protocol.handshake import (
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    ClientHello,
    ServerHello,
    ServiceProof,
    decode_client_hello,
    encode_server_hello,
)
from router.protocol.keys import raw_key
from router.protocol.types import ProtocolError

from .block_stream import BlockStream, TransportClosed
from .identity import RouterIdentity

SESSION_ID_SIZE = 32


@dataclass(frozen=True, slots=True)
class Handshake:
    version: int
    session_id: bytes
    client_key: bytes | None  # the client's X25519 SPKI: the session DH's other half
    service: ServiceProof | None  # the service extension's proof, checked by the router
    # The router's X25519 private key of this connection: X25519 authenticators are
    # checked with it (docs/protocol.md#x25519-authenticator). None only without an
    # identity (tests that run the handshake bare).
    router_dh_private: bytes | None = None
    cipher: BlockCipher | None = None  # block encryption, from v11
    proxy_server: bool = False


async def server_handshake(
    transport: BlockStream,
    key_hash: bytes,
    timeout: float,
    identity: RouterIdentity | None = None,
    web_challenge: bytes | None = None,
    *,
    session_id: bytes | None = None,
    legacy: bool = False,
) -> Handshake:
    """Run the router side of the handshake; TransportClosed if the client fails it.

    With `identity` the hello carries the certificate chain and the connection's
    signed key, so the client can check the router's identity before it answers;
    with a `web_challenge` too, the signature over it (v19). Over native TLS the
    session id is the connection's `tls-unique` binding, and a client that agreed
    no ALPN is offered the legacy range only (docs/protocol.md#native-tls).
    """
    if session_id is None:
        session_id = secrets.token_bytes(SESSION_ID_SIZE)
    version_max = versions.LEGACY_TLS_VERSION_MAX if legacy else SMP_VERSION_MAX
    connection_key = None
    chain: tuple[bytes, ...] = ()
    signed_key = proof = None
    if identity is not None:
        connection_key = identity.connection_key()
        chain, signed_key = identity.chain, connection_key.signed_key
        if web_challenge is not None and versions.has_web_identity_proof(version_max):
            proof = identity.web_proof(web_challenge, session_id)
    hello = ServerHello(SMP_VERSION_MIN, version_max, session_id, chain, signed_key, proof)
    await transport.send_block(pad_block(encode_server_hello(hello)))
    with trio.move_on_after(timeout) as scope:
        block = await transport.receive_block()
    if scope.cancelled_caught:
        raise TransportClosed("no client hello in time")
    client = _parse_client_hello(block)
    if not SMP_VERSION_MIN <= client.version <= version_max:
        raise TransportClosed(f"client asked for version {client.version}")
    if client.key_hash != key_hash:
        raise TransportClosed("client hello names another router identity")
    if client.client_service is not None:
        # The reference proves it against the TLS client certificate, which this
        # transport has none of (docs/protocol.md#client-service).
        raise TransportClosed("client hello carries a service certificate")
    service = client.service
    if service is not None and not verify_service_proof(service, session_id, key_hash):
        raise TransportClosed("client hello carries a service proof that does not verify")
    private = None if connection_key is None else connection_key.private
    cipher = None
    if (
        private is not None and client.client_key is not None and not client.proxy_server
        and versions.has_block_encryption(client.version)
    ):
        try:
            secret = dh_secret(private, raw_key(client.client_key))
        except ProtocolError as e:
            raise TransportClosed(f"client hello carries an unusable key: {e}") from e
        cipher = BlockCipher.for_router(session_id, secret)
    return Handshake(
        client.version, session_id, client.client_key, client.service, private, cipher,
        client.proxy_server,
    )


def _parse_client_hello(block: bytes) -> ClientHello:
    try:
        return decode_client_hello(unpad_block(block))
    except ProtocolError as e:
        raise TransportClosed(f"bad client hello: {e}") from e
