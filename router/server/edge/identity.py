"""The router's long-lived identity (docs/protocol.md#router-identity).

An Ed25519 key and a self-signed certificate over it. `key_hash` is the
SHA-256 of the certificate's DER; clients pin it in the router's address
`smp://<base64url(key_hash) with '=' padding>@host:port` and the router closes
any connection whose client hello names another hash.

With a data directory the identity is created on first start and read back
on every later one (files `identity.key`, the 32-byte seed, mode 0600, and
`identity.crt`, the DER). Without one (only the memory store runs without a
data directory) a fresh identity is made for each start: the queues do not
outlive the process either, so a stable address would only promise what the
router cannot keep.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from nacl.signing import SigningKey

from router.protocol.crypto import new_x25519
from store.durability import atomic_write

from . import der

KEY_FILE = "identity.key"
CERT_FILE = "identity.crt"
COMMON_NAME = "SMP router"
_ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")


class IdentityError(Exception):
    """The identity files exist but cannot be used."""


@dataclass(frozen=True, slots=True)
class RouterIdentity:
    seed: bytes  # Ed25519 private seed, 32 bytes
    certificate: bytes  # self-signed X.509 DER

    @property
    def key_hash(self) -> bytes:
        return hashlib.sha256(self.certificate).digest()

    @property
    def fingerprint(self) -> str:
        """`key_hash` as it appears in an address: base64url with '=' padding."""
        return base64.urlsafe_b64encode(self.key_hash).decode()

    def address(self, host: str, port: int) -> str:
        return f"smp://{self.fingerprint}@{host_port(host, port)}"

    def hello_certificates(self) -> tuple[tuple[bytes, ...], bytes]:
        """The certificate part of the server hello: (chain, signed key).

        The chain is the identity certificate alone, so a client checks the
        router's identity against the key hash it was given before it says
        anything (docs/protocol.md, "Identity in the server hello"). The signed
        key is an X25519 key signed by the identity key, made once per router
        start: unused at v9/v10, it is there because the hello's format pairs it
        with the chain.
        """
        return _hello_certificates(self.seed, self.certificate)


@functools.cache
def _hello_certificates(seed: bytes, certificate: bytes) -> tuple[tuple[bytes, ...], bytes]:
    _, x25519_spki = new_x25519()
    signature = SigningKey(seed).sign(x25519_spki).signature
    signed_key = der.sequence(x25519_spki, der.ed25519_algorithm(), der.bit_string(signature))
    return (certificate,), signed_key


def host_port(host: str, port: int) -> str:
    """`host:port`, with an IPv6 literal in brackets as URLs require."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def generate_identity() -> RouterIdentity:
    seed = secrets.token_bytes(32)
    spki = _ED25519_SPKI_PREFIX + bytes(SigningKey(seed).verify_key)
    serial = secrets.randbits(63) + 1
    tbs = der.tbs_certificate(spki, serial, COMMON_NAME, datetime.now(UTC))
    signature = SigningKey(seed).sign(tbs).signature
    return RouterIdentity(seed, der.certificate(tbs, signature))


def load_identity(data_dir: Path) -> RouterIdentity | None:
    """The identity kept in `data_dir`, or None if it has none yet."""
    key_path, cert_path = data_dir / KEY_FILE, data_dir / CERT_FILE
    if not key_path.exists() and not cert_path.exists():
        return None
    try:
        seed, cert = key_path.read_bytes(), cert_path.read_bytes()
    except OSError as e:
        raise IdentityError(f"cannot read the router identity in {data_dir}: {e}") from e
    spki = _ED25519_SPKI_PREFIX + bytes(SigningKey(seed).verify_key) if len(seed) == 32 else b""
    if not spki or spki not in cert:
        raise IdentityError(f"{key_path} and {cert_path} do not belong together")
    return RouterIdentity(seed, cert)


def save_identity(data_dir: Path, identity: RouterIdentity) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(data_dir / KEY_FILE, [identity.seed], mode=0o600)
    atomic_write(data_dir / CERT_FILE, [identity.certificate], mode=0o644)


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

