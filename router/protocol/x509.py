"""The few X.509 facts a hello needs (docs/protocol.md#server-hello-identity,
#web-identity-proof): a certificate's public key and the parts of a signed object.

Only DER's tag-length-value walk, no general ASN.1: the router's certificates and
signed keys are Ed25519 (an Ed448 key is recognised, not verified). Malformed input
raises `ProtocolError(HANDSHAKE)`.
"""

from __future__ import annotations

from .types import HANDSHAKE, ProtocolError


def _fail(why: str) -> ProtocolError:
    return ProtocolError(HANDSHAKE, why)


def _element(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the element) of the element at `pos`."""
    if pos + 2 > len(der):
        raise _fail("truncated DER")
    tag = der[pos]
    first = der[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        n = first & 0x7F
        if n == 0 or n > 4 or pos + n > len(der):
            raise _fail("unsupported DER length")
        length = int.from_bytes(der[pos : pos + n], "big")
        pos += n
    end = pos + length
    if end > len(der):
        raise _fail("truncated DER")
    return tag, pos, end


def _sequence_items(der: bytes, start: int = 0) -> tuple[list[tuple[int, int, int]], int]:
    """The elements inside the SEQUENCE at `start` as (tag, element start, end)."""
    tag, pos, end = _element(der, start)
    if tag != 0x30:
        raise _fail("expected a SEQUENCE")
    items = []
    while pos < end:
        item_tag, _, item_end = _element(der, pos)
        items.append((item_tag, pos, item_end))
        pos = item_end
    return items, end


def signed_object_parts(signed: bytes) -> tuple[bytes, bytes]:
    """(the signed object's DER, the signature) of ``SEQUENCE { object, algorithm, BIT STRING }``:
    a signed key, or a certificate (whose object is its TBSCertificate)."""
    items, _ = _sequence_items(signed)
    if len(items) != 3 or items[2][0] != 0x03:
        raise _fail("not a signed object")
    obj = signed[items[0][1] : items[0][2]]
    _, value, end = _element(signed, items[2][1])
    if value >= end or signed[value] != 0:
        raise _fail("signature BIT STRING with unused bits")
    return obj, signed[value + 1 : end]


def certificate_spki(cert: bytes) -> bytes:
    """The SubjectPublicKeyInfo DER of a certificate."""
    tbs, _ = signed_object_parts(cert)
    items, _ = _sequence_items(tbs)
    fields = items[1:] if items and items[0][0] == 0xA0 else items  # [0] version is optional
    # serialNumber, signature, issuer, validity, subject, subjectPublicKeyInfo
    if len(fields) < 6:
        raise _fail("certificate without a public key")
    _, start, end = fields[5]
    return tbs[start:end]


_ED25519_ALGORITHM = bytes.fromhex("300506032b6570")  # SEQUENCE { OID 1.3.101.112 }


def _der(tag: int, value: bytes) -> bytes:
    n = len(value)
    if n < 0x80:
        return bytes((tag, n)) + value
    length = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(length))) + length + value


def ed25519_signed_object(obj: bytes, signature: bytes) -> bytes:
    """``SEQUENCE { object, Ed25519, BIT STRING signature }``: a signed key as a service
    sends its session key (docs/protocol.md#client-service)."""
    return _der(0x30, obj + _ED25519_ALGORITHM + _der(0x03, b"\x00" + signature))
