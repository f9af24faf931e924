"""Table-driven codec cases: what each malformed input is answered with."""

from __future__ import annotations

import pytest

from router.protocol import (
    ACK,
    AUTH,
    BLOCK,
    BLOCK_SIZE,
    CMD_HAS_AUTH,
    CMD_NO_AUTH,
    CMD_NO_ENTITY,
    CMD_SYNTAX,
    CMD_UNKNOWN,
    DEL,
    ERR,
    GET,
    LARGE_MSG,
    MAX_TRANSMISSION_SIZE,
    NEW,
    NKEY,
    NSUB,
    NSUBS,
    PFWD,
    PING,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    PRXY,
    RFWD,
    SEND,
    SKEY,
    SUB,
    SUBS,
    BatchPacker,
    CmdErr,
    ErrorType,
    ProtocolError,
    Transmission,
    check_auth_length,
    check_credentials,
    decode_batch,
    decode_command,
    decode_error,
    decode_response,
    decode_transmission,
    ed25519_spki,
    encode_batches,
    encode_error,
    pad_block,
    store_error,
    x25519_spki,
)

ED = ed25519_spki(b"\x01" * 32)
X = x25519_spki(b"\x02" * 32)
K_ED = bytes((len(ED),)) + ED
K_X = bytes((len(X),)) + X


def error_of(decode, data: bytes) -> ErrorType:
    with pytest.raises(ProtocolError) as info:
        decode(data)
    return info.value.error


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"PING", PING()),
        (b"SUB", SUB()),
        (b"SEND T hello world", SEND(b"T", b"hello world")),
        (b"SEND F ", SEND(b"F", b"")),
        (b"SEND Tabcdef body", SEND(b"Tabcdef", b"body")),
        (b"SEND T  leading space kept", SEND(b"T", b" leading space kept")),
        (b"ACK \x00", ACK(b"")),
        (b"ACK \x02ab", ACK(b"ab")),
        (b"NEW " + K_ED + K_X + b"1\x03pw!CF", NEW(ED, X, b"pw!", False, False)),
        (b"SKEY " + K_X, SKEY(X)),
        (b"NKEY " + K_ED + K_X, NKEY(ED, X)),
        (b"PRXY \x01\x04host\x00\x01k0", PRXY(("host",), "", b"k")),
        (b"PRXY \x01\x04host\x045223\x01k1\x02pw", PRXY(("host",), "5223", b"k", b"pw")),
        (b"PFWD \x00\x09" + K_X + b"enc", PFWD(9, X, b"enc")),
        (b"RFWD ", RFWD(b"")),
        (b"RFWD \x00 x", RFWD(b"\x00 x")),
    ],
)
def test_commands_decode_to_their_values(data, expected):
    assert decode_command(data) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", CMD_UNKNOWN),
        (b"PONG", CMD_UNKNOWN),
        (b"ping", CMD_UNKNOWN),
        (b"READ", CMD_UNKNOWN),
        (b"PING ", CMD_SYNTAX),
        (b"SUB extra", CMD_SYNTAX),
        (b"SEND", CMD_SYNTAX),
        (b"SEND ", CMD_SYNTAX),
        (b"SEND T", CMD_SYNTAX),
        (b"SEND X body", CMD_SYNTAX),
        (b"SEND  body", CMD_SYNTAX),
        (b"SEND Tabcdefg body", CMD_SYNTAX),  # 8 flag bytes before the SP
        (b"ACK", CMD_SYNTAX),
        (b"ACK ", CMD_SYNTAX),
        (b"ACK \x03ab", CMD_SYNTAX),
        (b"ACK \x01ab", CMD_SYNTAX),  # trailing byte
        (b"KEY " + K_ED + b"x", CMD_SYNTAX),
        (b"KEY \x05hello", CMD_SYNTAX),
        (b"NEW " + K_ED + K_ED + b"0ST", CMD_SYNTAX),  # DH key must be X25519
        (b"NEW " + K_ED + K_X + b"0XT", CMD_SYNTAX),  # bad subMode
        (b"NEW " + K_ED + K_X + b"0SY", CMD_SYNTAX),  # bad sndSecure
        (b"NEW " + K_ED + K_X + b"2ST", CMD_SYNTAX),  # bad Maybe tag
        (b"NEW " + K_ED + K_X + b"1\x03a:bST", CMD_SYNTAX),  # ':' in the password
        (b"NEW " + K_ED + K_X + b"1\x03a bST", CMD_SYNTAX),  # space in the password
        (b"NEW " + K_ED + K_X + b"0ST ", CMD_SYNTAX),  # trailing byte
        (b"NEW " + K_ED + K_X + b"0S", CMD_SYNTAX),  # sndSecure missing
        (b"NKEY " + K_ED, CMD_SYNTAX),
    ],
)
def test_bad_commands_raise_the_error_to_answer(data, expected):
    assert error_of(decode_command, data) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"ERR AUTH", AUTH),
        (b"ERR CMD NO_QUEUE", ErrorType("CMD", CmdErr.NO_ENTITY)),
        (b"ERR STORE disk full", store_error("disk full")),
        (b"ERR PROXY BASIC_AUTH", PROXY_BASIC_AUTH),
        (b"ERR PROXY NO_SESSION", PROXY_NO_SESSION),
        (b"ERR PROXY BROKER RESPONSE \x03a b", ErrorType("PROXY", b"BROKER RESPONSE \x03a b")),
        (b"ERR PROXY BROKER NETWORK", ErrorType("PROXY", b"BROKER NETWORK")),
        (b"ERR PROXY PROTOCOL CMD SYNTAX", ErrorType("PROXY", b"PROTOCOL CMD SYNTAX")),
        (b"ERR BLOCKED reason=content,notice={}", ErrorType("BLOCKED", "reason=content,notice={}")),
    ],
)
def test_error_strings_decode(data, expected):
    assert decode_response(data) == ERR(expected)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"AUTH ",
        b"AUTHX",
        b"CMD",
        b"CMD NOPE",
        b"CMD SYNTAX ",
        b"PROXY",
        b"PROXY BASIC_AUTH x",
        b"PROXY BROKER RESPONSE \x05ab",
        b"PROXY PROTOCOL",
        b"PROXY PROTOCOL NOPE",
        b"PROXY BROKER TRANSPORT HANDSHAKE",
        b"BLOCKED reason=other",
        b"STORE \xff",
        b"HANDSHAKE",
    ],
)
def test_malformed_error_strings_are_syntax_errors(data):
    assert error_of(decode_error, data) == CMD_SYNTAX


