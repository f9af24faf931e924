"""The two encryption layers of private message routing (docs/protocol.md#private-message-routing),
as pure functions: bytes and keys in, bytes out, no I/O.

A client sends through router A (the proxy) to a queue on router B (the destination)
so that B never sees the client's address and A never sees the command::

    client --PFWD--> proxy --RFWD--> destination
    client <--PRES-- proxy <--RRES-- destination

Who calls what:

* the client: `verify_relay_key` on the PKEY answering its PRXY; then per command
  `encrypt_transmission` (the PFWD parameters; the transmission inside is authorized
  with PKEY's session id, and an X25519 authenticator with the destination's key) and
  `decrypt_response` on the PRES;
* the proxy: `session_secret` once per connection to the destination (its hello key
  and the destination's signed key); per PFWD, `wrap_forward` gives the RFWD body, with
  the RFWD's own corrId (24 random bytes) as nonce, and `unwrap_forward_response` turns
  the RRES into the PRES body;
* the destination: `session_secret` of the proxy's connection (its own hello key and the
  proxy's hello key); per RFWD, `unwrap_forward` gives the one transmission to execute
  (at `Forwarded.version`, authorized against `Forwarded.session_id`'s connection, i.e.
  the proxy's TLS session id, with the destination's hello key for X25519
  authenticators) and `encrypt_forwarded_response` gives the RRES body for the answer.

Layer 1 (client <-> destination): crypto_box with DH(client's fresh X25519 key,
destination's hello key), nonce = the PFWD's corrId, the transmission in a batch of one
padded to `PROXIED_PADDED_SIZE`; the answer comes back the same way with the nonce
reversed. Layer 2 (proxy <-> destination): crypto_box with the proxy connection's
session secret, nonce = the RFWD's corrId, not padded; the answer with the nonce
reversed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass

from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.exceptions import RuntimeError as NaclRuntimeError

from .encoding import Parser, ss, word16
from .errors import proxy_broker_error
from .keys import KeyType, key_type, raw_key, x25519_spki
from .types import BLOCK, CMD_SYNTAX, CRYPTO, ProtocolError
from .x509 import certificate_spki, signed_object_parts

NONCE_SIZE = 24
BOX_TAG_SIZE = 16
# The padded size of a proxied transmission and of its answer (the reference's
# paddedProxiedTLength), so neither the proxy nor an observer learns which command
# was sent or what was answered.
PROXIED_PADDED_SIZE = 16226
PROXIED_ENC_SIZE = PROXIED_PADDED_SIZE + BOX_TAG_SIZE  # 16242
# The longest transmission that fits: padding length word, batch count, length word.
MAX_PROXIED_TRANSMISSION = PROXIED_PADDED_SIZE - 2 - 1 - 2

_PAD = b"#" * PROXIED_PADDED_SIZE


# --- boxes and nonces ----------------------------------------------------------------


def nonce_of(corr_id: bytes) -> bytes:
    """The box nonce a corrId stands for: its first 24 bytes, zero-padded if shorter."""
    return corr_id[:NONCE_SIZE].ljust(NONCE_SIZE, b"\x00")


def reverse_nonce(nonce: bytes) -> bytes:
    """The nonce of an answer: the request's nonce with its bytes reversed."""
    return nonce[::-1]


def shared_secret(own_private32: bytes, peer_public: bytes) -> bytes:
    """The precomputed crypto_box key of our X25519 private key and the peer's key (raw
    32 bytes or SPKI); `ProtocolError(CRYPTO)` for a key that is not a usable X25519 key."""
    if len(peer_public) != 32:
        try:
            kind = key_type(peer_public)
        except ProtocolError:
            kind = None
        if kind is not KeyType.X25519:
            raise ProtocolError(CRYPTO, "not an X25519 key")
        peer_public = raw_key(peer_public)
    try:
        return bindings.crypto_box_beforenm(peer_public, own_private32)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        raise ProtocolError(CRYPTO, "unusable X25519 key") from None


session_secret = shared_secret  # the proxy connection's secret: both hello keys


def _box(secret: bytes, nonce: bytes, plain: bytes) -> bytes:
    return bindings.crypto_box_easy_afternm(plain, nonce, secret)


