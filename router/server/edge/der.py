"""Just enough DER to write the router's Ed25519 X.509 certificates: the self-signed
identity certificate and the online certificate it signs.

The router's identity is the SHA-256 of its certificate's DER (docs/protocol.md#router-identity),
so the certificate only has to be a stable, well-formed byte string signed by
the identity key. Building it by hand keeps the project free of a general
X.509 dependency; the output parses with OpenSSL (`openssl x509 -inform DER`).

The identity certificate is marked as a CA (basicConstraints CA:TRUE, critical, as
the reference's generated CA certificate; keyUsage keyCertSign) and the online
one as an end entity (CA:FALSE, keyUsage digitalSignature), so X.509 tools accept
the chain: `openssl verify -CAfile identity.pem online.pem`.
"""

from __future__ import annotations

from datetime import UTC, datetime

ED25519_OID = (1, 3, 101, 112)
COMMON_NAME_OID = (2, 5, 4, 3)
KEY_USAGE_OID = (2, 5, 29, 15)
BASIC_CONSTRAINTS_OID = (2, 5, 29, 19)
# keyUsage bits (RFC 5280 §4.2.1.3) as DER named BIT STRING contents: the count of
# unused bits, then the bits with the trailing zero bits left out.
DIGITAL_SIGNATURE = b"\x07\x80"  # bit 0
KEY_CERT_SIGN = b"\x02\x04"  # bit 5
# RFC 5280 §4.1.2.5: the "no well-defined expiration" date.
NO_EXPIRY = "99991231235959Z"


def _length(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(raw),)) + raw


def tlv(tag: int, value: bytes) -> bytes:
    return bytes((tag,)) + _length(len(value)) + value


def sequence(*items: bytes) -> bytes:
    return tlv(0x30, b"".join(items))


def set_of(*items: bytes) -> bytes:
    return tlv(0x31, b"".join(sorted(items)))


def integer(n: int) -> bytes:
    if n < 0:
        raise ValueError("only non-negative integers are needed here")
    # One extra byte when the top bit is set keeps the value positive.
    return tlv(0x02, n.to_bytes(n.bit_length() // 8 + 1, "big"))


def oid(arcs: tuple[int, ...]) -> bytes:
    body = bytearray((40 * arcs[0] + arcs[1],))
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body.extend(reversed(chunk))
    return tlv(0x06, bytes(body))


def utf8_string(text: str) -> bytes:
    return tlv(0x0C, text.encode())


def bit_string(data: bytes) -> bytes:
    return tlv(0x03, b"\x00" + data)  # no unused bits


def explicit(number: int, value: bytes) -> bytes:
    return tlv(0xA0 | number, value)


def utc_time(moment: datetime) -> bytes:
    return tlv(0x17, moment.astimezone(UTC).strftime("%y%m%d%H%M%SZ").encode())


def generalized_time(text: str) -> bytes:
    return tlv(0x18, text.encode())


def name(common_name: str) -> bytes:
    return sequence(set_of(sequence(oid(COMMON_NAME_OID), utf8_string(common_name))))


def ed25519_algorithm() -> bytes:
    return sequence(oid(ED25519_OID))  # RFC 8410: no parameters


def boolean(value: bool) -> bytes:
    return tlv(0x01, b"\xff" if value else b"\x00")


def octet_string(data: bytes) -> bytes:
    return tlv(0x04, data)


def extension(arcs: tuple[int, ...], critical: bool, value: bytes) -> bytes:
    # DER leaves out a BOOLEAN equal to its DEFAULT (critical: FALSE)
    return sequence(oid(arcs), *([boolean(True)] if critical else []), octet_string(value))


def ca_extensions(is_ca: bool) -> bytes:
    """[3] extensions: basicConstraints (cA's DEFAULT FALSE left out) and keyUsage."""
    if is_ca:
        constraints = extension(BASIC_CONSTRAINTS_OID, True, sequence(boolean(True)))
        usage = extension(KEY_USAGE_OID, True, tlv(0x03, KEY_CERT_SIGN))
    else:
        constraints = extension(BASIC_CONSTRAINTS_OID, False, sequence())
        usage = extension(KEY_USAGE_OID, True, tlv(0x03, DIGITAL_SIGNATURE))
    return explicit(3, sequence(constraints, usage))


def tbs_certificate(
    spki: bytes, serial: int, common_name: str, not_before: datetime, issuer: str | None = None
) -> bytes:
    """The to-be-signed part of a v3 certificate for an Ed25519 SPKI: self-signed (a
    CA), or issued by the certificate whose subject is `issuer` (an end entity)."""
    subject = name(common_name)
    return sequence(
        explicit(0, integer(2)),  # version v3
        integer(serial),
        ed25519_algorithm(),
        subject if issuer is None else name(issuer),
        sequence(utc_time(not_before), generalized_time(NO_EXPIRY)),
        subject,
        spki,
        ca_extensions(is_ca=issuer is None),
    )


def certificate(tbs: bytes, signature: bytes) -> bytes:
    return sequence(tbs, ed25519_algorithm(), bit_string(signature))