def test_deeply_nested_proxy_errors_parse_without_recursion():
    data = b"PROXY " + b"PROTOCOL PROXY " * 2000 + b"NO_SESSION"
    assert decode_error(data) == ErrorType("PROXY", data[6:])
    assert encode_error(decode_error(data)) == data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"OK x", CMD_SYNTAX),
        (b"MSG", CMD_SYNTAX),
        (b"NMSG " + b"\x00" * 23, CMD_SYNTAX),
        (b"SOKS \x00", CMD_SYNTAX),
        (b"ENDS " + b"\x00" * 9, CMD_SYNTAX),
        (b"INFO \xff", CMD_SYNTAX),
        (b"IDS \x00\x00" + K_X + b"T!", CMD_SYNTAX),
        (b"SEND T x", CMD_UNKNOWN),
    ],
)
def test_bad_responses_raise(data, expected):
    assert error_of(decode_response, data) == expected


E = b"\x11" * 24
SIG = b"\x00" * 64


@pytest.mark.parametrize(
    ("cmd", "auth", "entity", "expected"),
    [
        (NEW(ED, X, None, True, True), SIG, b"", None),
        (NEW(ED, X, None, True, True), b"", b"", CMD_NO_AUTH),
        (NEW(ED, X, None, True, True), SIG, E, CMD_HAS_AUTH),
        (NEW(ED, X, None, True, True), b"", E, CMD_NO_AUTH),
        (SEND(b"T", b"x"), b"", E, None),
        (SEND(b"T", b"x"), SIG, E, None),
        (SEND(b"T", b"x"), SIG, b"", CMD_NO_ENTITY),
        (PING(), b"", b"", None),
        (PING(), SIG, b"", CMD_HAS_AUTH),
        (PING(), b"", E, CMD_HAS_AUTH),
        (SUB(), SIG, E, None),
        (SUB(), b"", E, CMD_NO_AUTH),
        (SUB(), SIG, b"", CMD_NO_AUTH),
        (GET(), SIG, E, None),
        (DEL(), b"", b"", CMD_NO_AUTH),
        (SKEY(ED), SIG, E, None),
        (SKEY(ED), b"", E, CMD_NO_AUTH),
        (NSUB(), SIG, E, None),
        (SUBS(), SIG, E, None),
        (NSUBS(), b"", E, CMD_NO_AUTH),
        (PRXY(("h",), "", b"k"), b"", b"", None),
        (PRXY(("h",), "", b"k"), SIG, b"", CMD_HAS_AUTH),
        (PRXY(("h",), "", b"k"), b"", E, CMD_HAS_AUTH),
        (PFWD(9, X, b""), b"", E, None),
        (PFWD(9, X, b""), b"", b"", CMD_NO_ENTITY),
        (PFWD(9, X, b""), SIG, E, CMD_HAS_AUTH),
        (RFWD(b""), b"", b"", None),
        (RFWD(b""), b"", E, CMD_HAS_AUTH),
        (RFWD(b""), SIG, b"", CMD_HAS_AUTH),
    ],
)
def test_credentials_follow_the_table(cmd, auth, entity, expected):
    assert check_credentials(cmd, Transmission(auth, b"c", entity, b"")) == expected


