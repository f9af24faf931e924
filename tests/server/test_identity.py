"""The router identity: a self-signed Ed25519 certificate whose hash is the key hash."""

from __future__ import annotations

import base64
import hashlib
import ssl
import stat
import subprocess

import pytest
from nacl.signing import VerifyKey

from router.protocol.x509 import certificate_spki, signed_object_parts
from router.server.edge import der
from router.server.edge.identity import (
    CERT_FILE,
    KEY_FILE,
    ONLINE_CERT_FILE,
    ONLINE_KEY_FILE,
    IdentityError,
    generate_identity,
    host_port,
    load_or_create_identity,
    renew_online_certificate,
)


def parse_tlv(data: bytes, pos: int = 0) -> tuple[int, bytes, int]:
    """(tag, value, next position) of one DER element: enough to walk a certificate."""
    tag, first = data[pos], data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        n = first & 0x7F
        length = int.from_bytes(data[pos : pos + n], "big")
        pos += n
    return tag, data[pos : pos + length], pos + length


def children(value: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(value):
        tag, child, pos = parse_tlv(value, pos)
        out.append((tag, child))
    return out


def test_the_certificate_is_a_signed_x509_structure_over_the_identity_key():
    identity = generate_identity()
    tag, body, end = parse_tlv(identity.certificate)
    assert tag == 0x30 and end == len(identity.certificate)
    (tbs_tag, tbs), (_, algorithm), (sig_tag, sig) = children(body)
    assert tbs_tag == 0x30 and sig_tag == 0x03 and sig[0] == 0
    assert algorithm == der.oid(der.ED25519_OID)
    fields = children(tbs)
    assert fields[0] == (0xA0, der.integer(2))  # v3
    spki = der.sequence(*[der.tlv(t, v) for t, v in children(fields[6][1])])
    public = spki[-32:]
    tbs_der = der.sequence(*[der.tlv(t, v) for t, v in fields])
    VerifyKey(public).verify(tbs_der, sig[1:])


def test_the_key_hash_is_the_sha256_of_the_certificate_and_the_fingerprint_is_padded_base64url():
    identity = generate_identity()
    assert identity.key_hash == hashlib.sha256(identity.certificate).digest()
    assert identity.fingerprint.endswith("=") and len(identity.fingerprint) == 44
    assert base64.urlsafe_b64decode(identity.fingerprint) == identity.key_hash


def test_the_address_names_the_key_hash_host_and_port():
    identity = generate_identity()
    assert identity.address("127.0.0.1", 5224) == f"smp://{identity.fingerprint}@127.0.0.1:5224"
    assert host_port("::1", 80) == "[::1]:80"


def test_a_data_directory_keeps_the_identity_across_starts(tmp_path):
    first = load_or_create_identity(tmp_path / "data")
    second = load_or_create_identity(tmp_path / "data")
    assert first == second
    assert stat.S_IMODE((tmp_path / "data" / KEY_FILE).stat().st_mode) == 0o600


def test_without_a_data_directory_every_start_gets_a_fresh_identity():
    assert load_or_create_identity(None).key_hash != load_or_create_identity(None).key_hash


def test_identity_files_that_do_not_belong_together_are_refused(tmp_path):
    load_or_create_identity(tmp_path)
    (tmp_path / CERT_FILE).write_bytes(generate_identity().certificate)
    with pytest.raises(IdentityError):
        load_or_create_identity(tmp_path)


def test_a_key_file_without_its_certificate_is_refused(tmp_path):
    load_or_create_identity(tmp_path)
    (tmp_path / CERT_FILE).unlink()
    with pytest.raises(IdentityError):
        load_or_create_identity(tmp_path)


def test_openssl_reads_the_certificate(tmp_path):
    # scripts/install-test-deps.sh installs openssl: without it this fails, never skips
    path = tmp_path / "router.crt"
    path.write_bytes(generate_identity().certificate)
    result = subprocess.run(
        ["openssl", "x509", "-inform", "DER", "-in", str(path), "-noout", "-subject"],
        capture_output=True, text=True, check=True,
    )
    assert "SMP router" in result.stdout


def test_openssl_accepts_the_routers_own_chain(tmp_path):
    """The identity certificate is a CA (basicConstraints CA:TRUE, keyUsage keyCertSign)
    and the online one an end entity it issued: `openssl verify` takes the chain."""
    identity = generate_identity()
    ca, leaf = tmp_path / "identity.pem", tmp_path / "online.pem"
    ca.write_text(ssl.DER_cert_to_PEM_cert(identity.certificate))
    leaf.write_text(ssl.DER_cert_to_PEM_cert(identity.online_certificate))
    result = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca), str(leaf)], capture_output=True, text=True
    )
    assert result.returncode == 0 and f"{leaf}: OK" in result.stdout, result.stderr
    text = subprocess.run(
        ["openssl", "x509", "-in", str(ca), "-noout", "-ext", "basicConstraints,keyUsage"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "CA:TRUE" in text and "Certificate Sign" in text


def test_an_identity_made_before_the_ca_marker_keeps_its_address(tmp_path, monkeypatch):
    """Existing data directories read their certificate from disk: the address stays."""
    monkeypatch.setattr(der, "ca_extensions", lambda is_ca: b"")
    old = load_or_create_identity(tmp_path)
    assert b"\x55\x1d\x13" not in old.certificate  # no basicConstraints OID in it
    monkeypatch.undo()
    again = load_or_create_identity(tmp_path)
    assert again.certificate == old.certificate and again.key_hash == old.key_hash
    renewed = renew_online_certificate(tmp_path)
    assert renewed.key_hash == old.key_hash


# --- the online certificate (docs/protocol.md#server-hello-identity) ----------------------


def test_the_online_certificate_is_issued_by_the_identity_and_signs_connection_keys():
    identity = generate_identity()
    tbs, signature = signed_object_parts(identity.online_certificate)
    VerifyKey(_public(identity.seed)).verify(tbs, signature)
    assert identity.chain == (identity.online_certificate, identity.certificate)
    key = identity.connection_key()
    obj, sig = signed_object_parts(key.signed_key)
    VerifyKey(certificate_spki(identity.online_certificate)[12:]).verify(obj, sig)
    assert identity.connection_key().private != key.private  # fresh for each connection


def _public(seed: bytes) -> bytes:
    from nacl.signing import SigningKey

    return bytes(SigningKey(seed).verify_key)


def test_renewing_the_online_certificate_keeps_the_address(tmp_path):
    first = load_or_create_identity(tmp_path)
    renewed = renew_online_certificate(tmp_path)
    again = load_or_create_identity(tmp_path)
    assert renewed.key_hash == first.key_hash == again.key_hash
    assert renewed.online_certificate != first.online_certificate
    assert again.online_certificate == renewed.online_certificate


def test_a_data_directory_from_before_the_online_certificate_keeps_its_address(tmp_path):
    first = load_or_create_identity(tmp_path)
    (tmp_path / ONLINE_KEY_FILE).unlink()
    (tmp_path / ONLINE_CERT_FILE).unlink()
    again = load_or_create_identity(tmp_path)
    assert again.key_hash == first.key_hash
    assert (tmp_path / ONLINE_CERT_FILE).exists()


def test_an_online_certificate_of_another_identity_is_refused(tmp_path):
    load_or_create_identity(tmp_path)
    other = generate_identity()
    (tmp_path / ONLINE_KEY_FILE).write_bytes(other.online_seed)
    (tmp_path / ONLINE_CERT_FILE).write_bytes(other.online_certificate)
    with pytest.raises(IdentityError, match="not issued by"):
        load_or_create_identity(tmp_path)
