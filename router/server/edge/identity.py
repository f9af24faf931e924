"""The router's long-lived identity (docs/protocol.md#router-identity,
#web-identity-proof).

Two Ed25519 keys, each with a certificate: the **identity** key and its
self-signed certificate, whose SHA-256 is `key_hash` (clients pin it in the
router's address `smp://<base64url(key_hash) with '=' padding>@host:port`, and
the router closes any connection whose client hello names another hash); and
the **online** key, whose certificate the identity key signs. The online key
signs what each connection needs (the router's X25519 key of the connection, a
web client's challenge), so the identity key is used only to issue online
certificates: `renew_online_certificate` replaces the online key without
changing the address.

With a data directory the identity is created on first start and read back on
every later one (files `identity.key`, the 32-byte seed, mode 0600, and
`identity.crt`, the DER; `online.key` and `online.crt` likewise, made when
missing, so an older data directory keeps its address). Without one (only the
memory store runs without a data directory) a fresh identity is made for each
start: the queues do not outlive the process either, so a stable address would
only promise what the router cannot keep.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey

from router.protocol.crypto import new_x25519
from router.protocol.handshake import web_proof_signed_bytes
from router.protocol.types import ProtocolError
from router.protocol.x509 import signed_object_parts
from store.durability import atomic_write

from . import der

KEY_FILE = "identity.key"
CERT_FILE = "identity.crt"
ONLINE_KEY_FILE = "online.key"
ONLINE_CERT_FILE = "online.crt"
COMMON_NAME = "SMP router"
ONLINE_COMMON_NAME = "SMP router online"
_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


class IdentityError(Exception):
    """The identity files exist but cannot be used."""


@dataclass(frozen=True, slots=True)
class ConnectionKey:
    """The router's X25519 key of one connection (docs/protocol.md#block-encryption,
    #x25519-authenticator) and the hello's signed object over its public half."""

    private: bytes  # 32 raw bytes
    signed_key: bytes  # SEQUENCE { X25519 SPKI, Ed25519, signature by the online key }


@dataclass(frozen=True, slots=True)
class RouterIdentity:
    seed: bytes  # identity Ed25519 private seed, 32 bytes
    certificate: bytes  # identity certificate, self-signed X.509 DER
    online_seed: bytes  # online Ed25519 private seed
    online_certificate: bytes  # signed by the identity key

    @property
    def key_hash(self) -> bytes:
        return hashlib.sha256(self.certificate).digest()

    @property
    def fingerprint(self) -> str:
        """`key_hash` as it appears in an address: base64url with '=' padding."""
        return base64.urlsafe_b64encode(self.key_hash).decode()

    def address(self, host: str, port: int) -> str:
        return f"smp://{self.fingerprint}@{host_port(host, port)}"

    @property
    def chain(self) -> tuple[bytes, bytes]:
        """The hello's certificate chain: the online certificate, then the identity
        certificate (docs/protocol.md#web-identity-proof)."""
        return (self.online_certificate, self.certificate)

    def connection_key(self) -> ConnectionKey:
        """A fresh X25519 key for one connection, signed by the online key."""
        private, spki = new_x25519()
        signature = _signing_key(self.online_seed).sign(spki).signature
        signed = der.sequence(spki, der.ed25519_algorithm(), der.bit_string(signature))
        return ConnectionKey(private, signed)

    def web_proof(self, challenge: bytes, session_id: bytes) -> bytes:
        """The online key's signature over a web client's challenge and the session id."""
        return _signing_key(self.online_seed).sign(
            web_proof_signed_bytes(challenge, session_id)
        ).signature


@functools.lru_cache(maxsize=4)
def _signing_key(seed: bytes) -> SigningKey:
    return SigningKey(seed)


