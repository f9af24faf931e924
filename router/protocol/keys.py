"""Public keys as X.509 SubjectPublicKeyInfo DER (docs/protocol.md#keys).

SMP carries every key as its SPKI DER. For the key types used here that DER is
a fixed prefix followed by the raw key, so recognising a key is a prefix check
and no ASN.1 parser is needed.
"""

from __future__ import annotations

from enum import Enum

from .types import CMD_SYNTAX, ProtocolError


class KeyType(Enum):
    ED25519 = "ed25519"
    ED448 = "ed448"
    X25519 = "x25519"


ED25519_PREFIX = bytes.fromhex("302a300506032b6570032100")
X25519_PREFIX = bytes.fromhex("302a300506032b656e032100")
ED448_PREFIX = bytes.fromhex("3043300506032b6571033a00")

_PREFIX_LEN = 12
# (total SPKI length, prefix) -> key type
_BY_PREFIX = {
    (44, ED25519_PREFIX): KeyType.ED25519,
    (44, X25519_PREFIX): KeyType.X25519,
    (69, ED448_PREFIX): KeyType.ED448,
}


def key_type(spki: bytes) -> KeyType:
    """The type of an SPKI-encoded key; `ProtocolError(CMD SYNTAX)` for any other DER."""
    kt = _BY_PREFIX.get((len(spki), bytes(spki[:_PREFIX_LEN])))
    if kt is None:
        raise ProtocolError(CMD_SYNTAX, "unsupported key encoding")
    return kt


def _spki(prefix: bytes, raw: bytes, size: int) -> bytes:
    if len(raw) != size:
        raise ValueError(f"raw key must be {size} bytes, got {len(raw)}")
    return prefix + raw


def ed25519_spki(raw32: bytes) -> bytes:
    return _spki(ED25519_PREFIX, raw32, 32)


def x25519_spki(raw32: bytes) -> bytes:
    return _spki(X25519_PREFIX, raw32, 32)


def ed448_spki(raw57: bytes) -> bytes:
    return _spki(ED448_PREFIX, raw57, 57)


def raw_key(spki: bytes) -> bytes:
    """The raw public key inside a supported SPKI (validated)."""
    key_type(spki)
    return spki[_PREFIX_LEN:]
