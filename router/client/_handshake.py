"""The client's half of the SMP handshake (docs/protocol.md#handshake-router-hello,
#handshake-client-hello, #handshake).

The router speaks first. The client picks the highest version both sides
support (or gives up without a word, as the protocol says), then answers with
the router's key hash, a fresh X25519 key and, when it acts for a service, the
proof that it holds the service key. The session id from the server hello is
what every later signature covers (docs/protocol.md#session-id).
"""

from __future__ import annotations

from dataclasses import dataclass

from router.protocol import crypto
from router.protocol.block import pad_block, unpad_block
from router.protocol.handshake import (
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    ClientHello,
    ServerHello,
    decode_server_hello,
    encode_client_hello,
    identity_matches,
    negotiate_version,
)
from router.protocol.types import ProtocolError

from ._errors import HandshakeError, IdentityMismatch
from ._transport import Transport


@dataclass(frozen=True, slots=True)
class Session:
    version: int
    session_id: bytes
    server_hello: ServerHello


async def client_handshake(
    transport: Transport,
    key_hash: bytes,
    versions: tuple[int, int] = (SMP_VERSION_MIN, SMP_VERSION_MAX),
    service_seed: bytes | None = None,
) -> Session:
    """Receive the server hello, answer it, and return the negotiated session."""
    hello = _parse_server_hello(await transport.receive_block())
    version = negotiate_version(hello.min_version, hello.max_version, *versions)
    if version is None:
        raise HandshakeError(
            f"no common version: router offers {hello.min_version}..{hello.max_version}, "
            f"client supports {versions[0]}..{versions[1]}"
        )
    _check_identity(hello, key_hash)
    _, client_key = crypto.new_x25519()
    service = None
    if service_seed is not None:
        service = crypto.prove_service(service_seed, hello.session_id, key_hash)
    reply = ClientHello(version, key_hash, client_key, service)
    await transport.send_block(pad_block(encode_client_hello(reply)))
    return Session(version, hello.session_id, hello)


def _parse_server_hello(block: bytes) -> ServerHello:
    try:
        return decode_server_hello(unpad_block(block))
    except ProtocolError as e:
        raise HandshakeError(f"unusable server hello: {e}") from e


def _check_identity(hello: ServerHello, key_hash: bytes) -> None:
    """When the router shows its identity certificate it must hash to the key hash.

    This router always shows it (docs/protocol.md, "Identity in the server
    hello"); a router that does not is left to refuse a client hello with
    another key hash itself. Without TLS this catches a wrong address early,
    it does not authenticate the router: the certificate is public.
    """
    if identity_matches(hello, key_hash) is False:
        raise IdentityMismatch(
            "router identity does not match the key hash: wrong address, or another "
            "router answers at it"
        )
