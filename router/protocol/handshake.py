"""Handshake blocks (docs/protocol.md#handshake-router-hello, #handshake-client-hello,
#client-service).

The server hello goes first::

    word16 minVer | word16 maxVer | ss(sessionId) | [certChain signedKey [ss(webProof)]] | ignored
    certChain = byte n | n * large(cert DER);  signedKey = large(signed X25519 key)

(the cert part from maxVer 7, the web identity proof from maxVer 19) and the client
answers with::

    word16 version | ss(keyHash) | [ss(X25519 SPKI)] | [proxyServer] | [clientService] | ignored

(the key from v7, proxyServer from v14, clientService from v16: `versions`).
Hellos are block content (not padded) and may carry trailing bytes after the
fields of their version, which are ignored, as the reference's parser
(`parseOnly smpP`) ignores them. Failures raise `ProtocolError(HANDSHAKE)`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from . import versions
from .encoding import Parser, bool_, large, ss, word16
from .keys import KeyType, key_type
from .types import HANDSHAKE, ProtocolError
from .versions import SMP_VERSION_MAX, SMP_VERSION_MIN  # noqa: F401  (re-exported)

SERVICE_ID_SIZE = 24


@dataclass(frozen=True, slots=True)
class ServerHello:
    min_version: int
    max_version: int
    session_id: bytes
    cert_chain: tuple[bytes, ...] = ()
    signed_key: bytes | None = None
    # v19 (docs/protocol.md#web-identity-proof): the online key's signature over the
    # WebSocket URL's challenge and the session id.
    web_proof: bytes | None = None


@dataclass(frozen=True, slots=True)
class ClientServiceCert:
    """The reference's `clientService` (v16): a service role (``M``, ``N`` or ``P``) and
    a certificate chain with a key it signs, which must also be the TLS client
    certificate (docs/protocol.md#client-service)."""

    role: bytes
    cert_chain: tuple[bytes, ...]
    signed_key: bytes


SERVICE_ROLES = (b"M", b"N", b"P")


@dataclass(frozen=True, slots=True)
class ClientHello:
    version: int
    key_hash: bytes
    client_key: bytes | None = None  # X25519 SPKI
    proxy_server: bool = False  # v14: a router connecting as a proxy (no block encryption)
    client_service: ClientServiceCert | None = None  # v16


def _version_word(v: int) -> bytes:
    if not 0 <= v <= 0xFFFF:
        raise ValueError(f"version {v} out of range")
    return word16(v)


def _encode_cert_part(chain: tuple[bytes, ...], signed_key: bytes | None) -> bytes:
    if not chain or signed_key is None or len(chain) > 255:
        raise ValueError("a cert part needs 1..255 certificates and a signed key")
    return b"".join((bytes((len(chain),)), *(large(cert) for cert in chain), large(signed_key)))


def encode_server_hello(h: ServerHello) -> bytes:
    parts = [_version_word(h.min_version), _version_word(h.max_version), ss(h.session_id)]
    if h.cert_chain or h.signed_key is not None:
        parts.append(_encode_cert_part(h.cert_chain, h.signed_key))
    if h.web_proof is not None:
        if not versions.has_web_identity_proof(h.max_version) or not h.cert_chain:
            raise ValueError("a web identity proof needs maxVer 19 and the cert part")
        parts.append(ss(h.web_proof))
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


# Signature sizes a web identity proof may have: Ed25519, Ed448.
_PROOF_SIZES = (64, 114)


def _web_proof(p: Parser) -> bytes | None:
    """The optional signed challenge; None if absent or not a signature, as the
    reference parses it optionally."""
    start = p.pos
    try:
        proof = p.short_string()
    except ProtocolError:
        p.pos = start
        return None
    return proof if len(proof) in _PROOF_SIZES else None


def decode_server_hello(data: bytes) -> ServerHello:
    p = Parser(data, error=HANDSHAKE)
    min_v, max_v = p.word16(), p.word16()
    session_id = p.short_string()
    if versions.has_hello_keys(max_v) and not p.at_end():
        cert = _cert_part(p)
        if cert is not None and cert[0]:
            proof = None
            if versions.has_web_identity_proof(max_v) and not p.at_end():
                proof = _web_proof(p)
            return ServerHello(min_v, max_v, session_id, cert[0], cert[1], proof)
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
    v = h.version
    parts = [_version_word(v), ss(h.key_hash)]
    if h.client_key is not None:
        parts.append(ss(h.client_key))
    if versions.has_proxy_server_flag(v):
        parts.append(bool_(h.proxy_server))
    elif h.proxy_server:
        raise ValueError("the proxyServer flag needs v14")
    if versions.has_service_field(v):
        service = h.client_service
        if service is None:
            parts.append(b"0")
        else:
            if service.role not in SERVICE_ROLES:
                raise ValueError("service role must be M, N or P")
            parts += [b"1", service.role, _encode_cert_part(service.cert_chain, service.signed_key)]
    elif h.client_service is not None:
        raise ValueError("clientService needs v16")
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


def _client_service(p: Parser) -> ClientServiceCert | None:
    def service() -> ClientServiceCert:
        role = bytes((p.byte(),))
        if role not in SERVICE_ROLES:
            raise p.fail("bad service role")
        cert = _cert_part(p)
        if cert is None or not cert[0]:
            raise p.fail("bad service certificate")
        return ClientServiceCert(role, cert[0], cert[1])

    return p.maybe(service)


def decode_client_hello(data: bytes) -> ClientHello:
    p = Parser(data, error=HANDSHAKE)
    version = p.word16()
    key_hash = p.short_string()
    if not versions.has_hello_keys(version):
        return ClientHello(version, key_hash)
    client_key = _x25519_key(p)
    if not versions.has_proxy_server_flag(version):
        return ClientHello(version, key_hash, client_key)
    proxy_server = p.bool_()
    client_service = _client_service(p) if versions.has_service_field(version) else None
    return ClientHello(version, key_hash, client_key, proxy_server, client_service)


# --- the router's answer to a clientService (docs/protocol.md#client-service) -----------------


@dataclass(frozen=True, slots=True)
class ServiceHandshakeResult:
    """The third handshake block, sent by the router only to a client hello with a
    `clientService`: the service id (``'R' ss(serviceId)``) or a transport error
    (``'E'`` and the error as the reference writes it, e.g. ``HANDSHAKE BAD_AUTH``)."""

    service_id: bytes | None = None
    error: bytes | None = None  # e.g. b"HANDSHAKE BAD_AUTH", b"HANDSHAKE BAD_SERVICE"


SERVICE_BAD_AUTH = b"HANDSHAKE BAD_AUTH"  # the chain or the key's signature does not verify
SERVICE_BAD_SERVICE = b"HANDSHAKE BAD_SERVICE"  # the service record could not be made


def encode_service_handshake_result(result: ServiceHandshakeResult) -> bytes:
    if (result.service_id is None) == (result.error is None):
        raise ValueError("a service handshake result is a service id or an error")
    if result.service_id is not None:
        return b"R" + ss(result.service_id)
    assert result.error is not None
    return b"E" + result.error


def decode_service_handshake_result(data: bytes) -> ServiceHandshakeResult:
    p = Parser(data, error=HANDSHAKE)
    tag = p.byte()
    if tag == 0x52:  # 'R'
        service_id = p.short_string()
        return ServiceHandshakeResult(service_id=service_id)
    if tag == 0x45:  # 'E'
        error = p.rest()
        if not error:
            raise p.fail("empty service handshake error")
        return ServiceHandshakeResult(error=error)
    raise p.fail("bad service handshake result")


def negotiate_version(
    server_min: int, server_max: int, client_min: int, client_max: int
) -> int | None:
    """The highest version both ranges contain, or None if they do not meet."""
    low = max(server_min, client_min)
    high = min(server_max, client_max)
    return high if low <= high else None


# --- the web identity proof (docs/protocol.md#web-identity-proof) ---------------------

WEB_CHALLENGE_SIZE = 32
_CHALLENGE_PARAM = b"challenge="


def web_proof_signed_bytes(challenge: bytes, session_id: bytes) -> bytes:
    """What the router's online key signs for a web client: the challenge, then the
    session id, both raw."""
    return challenge + session_id


def web_challenge(path: bytes) -> bytes | None:
    """The 32-byte challenge a WebSocket URL's ``challenge=`` parameter carries
    (unpadded base64url), or None when it is absent or malformed, as the reference
    reads it: a bad challenge is no challenge, not a failed upgrade."""
    at = path.find(_CHALLENGE_PARAM)
    if at < 0:
        return None
    value = path[at + len(_CHALLENGE_PARAM) :].split(b"&", 1)[0]
    if not value or len(value) % 4 == 1 or any(c not in _BASE64URL for c in value):
        return None
    try:
        challenge = base64.urlsafe_b64decode(value + b"=" * (-len(value) % 4))
    except (ValueError, binascii.Error):
        return None
    return challenge if len(challenge) == WEB_CHALLENGE_SIZE else None


_BASE64URL = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