def host_port(host: str, port: int) -> str:
    """`host:port`, with an IPv6 literal in brackets as URLs require."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _certificate(spki: bytes, signer_seed: bytes, common_name: str, issuer: str | None) -> bytes:
    serial = secrets.randbits(63) + 1
    tbs = der.tbs_certificate(spki, serial, common_name, datetime.now(UTC), issuer)
    return der.certificate(tbs, SigningKey(signer_seed).sign(tbs).signature)


def _spki(seed: bytes) -> bytes:
    return _ED25519_SPKI_PREFIX + bytes(SigningKey(seed).verify_key)


def _online(identity_seed: bytes) -> tuple[bytes, bytes]:
    """A fresh online key and its certificate, issued by the identity key."""
    seed = secrets.token_bytes(32)
    return seed, _certificate(_spki(seed), identity_seed, ONLINE_COMMON_NAME, COMMON_NAME)


def generate_identity() -> RouterIdentity:
    seed = secrets.token_bytes(32)
    certificate = _certificate(_spki(seed), seed, COMMON_NAME, None)
    return RouterIdentity(seed, certificate, *_online(seed))


def _issued_by(certificate: bytes, identity_seed: bytes) -> bool:
    try:
        tbs, signature = signed_object_parts(certificate)
        SigningKey(identity_seed).verify_key.verify(tbs, signature)
    except (ProtocolError, BadSignatureError, ValueError):
        return False
    return True


def load_identity(data_dir: Path) -> RouterIdentity | None:
    """The identity kept in `data_dir`, or None if it has none yet. An online key that
    is missing is made (and saved) here; one the identity did not issue is an error."""
    key_path, cert_path = data_dir / KEY_FILE, data_dir / CERT_FILE
    if not key_path.exists() and not cert_path.exists():
        return None
    try:
        seed, cert = key_path.read_bytes(), cert_path.read_bytes()
    except OSError as e:
        raise IdentityError(f"cannot read the router identity in {data_dir}: {e}") from e
    spki = _spki(seed) if len(seed) == 32 else b""
    if not spki or spki not in cert:
        raise IdentityError(f"{key_path} and {cert_path} do not belong together")
    online_key, online_cert = data_dir / ONLINE_KEY_FILE, data_dir / ONLINE_CERT_FILE
    if not online_key.exists() and not online_cert.exists():
        identity = RouterIdentity(seed, cert, *_online(seed))
        _save_online(data_dir, identity)
        return identity
    try:
        online_seed, online_certificate = online_key.read_bytes(), online_cert.read_bytes()
    except OSError as e:
        raise IdentityError(f"cannot read the online certificate in {data_dir}: {e}") from e
    if len(online_seed) != 32 or _spki(online_seed) not in online_certificate:
        raise IdentityError(f"{online_key} and {online_cert} do not belong together")
    if not _issued_by(online_certificate, seed):
        raise IdentityError(f"{online_cert} was not issued by the identity in {cert_path}")
    return RouterIdentity(seed, cert, online_seed, online_certificate)


def _save_online(data_dir: Path, identity: RouterIdentity) -> None:
    try:
        atomic_write(data_dir / ONLINE_KEY_FILE, [identity.online_seed], mode=0o600)
        atomic_write(data_dir / ONLINE_CERT_FILE, [identity.online_certificate], mode=0o644)
    except OSError as e:
        raise IdentityError(f"cannot write the online certificate to {data_dir}: {e}") from e


def save_identity(data_dir: Path, identity: RouterIdentity) -> None:
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write(data_dir / KEY_FILE, [identity.seed], mode=0o600)
    atomic_write(data_dir / CERT_FILE, [identity.certificate], mode=0o644)
    _save_online(data_dir, identity)


def load_or_create_identity(data_dir: Path | None) -> RouterIdentity:
    """The data directory's identity, made on first use; a fresh one without a directory."""
    if data_dir is None:
        return generate_identity()
    identity = load_identity(data_dir)
    if identity is None:
        identity = generate_identity()
        try:
            save_identity(data_dir, identity)
        except OSError as e:
            raise IdentityError(f"cannot write the router identity to {data_dir}: {e}") from e
    return identity


def renew_online_certificate(data_dir: Path) -> RouterIdentity:
    """A new online key and certificate, issued by the data directory's identity: the
    address (the identity certificate's hash) stays the same. Routers running on the
    directory use the new one from their next start."""
    identity = load_identity(data_dir)
    if identity is None:
        raise IdentityError(f"no router identity in {data_dir}")
    renewed = RouterIdentity(identity.seed, identity.certificate, *_online(identity.seed))
    _save_online(data_dir, renewed)
    return renewed
