"""Signatures and per-queue encryption (docs/protocol.md#signatures, #authorization, #encryption),
on PyNaCl.

Verification has a constant shape (docs/protocol.md#behaviour, AUTH timing): whatever is missing or
mismatched, exactly one verification of the kind the authorization claims is
run, with a fixed dummy key when there is no real one, so the time taken does
not tell whether a queue or a key exists.

The box keys kept by the stores are NaCl `crypto_box_beforenm` results; MSG
bodies and NMSG metadata are boxed with them directly (`*_afternm`), so the
per-message cost is one XSalsa20-Poly1305 pass and no key agreement.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import os
from dataclasses import dataclass
from functools import lru_cache

from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.exceptions import RuntimeError as NaclRuntimeError

from .encoding import ss
from .handshake import web_proof_signed_bytes
from .keys import KeyType, ed25519_spki, key_type, raw_key, x25519_spki
from .sodium import unbound
from .transmission import authorized_bytes
from .types import CMD_SYNTAX, CRYPTO, HANDSHAKE, LARGE_MSG, ProtocolError
from .x509 import certificate_spki, signed_object_parts

MSG_PADDED_SIZE = 16106  # plain body padded to this, at every version (docs/protocol.md#encryption)
MSG_ENC_SIZE = MSG_PADDED_SIZE + 16  # 16122
NTF_META_PADDED_SIZE = 128
NTF_META_ENC_SIZE = NTF_META_PADDED_SIZE + 16  # 144
NONCE_SIZE = 24

_PAD = b"#" * MSG_PADDED_SIZE
_QUOTA = b"QUOTA "

# Fixed key for the dummy signature checks: a valid Ed25519 public key (from a fixed seed).
_DUMMY_ED25519_PK = bindings.crypto_sign_seed_keypair(b"\x01" * 32)[0]


@dataclass(frozen=True, slots=True)
class MessageBody:
    """A decrypted MSG body: a message (`flags`, `body`) or a quota marker."""

    ts: int
    flags: bytes
    body: bytes
    quota: bool = False


# --- keys and signatures -------------------------------------------------------


def new_ed25519() -> tuple[bytes, bytes]:
    """A fresh signing key: (seed32, Ed25519 SPKI)."""
    seed = os.urandom(32)
    return seed, ed25519_spki(bindings.crypto_sign_seed_keypair(seed)[0])


def new_x25519() -> tuple[bytes, bytes]:
    """A fresh DH key: (private32, X25519 SPKI)."""
    priv = os.urandom(32)
    return priv, x25519_spki(bindings.crypto_scalarmult_base(priv))


def ed25519_public(seed32: bytes) -> bytes:
    """The Ed25519 SPKI of a signing seed."""
    return ed25519_spki(bindings.crypto_sign_ed25519_sk_to_pk(_signing_key(seed32)))


def x25519_public(priv32: bytes) -> bytes:
    """The X25519 SPKI of a private key."""
    return x25519_spki(bindings.crypto_scalarmult_base(priv32))


@lru_cache(maxsize=256)
def _signing_key(seed32: bytes) -> bytes:
    # Deriving the 64-byte secret key costs a scalar multiplication; clients sign
    # many commands with the same few keys.
    return bindings.crypto_sign_seed_keypair(seed32)[1]


def sign(seed32: bytes, data: bytes) -> bytes:
    """Ed25519 signature (64 bytes) of `data`."""
    return bindings.crypto_sign(data, _signing_key(seed32))[:64]


def authorize(
    seed32: bytes, session_id: bytes, corr_id: bytes, entity_id: bytes, command: bytes
) -> bytes:
    """The authorization field (64-byte signature) for a transmission
    (docs/protocol.md#signatures)."""
    return sign(seed32, authorized_bytes(session_id, corr_id, entity_id, command))


# The check itself, without PyNaCl's `crypto_sign_open` around it, which copies the
# signed bytes behind the signature and back out (for a 16 KB SEND: a concatenation, a
# zeroed output buffer, libsodium's move into it, the copy out): the same checks.
_VERIFY_DETACHED = unbound("crypto_sign_ed25519_verify_detached",
                           (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulonglong, ctypes.c_char_p))


def _ed25519_ok(signature: bytes, public32: bytes, data: bytes) -> bool:
    # libsodium reads 64 and 32 bytes behind the pointers: other lengths go the long
    # way, which refuses them.
    if _VERIFY_DETACHED is not None and len(signature) == 64 and len(public32) == 32:
        try:
            return _VERIFY_DETACHED(signature, data, len(data), public32) == 0
        except ctypes.ArgumentError:  # not bytes (a view): the long way
            pass
    try:
        bindings.crypto_sign_open(signature + data, public32)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        return False
    return True


# --- X25519 authenticators (docs/protocol.md#x25519-authenticator) --------------------

AUTHENTICATOR_SIZE = 80  # 16-byte tag + box of the 64-byte SHA-512
# A fixed X25519 key for the dummy check: a valid point, so libsodium runs the whole DH.
_DUMMY_X25519_PUBLIC = bindings.crypto_scalarmult_base(hashlib.sha256(b"SMP dummy X25519").digest())
# Used only when a connection has no DH key of the router's (never, from v7 on).
_DUMMY_X25519_PRIVATE = hashlib.sha256(b"SMP dummy router X25519").digest()


def cb_nonce(corr_id: bytes) -> bytes:
    """The box nonce of a corrId: its first 24 bytes, zero-padded if shorter."""
    return corr_id[:NONCE_SIZE].ljust(NONCE_SIZE, b"\x00")


def cb_authenticator(
    peer_public32: bytes, own_private32: bytes, corr_id: bytes, authorized: bytes
) -> bytes:
    """An X25519 authenticator (80 bytes): box(DH(own, peer), nonce = corrId,
    SHA-512(authorized)). The client boxes with its queue key and the router's key of
    the connection; the router checks with the reverse pair."""
    shared = bindings.crypto_box_beforenm(peer_public32, own_private32)
    digest = hashlib.sha512(authorized).digest()
    return bindings.crypto_box_easy_afternm(digest, cb_nonce(corr_id), shared)


def _authenticator_ok(
    authenticator: bytes, public32: bytes, private32: bytes, corr_id: bytes, authorized: bytes
) -> bool:
    digest = hashlib.sha512(authorized).digest()
    try:
        shared = bindings.crypto_box_beforenm(public32, private32)
        opened = bindings.crypto_box_open_easy_afternm(authenticator, cb_nonce(corr_id), shared)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        return False
    return hmac.compare_digest(opened, digest)


def _key_kind(key_spki: bytes | None) -> KeyType | None:
    if key_spki is None:
        return None
    try:
        return key_type(key_spki)
    except ProtocolError:
        return None


def verify_authorization(
    authorization: bytes,
    key_spki: bytes | None,
    authorized: bytes,
    *,
    corr_id: bytes = b"",
    router_dh_private: bytes | None = None,
) -> bool:
    """True only if `authorization` is valid for `key_spki` over `authorized`.

    64 bytes is an Ed25519 signature. 80 bytes is an X25519 authenticator, checked
    with the router's DH key of the connection (`router_dh_private`) and the corrId as
    nonce. 114 bytes (Ed448) fails: PyNaCl has no Ed448. In every failing case one
    verification of the same kind still runs, with a dummy key where the real one is
    missing or of another type (docs/protocol.md#authorization).
    """
    n = len(authorization)
    kind = _key_kind(key_spki)
    if n == 64:
        if kind is KeyType.ED25519:
            # key_spki was validated by _key_kind: the raw key follows the 12-byte prefix.
            return _ed25519_ok(authorization, key_spki[12:], authorized)  # type: ignore[index]
        _ed25519_ok(authorization, _DUMMY_ED25519_PK, authorized)
        return False
    if n == AUTHENTICATOR_SIZE:
        private = router_dh_private if router_dh_private is not None else _DUMMY_X25519_PRIVATE
        if kind is KeyType.X25519 and router_dh_private is not None:
            return _authenticator_ok(authorization, key_spki[12:], private, corr_id, authorized)  # type: ignore[index]
        _authenticator_ok(authorization, _DUMMY_X25519_PUBLIC, private, corr_id, authorized)
        return False
    if n == 114:
        # No Ed448 here: spend an Ed25519 verification so the cost stays the same
        # whether the queue and key exist or not.
        _ed25519_ok(authorization[:64], _DUMMY_ED25519_PK, authorized)
        return False
    return False


# --- per-queue boxes (docs/protocol.md#encryption) ------------------------------------------------


def box_key(priv32: bytes, peer_spki: bytes) -> bytes:
    """The precomputed crypto_box key for our private key and the peer's X25519 key."""
    if _key_kind(peer_spki) is not KeyType.X25519:
        raise ProtocolError(CMD_SYNTAX, "DH key must be X25519")
    try:
        return bindings.crypto_box_beforenm(raw_key(peer_spki), priv32)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        # libsodium refuses low-order points.
        raise ProtocolError(CMD_SYNTAX, "unusable DH key") from None


def encrypt_msg_body(
    key32: bytes, msg_id: bytes, ts: int, flags: bytes, body: bytes, quota: bool = False
) -> bytes:
    """The MSG encBody (16122 bytes): box(pad(plain, 16106), nonce = msgId)."""
    ts8 = ts.to_bytes(8, "big", signed=True)
    if quota:
        head, body = _QUOTA + ts8, b""
    else:
        head = b"".join((ts8, flags, b" "))
    n = len(head) + len(body)
    if n > MSG_PADDED_SIZE - 2:
        raise ProtocolError(LARGE_MSG, f"message of {len(body)} bytes")
    padded = b"".join((n.to_bytes(2, "big"), head, body, _PAD[n + 2 :]))
    return bindings.crypto_box_easy_afternm(padded, msg_id, key32)


def _open(enc: bytes, nonce: bytes, key32: bytes) -> bytes:
    try:
        return bindings.crypto_box_open_easy_afternm(enc, nonce, key32)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        raise ProtocolError(CRYPTO, "cannot decrypt") from None


def _unpad(padded: bytes) -> bytes:
    if len(padded) < 2:
        raise ProtocolError(CRYPTO, "short padded block")
    n = (padded[0] << 8) | padded[1]
    if n + 2 > len(padded):
        raise ProtocolError(CRYPTO, "bad padding length")
    return padded[2 : 2 + n]


def decrypt_msg_body(key32: bytes, msg_id: bytes, enc_body: bytes) -> MessageBody:
    """The recipient's side of `encrypt_msg_body`; `ProtocolError(CRYPTO)` if it fails."""
    plain = _unpad(_open(enc_body, msg_id, key32))
    if plain.startswith(_QUOTA):
        if len(plain) < 14:
            raise ProtocolError(CRYPTO, "bad quota marker")
        return MessageBody(int.from_bytes(plain[6:14], "big", signed=True), b"", b"", True)
    sp = plain.find(b" ", 8)
    if len(plain) < 10 or sp < 9:
        raise ProtocolError(CRYPTO, "bad message body")
    ts = int.from_bytes(plain[:8], "big", signed=True)
    return MessageBody(ts, plain[8:sp], plain[sp + 1 :])


def encrypt_ntf_meta(
    key32: bytes, msg_id: bytes, ts: int, nonce: bytes | None = None
) -> tuple[bytes, bytes]:
    """(nonce24, encMeta144) for an NMSG: box(pad(ss(msgId) | int64 ts, 128))."""
    if nonce is None:
        nonce = os.urandom(NONCE_SIZE)
    meta = ss(msg_id) + ts.to_bytes(8, "big", signed=True)
    n = len(meta)
    if n > NTF_META_PADDED_SIZE - 2:
        raise ValueError("notification metadata too long")
    padded = b"".join((n.to_bytes(2, "big"), meta, _PAD[: NTF_META_PADDED_SIZE - 2 - n]))
    return nonce, bindings.crypto_box_easy_afternm(padded, nonce, key32)


def decrypt_ntf_meta(key32: bytes, nonce: bytes, enc_meta: bytes) -> tuple[bytes, int]:
    """(msgId, ts) from an NMSG; bytes after ts are ignored. `ProtocolError(CRYPTO)` on failure."""
    meta = _unpad(_open(enc_meta, nonce, key32))
    if not meta:
        raise ProtocolError(CRYPTO, "empty metadata")
    end = 1 + meta[0]
    if end + 8 > len(meta):
        raise ProtocolError(CRYPTO, "bad metadata")
    return meta[1:end], int.from_bytes(meta[end : end + 8], "big", signed=True)


# --- the router's identity in its hello (docs/protocol.md#web-identity-proof) ----------


def hello_dh_key(signed_key: bytes) -> bytes:
    """The raw X25519 key of the hello's signed key (the router's key of the connection);
    `ProtocolError(HANDSHAKE)` if it is not one."""
    spki, _ = signed_object_parts(signed_key)
    if _key_kind(spki) is not KeyType.X25519:
        raise ProtocolError(HANDSHAKE, "the signed key is not an X25519 key")
    return raw_key(spki)


def verify_web_identity(
    chain: tuple[bytes, ...], signed_key: bytes, proof: bytes, challenge: bytes,
    session_id: bytes, key_hash: bytes,
) -> bool:
    """The web client's check of a v19 hello: a chain of 2 to 4 certificates whose second
    (the identity certificate) hashes to `key_hash`, and whose first (the online
    certificate) has the key that signed both the challenge with the session id and the
    signed key."""
    if not 2 <= len(chain) <= 4:
        return False
    if not hmac.compare_digest(hashlib.sha256(chain[1]).digest(), key_hash):
        return False
    try:
        online = certificate_spki(chain[0])
        key_object, key_signature = signed_object_parts(signed_key)
    except ProtocolError:
        return False
    if _key_kind(online) is not KeyType.ED25519 or len(key_signature) != 64:
        return False
    public = raw_key(online)
    return _ed25519_ok(proof, public, web_proof_signed_bytes(challenge, session_id)) and (
        _ed25519_ok(key_signature, public, key_object)
    )


def verify_tls_identity(
    chain: tuple[bytes, ...], signed_key: bytes | None, key_hash: bytes,
) -> bool:
    """A native TLS client's check of the router's chain (docs/protocol.md#native-tls):
    two certificates, the second (the identity certificate) hashing to `key_hash`, its
    Ed25519 key signing the first (the online certificate), whose key signed the hello's
    signed key when there is one."""
    if len(chain) != 2:
        return False
    online, identity = chain
    if not hmac.compare_digest(hashlib.sha256(identity).digest(), key_hash):
        return False
    try:
        identity_spki, online_spki = certificate_spki(identity), certificate_spki(online)
        tbs, signature = signed_object_parts(online)
    except ProtocolError:
        return False
    if _key_kind(identity_spki) is not KeyType.ED25519 or len(signature) != 64:
        return False
    if not _ed25519_ok(signature, raw_key(identity_spki), tbs):
        return False
    if signed_key is None:
        return True
    try:
        key_object, key_signature = signed_object_parts(signed_key)
    except ProtocolError:
        return False
    return (
        _key_kind(online_spki) is KeyType.ED25519 and len(key_signature) == 64
        and _ed25519_ok(key_signature, raw_key(online_spki), key_object)
    )


# --- a service's certificate and its key of the session (docs/protocol.md#client-service) -------


def service_identity_certificate(chain: tuple[bytes, ...]) -> tuple[bytes, bytes] | None:
    """(leaf, identity certificate) of a service's chain as the reference reads it
    (`chainIdCaCerts`): one self-signed certificate is both; of 2 to 4, the first is
    the leaf and the second the identity. None for an empty or longer chain."""
    if len(chain) == 1:
        return chain[0], chain[0]
    if 2 <= len(chain) <= 4:
        return chain[0], chain[1]
    return None


def verify_service_key(chain: tuple[bytes, ...], signed_key: bytes) -> tuple[bytes, bytes] | None:
    """(identity certificate, the session's Ed25519 SPKI) if the chain's leaf has an
    Ed25519 key that signed `signed_key` (an X.509 signed public key) and that key is
    Ed25519; None otherwise (the reference's `HANDSHAKE BAD_AUTH`)."""
    certs = service_identity_certificate(chain)
    if certs is None:
        return None
    leaf, identity = certs
    try:
        leaf_spki = certificate_spki(leaf)
        session_spki, signature = signed_object_parts(signed_key)
    except ProtocolError:
        return None
    if _key_kind(leaf_spki) is not KeyType.ED25519 or len(signature) != 64:
        return None
    if _key_kind(session_spki) is not KeyType.ED25519:
        return None
    if not _ed25519_ok(signature, raw_key(leaf_spki), session_spki):
        return None
    return identity, session_spki
