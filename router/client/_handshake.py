"""The client's half of the SMP handshake (docs/protocol.md#handshake-router-hello,
#handshake-client-hello, #handshake).

The router speaks first. The client picks the highest version both sides
support (or gives up without a word, as the protocol says), checks the router's
identity, then answers with the router's key hash, a fresh X25519 key and, when it
acts for a service, the proof that it holds the service key. The session id from
the server hello is what every later signature covers (docs/protocol.md#session-id).
From v11 the client's key and the router's key of the connection key the block
encryption (docs/protocol.md#block-encryption); from v19 the router proves its
identity by signing the challenge the client put in the URL
(docs/protocol.md#web-identity-proof).
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, replace

from router.protocol import crypto, versions
from router.protocol.block import pad_block, unpad_block
from router.protocol.block_encryption import BlockCipher, dh_secret
from router.protocol.handshake import (
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    WEB_CHALLENGE_SIZE,
    ClientHello,
    ServerHello,
    decode_server_hello,
    decode_service_handshake_result,
    encode_client_hello,
    identity_matches,
    negotiate_version,
)
from router.protocol.types import ProtocolError

from ._errors import HandshakeError, IdentityMismatch
from ._service import ServiceCertificate, ServiceSessionKeys, service_hello
from ._transport import BlockTransport


@dataclass(frozen=True, slots=True)
class Session:
    version: int
    session_id: bytes
    server_hello: ServerHello
    cipher: BlockCipher | None = None  # block encryption, from v11
    router_dh_key: bytes | None = None  # raw X25519: the router's key of this connection
    # Kept only by a router connecting as a proxy: with the router's key it makes the
    # session secret of forwarded commands (docs/protocol.md#private-message-routing).
    client_private: bytes | None = None
    # A service by its certificate (docs/protocol.md#client-service): its session keys.
    service: ServiceSessionKeys | None = None


def new_challenge() -> bytes:
    """The 32 random bytes a client puts in the WebSocket URL for the router to sign."""
    return os.urandom(WEB_CHALLENGE_SIZE)


async def client_handshake(
    transport: BlockTransport,
    key_hash: bytes,
    versions_range: tuple[int, int] = (SMP_VERSION_MIN, SMP_VERSION_MAX),
    challenge: bytes | None = None,
    proxy_server: bool = False,
    service_cert: ServiceCertificate | None = None,
) -> Session:
    """Receive the server hello, answer it, and return the negotiated session.

    `challenge` is the one the client put in the URL; from v19 the router must have
    signed it. `proxy_server` is a router connecting as a proxy: its hello says so
    (from v14), its blocks are not encrypted, and a router older than v14 is spoken to
    at v10 at most, where nothing is encrypted either (docs/protocol.md, client hello)."""
    hello = _parse_server_hello(await transport.receive_block())
    if proxy_server and hello.max_version < versions.PROXY_SERVER_HANDSHAKE:
        low, high = versions_range
        versions_range = (low, max(low, min(high, versions.DELETED_EVENT)))
    version = negotiate_version(hello.min_version, hello.max_version, *versions_range)
    if version is None:
        raise HandshakeError(
            f"no common version: router offers {hello.min_version}..{hello.max_version}, "
            f"client supports {versions_range[0]}..{versions_range[1]}"
        )
    _check_identity(hello, key_hash, version, challenge)
    if transport.tls_unique is not None:
        _check_tls(hello, key_hash, transport.tls_unique, transport.tls_certificate)
    client_priv, client_key = crypto.new_x25519()
    # Before v11 nothing uses the router's key of the connection: not read, not checked.
    router_dh_key = (_router_dh_key(hello)
                     if proxy_server or versions.has_block_encryption(version) else None)
    cipher = None
    if router_dh_key is not None and not proxy_server:
        try:
            secret = dh_secret(client_priv, router_dh_key)
        except ProtocolError as e:
            raise HandshakeError(f"unusable router key: {e}") from e
        cipher = BlockCipher.for_client(hello.session_id, secret)
    flag = proxy_server and versions.has_proxy_server_flag(version)
    client_service = keys = None
    if service_cert is not None:
        if not versions.has_service_field(version):
            raise HandshakeError(f"a service certificate needs v16, the router speaks {version}")
        client_service, keys = service_hello(service_cert)
    reply = ClientHello(version, key_hash, client_key, flag, client_service)
    await transport.send_block(pad_block(encode_client_hello(reply)))
    if keys is not None:
        keys = await _service_answer(transport, keys)
    return Session(version, hello.session_id, hello, cipher, router_dh_key,
                   client_priv if proxy_server else None, keys)


async def _service_answer(
    transport: BlockTransport, keys: ServiceSessionKeys
) -> ServiceSessionKeys:
    """The router's third block: the service id, or why the service was refused."""
    try:
        answer = decode_service_handshake_result(unpad_block(await transport.receive_block()))
    except ProtocolError as e:
        raise HandshakeError(f"unusable service answer: {e}") from e
    if answer.service_id is None:
        error = (answer.error or b"").decode("ascii", "replace")
        raise HandshakeError(f"the router refused the service: {error}")
    return replace(keys, service_id=answer.service_id)


def _parse_server_hello(block: bytes) -> ServerHello:
    try:
        return decode_server_hello(unpad_block(block))
    except ProtocolError as e:
        raise HandshakeError(f"unusable server hello: {e}") from e


def _router_dh_key(hello: ServerHello) -> bytes | None:
    if hello.signed_key is None:
        return None
    try:
        return crypto.hello_dh_key(hello.signed_key)
    except ProtocolError as e:
        raise HandshakeError(f"unusable server hello: {e}") from e


def _check_tls(
    hello: ServerHello, key_hash: bytes, tls_unique: bytes, certificate: bytes | None
) -> None:
    """Over native TLS (docs/protocol.md#native-tls): the hello's chain is the identity
    chain of the key hash, the TLS certificate is its online certificate, and the
    session id is the TLS `tls-unique` binding."""
    if not crypto.verify_tls_identity(hello.cert_chain, hello.signed_key, key_hash):
        raise IdentityMismatch(
            "router identity does not match the key hash: wrong address, or another "
            "router answers at it"
        )
    if certificate != hello.cert_chain[0]:
        raise IdentityMismatch("the router's TLS certificate is not its online certificate")
    if not hmac.compare_digest(hello.session_id, tls_unique):
        raise HandshakeError("the session id is not the TLS channel binding (tls-unique)")


def _check_identity(
    hello: ServerHello, key_hash: bytes, version: int, challenge: bytes | None
) -> None:
    """When the router shows its identity certificate it must hash to the key hash;
    from v19, when the client sent a challenge, the router must also have signed it
    with the online certificate's key (docs/protocol.md#web-identity-proof).

    A router that shows no certificate is left to refuse a client hello with
    another key hash itself.
    """
    if identity_matches(hello, key_hash) is False:
        raise IdentityMismatch(
            "router identity does not match the key hash: wrong address, or another "
            "router answers at it"
        )
    if challenge is None or not versions.has_web_identity_proof(version):
        return
    if hello.web_proof is None or hello.signed_key is None or not crypto.verify_web_identity(
        hello.cert_chain, hello.signed_key, hello.web_proof, challenge, hello.session_id, key_hash
    ):
        raise IdentityMismatch("the router did not prove its identity for this connection")