@pytest.mark.parametrize(
    ("length", "expected"),
    [(0, None), (64, None), (80, None), (114, None), (1, BLOCK), (63, BLOCK), (65, BLOCK),
     (113, BLOCK), (255, BLOCK)],
)
def test_authorization_lengths(length, expected):
    assert check_auth_length(b"\x00" * length) == expected


@pytest.mark.parametrize(
    "data",
    [b"", b"\x01", b"\x00\x05abc", b"\x00\x00", b"\x00\x00\x01"],
)
def test_transmissions_whose_short_strings_do_not_fit_are_bad_blocks(data):
    assert error_of(decode_transmission, data) == BLOCK


def test_a_transmission_with_nothing_after_the_entity_has_an_empty_command():
    assert decode_transmission(b"\x00\x00\x00") == Transmission(b"", b"", b"", b"")
    assert error_of(decode_command, b"") == CMD_UNKNOWN


def batch(*parts: bytes, count: int | None = None) -> bytes:
    n = len(parts) if count is None else count
    body = b"".join(len(p).to_bytes(2, "big") + p for p in parts)
    return pad_block(bytes((n,)) + body)


@pytest.mark.parametrize(
    "block",
    [
        b"",
        b"\x00" * (BLOCK_SIZE - 1),
        b"\x00" * (BLOCK_SIZE + 1),
        b"\x3f\xff" + b"#" * (BLOCK_SIZE - 2),  # length beyond the block
        pad_block(b""),  # no count
        batch(count=0),
        batch(b"abc", count=2),  # fewer transmissions than counted
        pad_block(b"\x01\x00\x05abc"),  # transmission longer than content
        pad_block(b"\x01\x00\x01a" + b"x"),  # leftover byte
        pad_block(b"\x01\x00"),  # half a length
    ],
)
def test_bad_blocks_raise_block(block):
    assert error_of(decode_batch, block) == BLOCK


def test_a_batch_of_255_empty_transmissions_decodes():
    assert decode_batch(batch(*([b""] * 255))) == [b""] * 255


def test_receivers_accept_a_batch_that_fills_the_whole_block():
    # Larger than the sender rule allows, but it fits the block, so it is accepted.
    t = b"x" * (BLOCK_SIZE - 2 - 1 - 2)
    assert decode_batch(batch(t)) == [t]


def test_the_largest_transmission_fits_alone_and_a_larger_one_is_refused():
    biggest = b"x" * MAX_TRANSMISSION_SIZE
    assert decode_batch(encode_batches([biggest])[0]) == [biggest]
    with pytest.raises(ProtocolError) as info:
        encode_batches([biggest + b"x"])
    assert info.value.error == LARGE_MSG


def test_the_packer_refuses_the_256th_transmission_and_starts_over_after_take():
    packer = BatchPacker()
    assert all(packer.add(b"t") for _ in range(255))
    assert not packer.add(b"t")
    assert len(packer) == 255
    block = packer.take_block()
    assert len(decode_batch(block)) == 255
    assert len(packer) == 0 and packer.add(b"t")


def test_the_packer_refuses_what_would_pass_the_byte_limit():
    packer = BatchPacker()
    assert packer.add(b"a" * 16000)
    assert not packer.add(b"b" * (16365 - 16002 - 1))
    assert packer.add(b"b" * (16365 - 16002 - 2))
    assert packer.size == 16365


def test_taking_a_block_from_an_empty_packer_is_a_caller_error():
    with pytest.raises(ValueError):
        BatchPacker().take_block()


def test_pad_block_refuses_content_larger_than_a_block():
    with pytest.raises(ProtocolError):
        pad_block(b"x" * (BLOCK_SIZE - 1))