def _open(secret: bytes, nonce: bytes, enc: bytes) -> bytes:
    try:
        return bindings.crypto_box_open_easy_afternm(enc, nonce, secret)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        raise ProtocolError(CRYPTO, "cannot decrypt") from None


def _pad(content: bytes) -> bytes:
    n = len(content)
    if n > PROXIED_PADDED_SIZE - 2:
        raise ProtocolError(BLOCK, f"proxied transmission of {n} bytes")
    return b"".join((word16(n), content, _PAD[: PROXIED_PADDED_SIZE - 2 - n]))


def _unpad(padded: bytes) -> bytes:
    if len(padded) < 2:
        raise ProtocolError(CRYPTO, "short padded block")
    n = int.from_bytes(padded[:2], "big")
    if n + 2 > len(padded):
        raise ProtocolError(CRYPTO, "bad padding length")
    return padded[2 : 2 + n]


def _batch_of_one(transmission: bytes) -> bytes:
    if len(transmission) > MAX_PROXIED_TRANSMISSION:
        raise ProtocolError(BLOCK, f"proxied transmission of {len(transmission)} bytes")
    return b"\x01" + word16(len(transmission)) + transmission


def _single_transmission(content: bytes) -> bytes:
    """The one transmission of a batch; `ProtocolError(BLOCK)` unless there is exactly
    one, filling the content exactly (the destination executes one per RFWD)."""
    if len(content) < 3 or content[0] != 1:
        raise ProtocolError(BLOCK, "a proxied batch must hold one transmission")
    n = int.from_bytes(content[1:3], "big")
    if 3 + n != len(content):
        raise ProtocolError(BLOCK, "bad proxied batch")
    return content[3:]


# --- the client (layer 1) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """What the client sends in PFWD, and what it keeps to open the answer."""

    client_key: bytes  # X25519 SPKI: PFWD's key
    enc_transmission: bytes  # PFWD's encrypted transmission
    secret: bytes  # box key shared with the destination for this one transmission
    nonce: bytes  # the PFWD's corrId as nonce


def encrypt_transmission(
    destination_key: bytes, corr_id: bytes, transmission: bytes,
    client_private32: bytes | None = None,
) -> ProxiedRequest:
    """Encrypt one encoded transmission (authorization, corrId, entity, command; its
    corrId should be `corr_id`) for the destination whose session key PKEY gave.

    `corr_id` is the PFWD's corrId (24 bytes) and the box nonce; a fresh X25519 key is
    made unless `client_private32` is given (for fixed test vectors)."""
    if client_private32 is None:
        client_private32 = os.urandom(32)
    secret = shared_secret(client_private32, destination_key)
    nonce = nonce_of(corr_id)
    enc = _box(secret, nonce, _pad(_batch_of_one(transmission)))
    client_key = x25519_spki(bindings.crypto_scalarmult_base(client_private32))
    return ProxiedRequest(client_key, enc, secret, nonce)


def decrypt_response(request: ProxiedRequest, enc_response: bytes) -> bytes:
    """The destination's answer transmission inside a PRES; `ProtocolError(CRYPTO)` if it
    does not open, `BLOCK` if it is not a batch of one."""
    plain = _open(request.secret, reverse_nonce(request.nonce), enc_response)
    return _single_transmission(_unpad(plain))


def verify_relay_key(chain: tuple[bytes, ...], signed_key: bytes, key_hash: bytes) -> bytes | None:
    """The destination's raw X25519 session key from a PKEY, or None if the PKEY does not
    prove it: 2 to 4 certificates, the second (the identity certificate) hashing to the
    key hash of the destination's address, each certificate signed (Ed25519) by the
    next one, and the key signed by the first (online) certificate. Certificate dates
    are not checked."""
    if not 2 <= len(chain) <= 4:
        return None
    if not hmac.compare_digest(hashlib.sha256(chain[1]).digest(), key_hash):
        return None
    try:
        for cert, signer in zip(chain[:-1], chain[1:], strict=True):
            if not _signed_by(cert, certificate_spki(signer)):
                return None
        if not _signed_by(signed_key, certificate_spki(chain[0])):
            return None
        key_spki, _ = signed_object_parts(signed_key)
        if key_type(key_spki) is not KeyType.X25519:
            return None
    except ProtocolError:
        return None
    return raw_key(key_spki)


