"""The service parts of the codec, byte for byte as the reference's encoders write them
(simplexmq master: Protocol.hs `encodeProtocol`, Transport.hs `SMPServerHandshakeResponse`,
Encoding.hs: Int64 as two big-endian Word32, ByteString as a length byte and the bytes,
Maybe as '0' or '1' and the value)."""

from __future__ import annotations

import hashlib

import pytest

from router.protocol.codec import decode_command, decode_response, encode_command, encode_response
from router.protocol.handshake import (
    ServiceHandshakeResult,
    decode_service_handshake_result,
    encode_service_handshake_result,
)
from router.protocol.ids_hash import queue_ids_hash
from router.protocol.transmission import decode_transmission, encode_transmission
from router.protocol.types import (
    ALLS,
    CMD_SYNTAX,
    ENDS,
    NO_IDS_HASH,
    NSUBS,
    SOKS,
    SUBS,
    ProtocolError,
    Transmission,
)

V18, V19 = 18, 19
HASH = bytes(range(16))


def test_the_ids_hash_is_the_xor_of_the_md5_of_each_id():
    a, b = b"a" * 24, b"b" * 24
    da, db = hashlib.md5(a).digest(), hashlib.md5(b).digest()
    assert queue_ids_hash([a, b]) == bytes(x ^ y for x, y in zip(da, db, strict=True))
    assert queue_ids_hash([b, a]) == queue_ids_hash([a, b])
    assert queue_ids_hash([]) == NO_IDS_HASH
    assert queue_ids_hash([a, b, a]) == db  # an id added and removed again cancels out


@pytest.mark.parametrize(("cmd", "tag"), [(SUBS, b"SUBS"), (NSUBS, b"NSUBS")])
def test_service_subscriptions_carry_count_and_hash_from_v19(cmd, tag):
    wire = tag + b" " + (5).to_bytes(8, "big") + b"\x10" + HASH  # e (SUBS_, ' ', n, idsHash)
    assert encode_command(cmd(5, HASH), V19) == wire
    assert decode_command(wire, V19) == cmd(5, HASH)
    assert encode_command(cmd(5, HASH), V18) == tag  # e SUBS_
    assert decode_command(tag, V18) == cmd(-1, NO_IDS_HASH)  # SUBS (-1) mempty
    with pytest.raises(ProtocolError):
        decode_command(tag, V19)
    with pytest.raises(ProtocolError) as caught:
        decode_command(wire, V18)
    assert caught.value.error == CMD_SYNTAX


def test_a_negative_count_is_two_big_endian_words():
    assert encode_command(SUBS(-1, NO_IDS_HASH), V19) == (
        b"SUBS " + b"\xff" * 8 + b"\x10" + NO_IDS_HASH
    )


@pytest.mark.parametrize(("resp", "tag"), [(SOKS, b"SOKS"), (ENDS, b"ENDS")])
def test_soks_and_ends_carry_the_hash_from_v19(resp, tag):
    count = (3).to_bytes(8, "big")
    assert encode_response(resp(3, HASH), V19) == tag + b" " + count + b"\x10" + HASH
    assert decode_response(tag + b" " + count + b"\x10" + HASH, V19) == resp(3, HASH)
    assert encode_response(resp(3, HASH), V18) == tag + b" " + count  # e (tag, ' ', n)
    assert decode_response(tag + b" " + count, V18) == resp(3, NO_IDS_HASH)
    with pytest.raises(ProtocolError):
        decode_response(tag + b" " + count + b"\x0f" + HASH[:15], V19)  # a hash is 16 bytes


def test_alls_has_no_parameters():
    assert encode_response(ALLS(), V19) == b"ALLS"


def test_a_service_signature_follows_a_non_empty_authorization_from_v16():
    sig, service_sig = b"s" * 64, b"v" * 64
    t = Transmission(sig, b"c", b"e", b"SUB", service_sig)
    wire = b"\x40" + sig + b"1\x40" + service_sig + b"\x01c\x01eSUB"  # smpEncode (auth, Just sig)
    assert encode_transmission(t, 16) == wire
    assert decode_transmission(wire, 16) == t
    unsigned = Transmission(sig, b"c", b"e", b"SUB")
    assert encode_transmission(unsigned, 16) == b"\x40" + sig + b"0\x01c\x01eSUB"


def test_the_third_handshake_block_is_a_service_id_or_an_error():
    service_id = b"i" * 24
    ok = ServiceHandshakeResult(service_id=service_id)
    assert encode_service_handshake_result(ok) == b"R\x18" + service_id  # ('R', serviceId)
    assert decode_service_handshake_result(b"R\x18" + service_id) == ok
    failed = ServiceHandshakeResult(error=b"HANDSHAKE BAD_AUTH")  # ('E', TEHandshake BAD_AUTH)
    assert encode_service_handshake_result(failed) == b"EHANDSHAKE BAD_AUTH"
    assert decode_service_handshake_result(b"EHANDSHAKE BAD_AUTH") == failed
    with pytest.raises(ProtocolError):
        decode_service_handshake_result(b"X")
