"""The client's side of private message routing, written from the protocol's pure
functions (router/protocol/proxying.py) for the tests of the routers' side: PRXY and
its PKEY, one command through PFWD and its PRES, the PROXY errors read apart
(docs/protocol.md#private-message-routing)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from router.client import SMPClient
from router.protocol import proxying
from router.protocol.codec import decode_response, encode_command
from router.protocol.errors import proxy_error_parts
from router.protocol.transmission import decode_transmission, encode_transmission
from router.protocol.types import ERR, PFWD, PKEY, PRES, PRXY, Command, Response, Transmission


class _Named(Protocol):  # what prxy_for needs of a router: its port and key hash
    port: int
    key_hash: bytes


def prxy_for(info: _Named, basic_auth: bytes | None = None,
             key_hash: bytes | None = None) -> PRXY:
    return PRXY(("127.0.0.1",), str(info.port), key_hash or info.key_hash, basic_auth)


@dataclass
class ProxiedSession:
    """What a client keeps of a PKEY."""

    session_id: bytes
    version: int
    destination_key: bytes


async def open_session(client: SMPClient, dest: _Named) -> ProxiedSession:
    answer = await client.command(b"", prxy_for(dest))
    assert isinstance(answer, PKEY), answer
    key = proxying.verify_relay_key(answer.cert_chain, answer.signed_key, dest.key_hash)
    assert key is not None
    version = min(answer.max_version, client.version)
    assert answer.min_version <= version
    return ProxiedSession(answer.session_id, version, key)


async def proxied(client: SMPClient, session: ProxiedSession, entity_id: bytes,
                  command: Command) -> Response:
    """One unsigned command forwarded through the proxy; the destination's answer."""
    corr_id = os.urandom(24)
    inner = encode_transmission(
        Transmission(b"", corr_id, entity_id, encode_command(command, session.version)),
        session.version)
    request = proxying.encrypt_transmission(session.destination_key, corr_id, inner)
    answer = await client.command(
        session.session_id, PFWD(session.version, request.client_key, request.enc_transmission),
        corr_id=corr_id)
    if not isinstance(answer, PRES):
        return answer
    t = decode_transmission(proxying.decrypt_response(request, answer.enc_response),
                            session.version)
    assert t.corr_id == corr_id and t.entity_id == entity_id
    return decode_response(t.command, session.version)


def broker_error(answer: Response) -> bytes | None:
    """What follows `PROXY BROKER` in an `ERR`, if it is one."""
    if not isinstance(answer, ERR):
        return None
    parts = proxy_error_parts(answer.error)
    return None if parts is None or parts.kind != "BROKER" else parts.broker