def _signed_by(signed: bytes, signer_spki: bytes) -> bool:
    obj, signature = signed_object_parts(signed)
    if key_type(signer_spki) is not KeyType.ED25519 or len(signature) != 64:
        return False
    try:
        bindings.crypto_sign_open(signature + obj, raw_key(signer_spki))
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        return False
    return True


# --- the proxy (layer 2) -----------------------------------------------------------------


def encode_fwd_transmission(
    client_corr_id: bytes, version: int, client_key: bytes, enc_transmission: bytes
) -> bytes:
    """``ss(corrId) | word16 version | ss(X25519 SPKI) | encTransmission``."""
    return b"".join((ss(client_corr_id), word16(version), ss(client_key), enc_transmission))


def wrap_forward(
    session_secret32: bytes, rfwd_corr_id: bytes, client_corr_id: bytes, version: int,
    client_key: bytes, enc_transmission: bytes,
) -> bytes:
    """The RFWD body for a PFWD (corrId `client_corr_id`, its version, key and encrypted
    transmission), boxed with the proxy's session secret and the RFWD's corrId as
    nonce."""
    fwd = encode_fwd_transmission(client_corr_id, version, client_key, enc_transmission)
    return _box(session_secret32, nonce_of(rfwd_corr_id), fwd)


def unwrap_forward_response(
    session_secret32: bytes, rfwd_corr_id: bytes, enc_fwd_response: bytes
) -> tuple[bytes, bytes]:
    """(the client's corrId, the PRES body) from an RRES. `ProtocolError(CRYPTO)` if it
    does not open; ``PROXY BROKER RESPONSE "BLOCK"`` if it does not parse, as the
    reference proxy answers then."""
    plain = _open(session_secret32, reverse_nonce(nonce_of(rfwd_corr_id)), enc_fwd_response)
    p = Parser(plain, 0, proxy_broker_error(b"RESPONSE", "BLOCK"))
    corr_id = p.short_string()
    return corr_id, p.rest()


# --- the destination ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A forwarded transmission opened by the destination."""

    corr_id: bytes  # the client's PFWD corrId (the inner nonce)
    version: int  # the version the client encoded the transmission at
    client_key: bytes  # the client's X25519 SPKI
    transmission: bytes  # the one encoded transmission to execute
    secret: bytes  # the box key shared with the client, to encrypt the answer


def unwrap_forward(
    session_secret32: bytes, rfwd_corr_id: bytes, enc_fwd_transmission: bytes,
    destination_private32: bytes,
) -> Forwarded:
    """Open both layers of an RFWD. Errors as the reference answers them: CRYPTO if
    either box does not open, CMD SYNTAX if the forwarded transmission does not parse,
    BLOCK unless there is exactly one transmission inside."""
    plain = _open(session_secret32, nonce_of(rfwd_corr_id), enc_fwd_transmission)
    p = Parser(plain, 0, CMD_SYNTAX)
    corr_id = p.short_string()
    version = p.word16()
    client_key = p.dh_key()
    enc_transmission = p.rest()
    secret = shared_secret(destination_private32, client_key)
    content = _unpad(_open(secret, nonce_of(corr_id), enc_transmission))
    return Forwarded(corr_id, version, client_key, _single_transmission(content), secret)


def encrypt_forwarded_response(
    forwarded: Forwarded, response_transmission: bytes, session_secret32: bytes,
    rfwd_corr_id: bytes,
) -> bytes:
    """The RRES body: the answer transmission (encoded at `forwarded.version`) boxed for
    the client with the reversed inner nonce and padded, then with the client's corrId
    boxed for the proxy with the reversed RFWD nonce."""
    enc_response = _box(
        forwarded.secret, reverse_nonce(nonce_of(forwarded.corr_id)),
        _pad(_batch_of_one(response_transmission)),
    )
    fwd_response = ss(forwarded.corr_id) + enc_response
    return _box(session_secret32, reverse_nonce(nonce_of(rfwd_corr_id)), fwd_response)
