"""Sending through a proxy router (docs/protocol.md#private-message-routing): the
client's part, without I/O.

`SMPClient.open_proxied_session` sends PRXY and hands the PKEY to `accept_pkey`, which
checks it as the reference client does and gives a `ProxiedSession`;
`SMPClient.proxied_command` builds the PFWD with `forward_request` and reads the PRES
with `open_pres`. The destination's answer comes back as it would on a direct
connection (its `ERR` raised as `SMPError`), while an error of the proxy itself (its
`ERR PROXY ...`) is raised as `ProxyError`, so a caller can tell "the queue said AUTH"
from "the proxy could not reach the destination".
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from router.protocol import crypto, proxying
from router.protocol.codec import decode_response, encode_command
from router.protocol.errors import (
    ProxyErrorParts,
    proxy_broker_error,
    proxy_error_parts,
    proxy_transport_error,
)
from router.protocol.handshake import SMP_VERSION_MAX, SMP_VERSION_MIN
from router.protocol.transmission import decode_transmission, encode_transmission
from router.protocol.types import (
    PFWD,
    PKEY,
    PRXY,
    Command,
    ProtocolError,
    Response,
    Transmission,
)

from ._address import RouterAddress
from ._errors import BadResponse, SMPError

# The PKEY of a destination whose chain or key does not check out: the reference
# client's answer (a handshake identity error on the proxy's side of the route).
IDENTITY_ERROR = proxy_broker_error(b"TRANSPORT", "HANDSHAKE IDENTITY")
VERSION_ERROR = proxy_transport_error(b"VERSION")


class ProxyError(SMPError):
    """The proxy answered `ERR` itself (`PROXY ...`, or another error of the proxy), or
    its PKEY did not prove the destination. `parts` reads a PROXY error apart."""

    @property
    def parts(self) -> ProxyErrorParts | None:
        return proxy_error_parts(self.error)


@dataclass(frozen=True, slots=True)
class ProxiedSession:
    """A route through one proxy to one destination router, from PKEY."""

    destination: RouterAddress
    session_id: bytes  # the proxy's TLS session with the destination: PFWD's entity id
    version: int  # the version the forwarded transmissions are encoded at
    destination_key: bytes  # raw X25519: the destination's key of the proxy's connection
    basic_auth: bytes | None = None  # the proxy's password, kept to open the route again


def prxy_command(destination: RouterAddress, basic_auth: bytes | None = None) -> PRXY:
    """The PRXY naming `destination` as its smp:// address does."""
    return PRXY((destination.host,), str(destination.port), destination.key_hash, basic_auth)


def accept_pkey(
    destination: RouterAddress, pkey: PKEY, basic_auth: bytes | None = None,
    versions_range: tuple[int, int] = (SMP_VERSION_MIN, SMP_VERSION_MAX),
) -> ProxiedSession:
    """A `ProxiedSession` from the proxy's PKEY, after the checks of
    docs/protocol.md#private-message-routing: the highest version both sides allow
    (`ProxyError` ``PROXY BROKER TRANSPORT VERSION`` if none) and the destination's
    chain against the key hash of its address and its signed key (``... HANDSHAKE
    IDENTITY`` if not)."""
    low = max(versions_range[0], pkey.min_version)
    high = min(versions_range[1], pkey.max_version)
    if low > high:
        raise ProxyError(VERSION_ERROR)
    key = proxying.verify_relay_key(pkey.cert_chain, pkey.signed_key, destination.key_hash)
    if key is None:
        raise ProxyError(IDENTITY_ERROR)
    return ProxiedSession(destination, pkey.session_id, high, key, basic_auth)


@dataclass(frozen=True, slots=True)
class ForwardRequest:
    """One PFWD ready to send: its corrId (also the nonce), the command, and what
    opens the answer."""

    corr_id: bytes
    pfwd: PFWD
    request: proxying.ProxiedRequest


def forward_request(
    session: ProxiedSession, entity_id: bytes, cmd: Command | bytes,
    key_seed: bytes | None = None, corr_id: bytes | None = None,
) -> ForwardRequest:
    """The PFWD carrying `cmd` for `entity_id` on the destination, signed with
    `key_seed` (Ed25519) over the proxied session id, as on a direct connection to it."""
    if corr_id is None:
        corr_id = os.urandom(proxying.NONCE_SIZE)
    command = cmd if isinstance(cmd, bytes) else encode_command(cmd, session.version)
    auth = b""
    if key_seed is not None:
        auth = crypto.authorize(key_seed, session.session_id, corr_id, entity_id, command)
    inner = encode_transmission(Transmission(auth, corr_id, entity_id, command), session.version)
    request = proxying.encrypt_transmission(session.destination_key, corr_id, inner)
    pfwd = PFWD(session.version, request.client_key, request.enc_transmission)
    return ForwardRequest(corr_id, pfwd, request)


def open_pres(session: ProxiedSession, forward: ForwardRequest, enc_response: bytes) -> Response:
    """The destination's answer inside a PRES; `BadResponse` if it does not open or
    parse, or answers another corrId."""
    try:
        inner = proxying.decrypt_response(forward.request, enc_response)
        t = decode_transmission(inner, session.version)
        response = decode_response(t.command, session.version)
    except ProtocolError as e:
        raise BadResponse(f"proxied answer unusable: {e}") from e
    if t.corr_id != forward.corr_id:
        raise BadResponse("proxied answer for another corrId")
    return response
