"""Primitive encodings and key recognition."""

from __future__ import annotations

import pytest

from router.protocol import (
    CMD_SYNTAX,
    HANDSHAKE,
    KeyType,
    Parser,
    ProtocolError,
    bool_,
    ed448_spki,
    ed25519_spki,
    encode_key,
    int64,
    key_type,
    large,
    maybe,
    raw_key,
    ss,
    word16,
    x25519_spki,
)


def test_primitives_read_back_what_was_written():
    data = b"".join((
        word16(513), int64(-2), ss(b"abc"), large(b"x" * 300), bool_(True), bool_(False),
        maybe(None, ss), maybe(b"q", ss), encode_key(ed25519_spki(b"\x01" * 32)), b"tail",
    ))
    p = Parser(data)
    assert p.word16() == 513
    assert p.int64() == -2
    assert p.short_string() == b"abc"
    assert p.large() == b"x" * 300
    assert (p.bool_(), p.bool_()) == (True, False)
    assert p.maybe(p.short_string) is None
    assert p.maybe(p.short_string) == b"q"
    assert p.key() == ed25519_spki(b"\x01" * 32)
    assert p.rest() == b"tail"
    p.end()


@pytest.mark.parametrize(
    ("data", "read"),
    [
        (b"\x00", Parser.word16),
        (b"\x00" * 7, Parser.int64),
        (b"\x03ab", Parser.short_string),
        (b"\x00\x03ab", Parser.large),
        (b"t", Parser.bool_),
        (b"2", lambda p: p.maybe(p.byte)),
        (b"", Parser.byte),
        (b"\x05hello", Parser.key),
        (encode_key(ed25519_spki(b"\x01" * 32)), Parser.dh_key),
    ],
)
def test_failed_reads_raise_the_parsers_error(data, read):
    for error in (CMD_SYNTAX, HANDSHAKE):
        with pytest.raises(ProtocolError) as info:
            read(Parser(data, error=error))
        assert info.value.error == error


def test_end_refuses_trailing_bytes():
    p = Parser(b"\x01x!")
    assert p.short_string() == b"x"
    with pytest.raises(ProtocolError):
        p.end()


def test_encoders_refuse_values_the_wire_cannot_carry():
    with pytest.raises(ValueError):
        ss(b"x" * 256)
    with pytest.raises(ValueError):
        ed25519_spki(b"short")


@pytest.mark.parametrize(
    ("spki", "kind", "raw"),
    [
        (ed25519_spki(b"\x01" * 32), KeyType.ED25519, b"\x01" * 32),
        (x25519_spki(b"\x02" * 32), KeyType.X25519, b"\x02" * 32),
        (ed448_spki(b"\x03" * 57), KeyType.ED448, b"\x03" * 57),
    ],
)
def test_supported_keys_are_recognised_by_their_prefix(spki, kind, raw):
    assert key_type(spki) is kind
    assert raw_key(spki) == raw


@pytest.mark.parametrize(
    "spki",
    [
        b"",
        ed25519_spki(b"\x01" * 32)[:-1],
        ed25519_spki(b"\x01" * 32) + b"\x00",
        bytes.fromhex("3042300506032b656f033900") + b"\x00" * 56,  # X448: not accepted
        b"\x00" * 44,
    ],
)
def test_other_der_is_a_syntax_error(spki):
    with pytest.raises(ProtocolError) as info:
        key_type(spki)
    assert info.value.error == CMD_SYNTAX
