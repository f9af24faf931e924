"""The router side of the SMP handshake (docs/protocol.md#handshake).

The router sends its hello first (the versions it serves, a fresh random 32-byte
session id, its certificate chain, its X25519 key of this connection signed by
the online key, and, when the WebSocket URL carried a challenge, the signature
of the web identity proof), then waits a bounded time for the client hello. A
version outside the range or a key hash other than the router's closes the
connection without an error block.

A `clientService` (v16, docs/protocol.md#client-service) is checked as the
reference checks it: its chain must be the TLS client certificate chain of the
connection, its leaf's Ed25519 key must sign the session's Ed25519 key, else the
router answers with a third block `E HANDSHAKE BAD_AUTH` and closes; then the
service of that certificate and role is looked up or made (`ServiceLookup`;
`HANDSHAKE BAD_SERVICE` if the store fails) and the third block carries its id.

From v11 a client that sent its X25519 key (and is not a proxy) gets
block encryption (docs/protocol.md#block-encryption).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from router.protocol import versions
from router.protocol.block import pad_block, unpad_block
from router.protocol.block_encryption import BlockCipher, dh_secret
from router.protocol.crypto import verify_service_key
from router.protocol.handshake import (
    SERVICE_BAD_AUTH,
    SERVICE_BAD_SERVICE,
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    ClientHello,
    ClientServiceCert,
    ServerHello,
    ServiceHandshakeResult,
    decode_client_hello,
    encode_server_hello,
    encode_service_handshake_result,
)
from router.protocol.keys import raw_key
from router.protocol.types import ProtocolError
from store.interfaces import StoreError

from .arrivals import arrivals
from .block_stream import BlockStream, TransportClosed
from .identity import RouterIdentity

SESSION_ID_SIZE = 32


@dataclass(frozen=True, slots=True)
class ServiceSession:
    """A service proven by its TLS client certificate (docs/protocol.md#client-service)."""

    service_id: bytes
    role: bytes  # b"M", b"N" or b"P"
    cert_hash: bytes  # SHA-256 of the identity certificate: queue keys sign it first
    service_key: bytes  # Ed25519 SPKI of the session's key: it signs SUBS and service signatures


# (role, identity certificate, its SHA-256) -> the service's id; raises StoreError.
ServiceLookup = Callable[[bytes, bytes, bytes], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class Handshake:
    version: int
    session_id: bytes
    client_key: bytes | None  # the client's X25519 SPKI: the session DH's other half
    # The router's X25519 private key of this connection: X25519 authenticators are
    # checked with it (docs/protocol.md#x25519-authenticator). None only without an
    # identity (tests that run the handshake bare).
    router_dh_private: bytes | None = None
    cipher: BlockCipher | None = None  # block encryption, from v11
    proxy_server: bool = False
    client_service: ServiceSession | None = None  # v16: a service by its certificate


async def server_handshake(
    transport: BlockStream,
    key_hash: bytes,
    timeout: float,
    identity: RouterIdentity | None = None,
    web_challenge: bytes | None = None,
    *,
    session_id: bytes | None = None,
    legacy: bool = False,
    peer_chain: tuple[bytes, ...] = (),
    services: ServiceLookup | None = None,
) -> Handshake:
    """Run the router side of the handshake; TransportClosed if the client fails it.

    With `identity` the hello carries the certificate chain and the connection's
    signed key, so the client can check the router's identity before it answers;
    with a `web_challenge` too, the signature over it (v19). Over native TLS the
    session id is the connection's `tls-unique` binding, and a client that agreed
    no ALPN is offered the legacy range only (docs/protocol.md#native-tls).
    """
    # The hello's key pair and its signature: a crowd finishing its TLS handshakes
    # at once makes its hellos a few per pass (arrivals.py).
    await arrivals().admit_later()
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
    client_service = None
    if client.client_service is not None:
        client_service = await _service_session(
            transport, client.client_service, peer_chain, services
        )
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
        client.version, session_id, client.client_key, private, cipher,
        client.proxy_server, client_service,
    )


async def _service_session(
    transport: BlockStream,
    service: ClientServiceCert,
    peer_chain: tuple[bytes, ...],
    services: ServiceLookup | None,
) -> ServiceSession:
    """The checks of the reference's `getClientService`, then the third block."""
    proven = None
    if services is not None and peer_chain and peer_chain == service.cert_chain:
        proven = verify_service_key(service.cert_chain, service.signed_key)
    if proven is None:
        await _refuse_service(transport, SERVICE_BAD_AUTH)
        raise TransportClosed("client service certificate or key does not verify")
    assert services is not None
    identity, session_key = proven
    cert_hash = hashlib.sha256(identity).digest()
    try:
        service_id = await services(service.role, identity, cert_hash)
    except StoreError as e:
        await _refuse_service(transport, SERVICE_BAD_SERVICE)
        raise TransportClosed(f"service record not stored: {e}") from e
    answer = encode_service_handshake_result(ServiceHandshakeResult(service_id=service_id))
    await transport.send_block(pad_block(answer))
    return ServiceSession(service_id, service.role, cert_hash, session_key)


async def _refuse_service(transport: BlockStream, error: bytes) -> None:
    block = pad_block(encode_service_handshake_result(ServiceHandshakeResult(error=error)))
    await transport.send_block(block)


def _parse_client_hello(block: bytes) -> ClientHello:
    try:
        return decode_client_hello(unpad_block(block))
    except ProtocolError as e:
        raise TransportClosed(f"bad client hello: {e}") from e
