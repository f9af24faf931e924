"""Hellos and version negotiation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.protocol import (
    HANDSHAKE,
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    ClientHello,
    ClientServiceCert,
    ProtocolError,
    ServerHello,
    decode_client_hello,
    decode_server_hello,
    encode_client_hello,
    encode_server_hello,
    negotiate_version,
    new_x25519,
)

SESSION = b"s" * 32
KEY_HASH = b"h" * 32


def test_the_router_offers_versions_9_to_19():
    assert (SMP_VERSION_MIN, SMP_VERSION_MAX) == (9, 19)


@pytest.mark.parametrize(
    ("server", "client", "expected"),
    [
        ((9, 10), (9, 10), 10),
        ((9, 10), (1, 9), 9),
        ((9, 10), (10, 20), 10),
        ((9, 10), (6, 8), None),
        ((9, 10), (11, 16), None),
        ((9, 9), (9, 10), 9),
    ],
)
def test_negotiation_picks_the_highest_common_version(server, client, expected):
    assert negotiate_version(*server, *client) == expected


def test_server_hello_with_cert_part_round_trips():
    hello = ServerHello(9, 10, SESSION, (b"leaf-cert", b"ca-cert"), b"signed-key")
    content = encode_server_hello(hello)
    assert content[37:38] == b"\x02"
    assert decode_server_hello(content) == hello


def test_server_hello_ignores_trailing_bytes_and_unparsable_cert_parts():
    assert decode_server_hello(encode_server_hello(ServerHello(9, 10, SESSION)) + b"\x05xx") == (
        ServerHello(9, 10, SESSION)
    )


def test_server_hello_before_v7_has_no_cert_part():
    content = b"\x00\x06\x00\x06\x01x" + b"\x01\x00\x01c\x00\x01k"
    assert decode_server_hello(content) == ServerHello(6, 6, b"x")


@pytest.mark.parametrize("data", [b"", b"\x00\x09\x00", b"\x00\x09\x00\x0a\x20short"])
def test_truncated_server_hellos_are_handshake_errors(data):
    with pytest.raises(ProtocolError) as info:
        decode_server_hello(data)
    assert info.value.error == HANDSHAKE


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x09", b"\x00\x09\x20abc"])
def test_truncated_client_hellos_are_handshake_errors(data):
    with pytest.raises(ProtocolError) as info:
        decode_client_hello(data)
    assert info.value.error == HANDSHAKE


def test_client_hello_ignores_trailing_bytes_that_are_not_the_extension():
    _, client_key = new_x25519()
    hello = ClientHello(10, KEY_HASH, client_key)
    assert decode_client_hello(encode_client_hello(hello) + b"\x00\x01rest") == hello
    assert decode_client_hello(b"\x00\x09\x20" + KEY_HASH + b"\x03abc") == ClientHello(9, KEY_HASH)


# What this router once read as its own service extension ("SVC1", a service key and
# its signature after the hello's fields) is now trailing bytes like any other: the
# reference parses the hello with `parseOnly`, which ignores what follows the fields,
# and so does this router (docs/protocol.md#handshake-client-hello).
FORMER_EXTENSION = b"SVC1" + b"\x2c" + bytes(44) + b"\x40" + b"s" * 64


@pytest.mark.parametrize(
    "tail",
    [
        FORMER_EXTENSION,
        b"SVC1",
        b"SVC1\x2c",  # a short string that runs past the content
        b"SVC1\x05hello\x40" + b"s" * 64,
    ],
)
@pytest.mark.parametrize("with_key", [True, False])
def test_bytes_after_the_fields_of_a_v10_hello_are_ignored(tail, with_key):
    client_key = new_x25519()[1] if with_key else None
    hello = ClientHello(10, KEY_HASH, client_key)
    assert decode_client_hello(encode_client_hello(hello) + tail) == hello


def test_bytes_after_the_fields_of_a_v19_hello_are_ignored():
    _, client_key = new_x25519()
    for hello in (ClientHello(19, KEY_HASH, client_key), ClientHello(19, KEY_HASH)):
        content = encode_client_hello(hello)
        assert content.endswith(b"F0")  # proxyServer, clientService: the fields end here
        assert decode_client_hello(content + FORMER_EXTENSION) == hello


def test_a_v19_hello_whose_fields_do_not_parse_is_a_handshake_error():
    head = (19).to_bytes(2, "big") + b"\x20" + KEY_HASH
    for content in (head + FORMER_EXTENSION, head + b"F2", head + b"F1X"):
        with pytest.raises(ProtocolError) as info:
            decode_client_hello(content)
        assert info.value.error == HANDSHAKE


def test_trailing_bytes_without_a_client_key_are_still_ignored():
    content = b"\x00\x0a\x20" + KEY_HASH + b"\x03abc" + b"SVC"
    assert decode_client_hello(content) == ClientHello(10, KEY_HASH)


@settings(deadline=None)
@given(st.integers(0, 0xFFFF), st.binary(max_size=255), st.binary(max_size=300))
def test_hellos_with_arbitrary_fields_decode_or_raise_protocol_error(version, key_hash, tail):
    content = version.to_bytes(2, "big") + bytes((len(key_hash),)) + key_hash + tail
    for decode in (decode_client_hello, decode_server_hello):
        try:
            decode(content)
        except ProtocolError:
            pass


@settings(deadline=None)
@given(st.data())
def test_mutated_service_hellos_decode_or_raise_protocol_error(data):
    _, client_key = new_x25519()
    service = ClientServiceCert(b"M", (b"c" * 300, b"i" * 200), b"k" * 90)
    hello = ClientHello(19, KEY_HASH, client_key, client_service=service)
    content = encode_client_hello(hello)
    i = data.draw(st.integers(0, len(content) - 1))
    mutated = content[:i] + bytes((data.draw(st.integers(0, 255)),)) + content[i + 1 :]
    for candidate in (mutated, content[:i]):
        try:
            decode_client_hello(candidate)
        except ProtocolError:
            pass
