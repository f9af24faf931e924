"""The router side of the SMP handshake (docs/protocol.md#handshake).

The router sends its hello first (versions 9..10, a fresh random 32-byte
session id, its identity certificate and a signed key), then waits a bounded
time for the client hello. A version outside the range, a key hash other than
the router's, or a service proof (this router's hello extension,
docs/protocol.md#service-extension) that does not verify closes the connection
without an error block. A valid proof is kept for the service commands.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import trio

from router.protocol.block import pad_block, unpad_block
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
from router.protocol.types import ProtocolError

from .block_stream import BlockStream, TransportClosed

SESSION_ID_SIZE = 32


@dataclass(frozen=True, slots=True)
class Handshake:
    version: int
    session_id: bytes
    client_key: bytes | None  # the client's X25519 SPKI, unused at v9/v10
    service: ServiceProof | None  # the service extension's proof, checked by the router


async def server_handshake(
    transport: BlockStream,
    key_hash: bytes,
    timeout: float,
    certificates: tuple[tuple[bytes, ...], bytes] | None = None,
) -> Handshake:
    """Run the router side of the handshake; TransportClosed if the client fails it.

    `certificates` (chain, signed key) go into the server hello, so the client
    can check the router's identity before it answers.
    """
    session_id = secrets.token_bytes(SESSION_ID_SIZE)
    chain, signed_key = certificates if certificates is not None else ((), None)
    hello = ServerHello(SMP_VERSION_MIN, SMP_VERSION_MAX, session_id, chain, signed_key)
    await transport.send_block(pad_block(encode_server_hello(hello)))
    with trio.move_on_after(timeout) as scope:
        block = await transport.receive_block()
    if scope.cancelled_caught:
        raise TransportClosed("no client hello in time")
    client = _parse_client_hello(block)
    if not SMP_VERSION_MIN <= client.version <= SMP_VERSION_MAX:
        raise TransportClosed(f"client asked for version {client.version}")
    if client.key_hash != key_hash:
        raise TransportClosed("client hello names another router identity")
    service = client.service
    if service is not None and not verify_service_proof(service, session_id, key_hash):
        raise TransportClosed("client hello carries a service proof that does not verify")
    return Handshake(client.version, session_id, client.client_key, client.service)


def _parse_client_hello(block: bytes) -> ClientHello:
    try:
        return decode_client_hello(unpad_block(block))
    except ProtocolError as e:
        raise TransportClosed(f"bad client hello: {e}") from e
