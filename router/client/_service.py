"""A client acting for a service by its TLS client certificate (docs/protocol.md#client-service).

The certificate files are the service's long-term identity: the router gives the
same service id to every session that presents them with the same role. Each
session makes a fresh Ed25519 key, signed by the leaf certificate's key; in the
session, NEW, SUB and NSUB carry that key's signature besides the queue key's,
which signs the identity certificate's hash first (docs/protocol.md#service-signature).
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from router.protocol import crypto
from router.protocol.crypto import service_identity_certificate
from router.protocol.handshake import ClientServiceCert
from router.protocol.x509 import ed25519_signed_object

_PEM_CERTIFICATE = "-----END CERTIFICATE-----"


@dataclass(frozen=True, slots=True)
class ServiceCertificate:
    """The PEM files of a service's certificate chain (leaf first) and of the leaf's
    Ed25519 private key, and the role it acts in: b"M" messaging, b"N" notifier."""

    cert_file: Path
    key_file: Path
    role: bytes = b"M"

    def chain(self) -> tuple[bytes, ...]:
        text = Path(self.cert_file).read_text()
        blocks = [b + _PEM_CERTIFICATE for b in text.split(_PEM_CERTIFICATE) if b.strip()]
        return tuple(ssl.PEM_cert_to_DER_cert(b.strip() + "\n") for b in blocks)

    def leaf_seed(self) -> bytes:
        key = serialization.load_pem_private_key(Path(self.key_file).read_bytes(), None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{self.key_file}: a service key must be Ed25519")
        return key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )


@dataclass(frozen=True, slots=True)
class ServiceSessionKeys:
    """What a service session signs with: its key of the session and the identity
    certificate's hash; the service id is the router's answer."""

    session_seed: bytes
    cert_hash: bytes
    service_id: bytes = b""


def service_hello(cert: ServiceCertificate) -> tuple[ClientServiceCert, ServiceSessionKeys]:
    """The hello's `clientService` and the session's keys."""
    chain = cert.chain()
    certs = service_identity_certificate(chain)
    if certs is None:
        raise ValueError(f"{cert.cert_file}: a service chain has 1 to 4 certificates")
    seed, spki = crypto.new_ed25519()
    signed = ed25519_signed_object(spki, crypto.sign(cert.leaf_seed(), spki))
    keys = ServiceSessionKeys(seed, hashlib.sha256(certs[1]).digest())
    return ClientServiceCert(cert.role, chain, signed), keys
