"""Hellos, version negotiation and the service extension."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.protocol import (
    HANDSHAKE,
    SERVICE_MARKER,
    SMP_VERSION_MAX,
    SMP_VERSION_MIN,
    ClientHello,
    ProtocolError,
    ServerHello,
    ServiceProof,
    decode_client_hello,
    decode_server_hello,
    ed25519_public,
    encode_client_hello,
    encode_server_hello,
    negotiate_version,
    new_ed25519,
    new_x25519,
    prove_service,
    service_id,
    service_signed_bytes,
    verify_service_proof,
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


def service_hello() -> tuple[bytes, ClientHello]:
    seed, _ = new_ed25519()
    _, client_key = new_x25519()
    return seed, ClientHello(10, KEY_HASH, client_key, prove_service(seed, SESSION, KEY_HASH))


def test_service_extension_bytes_follow_the_client_key():
    seed, hello = service_hello()
    assert hello.service is not None and hello.client_key is not None
    content = encode_client_hello(hello)
    spki = ed25519_public(seed)
    assert content == (
        b"\x00\x0a\x20" + KEY_HASH + b"\x2c" + hello.client_key
        + b"SVC1" + b"\x2c" + spki + b"\x40" + hello.service.signature
    )
    assert decode_client_hello(content) == hello


def test_service_proof_verifies_for_its_session_and_router_only():
    _, hello = service_hello()
    proof = hello.service
    assert proof is not None
    assert verify_service_proof(proof, SESSION, KEY_HASH)
    assert not verify_service_proof(proof, b"t" * 32, KEY_HASH)
    assert not verify_service_proof(proof, SESSION, b"i" * 32)
    _, other = new_ed25519()
    assert not verify_service_proof(ServiceProof(other, proof.signature), SESSION, KEY_HASH)


def test_service_signed_bytes_layout():
    spki = ed25519_public(b"\x01" * 32)
    assert service_signed_bytes(SESSION, KEY_HASH, spki) == (
        b"SMP-SERVICE" + b"\x20" + SESSION + b"\x20" + KEY_HASH + b"\x2c" + spki
    )


def test_service_id_is_the_first_24_bytes_of_the_key_hash():
    spki = ed25519_public(b"\x01" * 32)
    assert service_id(spki) == hashlib.sha256(spki).digest()[:24]


@pytest.mark.parametrize(
    "tail",
    [
        SERVICE_MARKER,
        SERVICE_MARKER + b"\x2c",
        SERVICE_MARKER + b"\x05hello\x40" + b"s" * 64,  # not a key
        SERVICE_MARKER + b"\x2c" + bytes(44) + b"\x40" + b"s" * 64,  # not an Ed25519 key
    ],
)
def test_a_malformed_service_extension_is_a_handshake_error(tail):
    _, client_key = new_x25519()
    content = encode_client_hello(ClientHello(10, KEY_HASH, client_key)) + tail
    with pytest.raises(ProtocolError) as info:
        decode_client_hello(content)
    assert info.value.error == HANDSHAKE


@pytest.mark.parametrize("version", [9, 10])
def test_the_service_marker_without_a_client_key_is_a_malformed_hello(version):
    # docs/protocol.md#service-extension: the marker must follow an X25519 client key
    seed, _ = new_ed25519()
    proof = prove_service(seed, SESSION, KEY_HASH)
    extension = SERVICE_MARKER + b"\x2c" + proof.service_key + b"\x40" + proof.signature
    head = version.to_bytes(2, "big") + b"\x20" + KEY_HASH
    ed25519_key = b"\x2c" + proof.service_key  # a short string, but not an X25519 key
    for content in (head + extension, head + SERVICE_MARKER, head + ed25519_key + extension):
        with pytest.raises(ProtocolError) as info:
            decode_client_hello(content)
        assert info.value.error == HANDSHAKE


def test_trailing_bytes_without_a_client_key_are_still_ignored():
    content = b"\x00\x0a\x20" + KEY_HASH + b"\x03abc" + b"SVC"
    assert decode_client_hello(content) == ClientHello(10, KEY_HASH)


def test_encoding_the_extension_without_a_client_key_is_refused():
    seed, _ = new_ed25519()
    with pytest.raises(ValueError):
        encode_client_hello(ClientHello(10, KEY_HASH, None, prove_service(seed, SESSION, KEY_HASH)))


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
    _, hello = service_hello()
    content = encode_client_hello(hello)
    i = data.draw(st.integers(0, len(content) - 1))
    mutated = content[:i] + bytes((data.draw(st.integers(0, 255)),)) + content[i + 1 :]
    for candidate in (mutated, content[:i]):
        try:
            decode_client_hello(candidate)
        except ProtocolError:
            pass
