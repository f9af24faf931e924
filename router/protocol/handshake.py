"""Handshake blocks (docs/protocol.md#handshake-router-hello, #handshake-client-hello) and the
service extension of this router.

The server hello goes first::

    word16 minVer | word16 maxVer | ss(sessionId) | [certChain signedKey] | ignored
    certChain = byte n | n * large(cert DER);  signedKey = large(signed X25519 key)

and the client answers with::

    word16 version | ss(keyHash) | [ss(X25519 SPKI) ["SVC1" ss(serviceKey) ss(sig)]] | ignored

"SVC1" and what follows is this router's service extension: the client proves
it holds an Ed25519 service key by signing `service_signed_bytes` (session id,
key hash and the service key itself). A v9/v10 peer that does not know it
stops parsing before it. Hellos are block content (not padded) and may carry
trailing bytes, which are ignored. A marker without an X25519 client key
before it makes the hello malformed. Failures raise `ProtocolError(HANDSHAKE)`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .encoding import Parser, large, ss, word16
from .keys import KeyType, key_type
from .types import HANDSHAKE, ProtocolError

SMP_VERSION_MIN = 9
SMP_VERSION_MAX = 10
# The hello fields after the session id / key hash exist from this version on.
_AUTH_KEY_VERSION = 7

SERVICE_MARKER = b"SVC1"
SERVICE_CONTEXT = b"SMP-SERVICE"
SERVICE_ID_SIZE = 24


@dataclass(frozen=True, slots=True)
class ServerHello:
    min_version: int
    max_version: int
    session_id: bytes
    cert_chain: tuple[bytes, ...] = ()
    signed_key: bytes | None = None


@dataclass(frozen=True, slots=True)
class ServiceProof:
    """Possession of a service key: its Ed25519 SPKI and a signature over
    `service_signed_bytes(session_id, key_hash, service_key)`."""

    service_key: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class ClientHello:
    version: int
    key_hash: bytes
    client_key: bytes | None = None  # X25519 SPKI
    service: ServiceProof | None = None


def _version_word(v: int) -> bytes:
    if not 0 <= v <= 0xFFFF:
        raise ValueError(f"version {v} out of range")
    return word16(v)


def encode_server_hello(h: ServerHello) -> bytes:
    parts = [_version_word(h.min_version), _version_word(h.max_version), ss(h.session_id)]
    if h.cert_chain or h.signed_key is not None:
        if not h.cert_chain or h.signed_key is None or len(h.cert_chain) > 255:
            raise ValueError("a cert part needs 1..255 certificates and a signed key")
        parts.append(bytes((len(h.cert_chain),)))
        parts.extend(large(cert) for cert in h.cert_chain)
        parts.append(large(h.signed_key))
    return b"".join(parts)


def _cert_part(p: Parser) -> tuple[tuple[bytes, ...], bytes] | None:
    """The optional chain and signed key; None (cursor unchanged) if they do not parse,
    as the reference parses them with backtracking."""
    start = p.pos
    try:
        n = p.byte()
        chain = tuple(p.large() for _ in range(n))
        return chain, p.large()
    except ProtocolError:
        p.pos = start
        return None


def decode_server_hello(data: bytes) -> ServerHello:
    p = Parser(data, error=HANDSHAKE)
    min_v, max_v = p.word16(), p.word16()
    session_id = p.short_string()
    if max_v >= _AUTH_KEY_VERSION and not p.at_end():
        cert = _cert_part(p)
        if cert is not None and cert[0]:
            return ServerHello(min_v, max_v, session_id, cert[0], cert[1])
    return ServerHello(min_v, max_v, session_id)


def identity_certificate(chain: tuple[bytes, ...]) -> bytes | None:
    """The certificate whose SHA-256 is the router's key hash: the second of a
    longer chain (as TLS chains put the identity after the leaf), the only one
    of a chain of one (this router's hello), None for an empty chain."""
    if not chain:
        return None
    return chain[1] if len(chain) > 1 else chain[0]


def identity_matches(hello: ServerHello, key_hash: bytes) -> bool | None:
    """Whether the hello's identity certificate hashes to `key_hash`; None when
    the hello carries no certificate (nothing to check before answering)."""
    certificate = identity_certificate(hello.cert_chain)
    if certificate is None:
        return None
    return hashlib.sha256(certificate).digest() == key_hash


def encode_client_hello(h: ClientHello) -> bytes:
    parts = [_version_word(h.version), ss(h.key_hash)]
    if h.client_key is not None:
        parts.append(ss(h.client_key))
    if h.service is not None:
        if h.client_key is None:
            raise ValueError("the service extension needs the client key before it")
        parts += [SERVICE_MARKER, ss(h.service.service_key), ss(h.service.signature)]
    return b"".join(parts)


def _x25519_key(p: Parser) -> bytes | None:
    """The optional client key; None (cursor unchanged) if what follows is not one."""
    start = p.pos
    try:
        spki = p.short_string()
        if key_type(spki) is KeyType.X25519:
            return spki
    except ProtocolError:
        pass
    p.pos = start
    return None


def _service_proof(p: Parser) -> ServiceProof | None:
    if p.data[p.pos : p.pos + len(SERVICE_MARKER)] != SERVICE_MARKER:
        return None
    p.pos += len(SERVICE_MARKER)
    service_key = p.short_string()
    signature = p.short_string()
    try:
        kind = key_type(service_key)
    except ProtocolError:
        raise p.fail("service key is not a key") from None
    if kind is not KeyType.ED25519 or len(signature) != 64:
        raise p.fail("service key must be Ed25519 with a 64-byte signature")
    return ServiceProof(service_key, signature)


def _misplaced_marker(p: Parser) -> bool:
    """True if the service marker stands where the client key should be, or right
    after a short string that is not an X25519 key: a service hello without its
    client key, which would otherwise be read as a hello proving no service."""
    rest = p.data[p.pos :]
    if rest.startswith(SERVICE_MARKER):
        return True
    after_key = 1 + rest[0] if rest else 0
    return rest[after_key : after_key + len(SERVICE_MARKER)] == SERVICE_MARKER


def decode_client_hello(data: bytes) -> ClientHello:
    p = Parser(data, error=HANDSHAKE)
    version = p.word16()
    key_hash = p.short_string()
    if version < _AUTH_KEY_VERSION:
        return ClientHello(version, key_hash)
    client_key = _x25519_key(p)
    if client_key is None:
        if _misplaced_marker(p):
            raise p.fail("service extension without an X25519 client key before it")
        return ClientHello(version, key_hash)
    return ClientHello(version, key_hash, client_key, _service_proof(p))


def negotiate_version(
    server_min: int, server_max: int, client_min: int, client_max: int
) -> int | None:
    """The highest version both ranges contain, or None if they do not meet."""
    low = max(server_min, client_min)
    high = min(server_max, client_max)
    return high if low <= high else None


def service_signed_bytes(session_id: bytes, key_hash: bytes, service_key: bytes) -> bytes:
    """What the service key signs in the client hello."""
    return b"".join((SERVICE_CONTEXT, ss(session_id), ss(key_hash), ss(service_key)))


def service_id(service_key: bytes) -> bytes:
    """The entity id of SUBS / NSUBS / ENDS: SHA-256 of the service key's SPKI, first 24 bytes."""
    return hashlib.sha256(service_key).digest()[:SERVICE_ID_SIZE]
