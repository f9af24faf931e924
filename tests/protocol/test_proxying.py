"""Private message routing (docs/protocol.md#private-message-routing): the six commands'
bytes, the PROXY errors, and both encryption layers end to end (client -> proxy ->
destination -> proxy -> client) with the pure functions of `router.protocol.proxying`."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_scalarmult_base
from nacl.public import Box, PrivateKey, PublicKey

from router.protocol import (
    AUTH,
    BLOCK,
    CMD_SYNTAX,
    CRYPTO,
    ERR,
    OK,
    PFWD,
    PKEY,
    PRES,
    PROXY_BASIC_AUTH,
    PROXY_NO_SESSION,
    PRXY,
    RFWD,
    RRES,
    SEND,
    ErrorType,
    ProtocolError,
    Transmission,
    authorize,
    decode_command,
    decode_error,
    decode_response,
    decode_transmission,
    encode_command,
    encode_error,
    encode_response,
    encode_transmission,
    new_ed25519,
    new_x25519,
    proxy_broker_error,
    proxy_error_parts,
    proxy_protocol_error,
    proxy_transport_error,
    raw_key,
    transmission_authorized,
    verify_authorization,
    versions,
    x25519_spki,
)
from router.protocol import proxying as px
from router.protocol.errors import TRANSPORT_VERSION

HASH = bytes(range(1, 33))


# --- the commands' bytes -----------------------------------------------------------------


def test_prxy_has_the_reference_bytes():
    # SMPWebTests "encodePRXY": SMPServer ("relay.example.com" :| []) "" (KeyHash [1..32]), no auth
    expected = (
        b"PRXY \x01\x11relay.example.com\x00\x20" + HASH + b"0"
    )
    cmd = PRXY(("relay.example.com",), "", HASH)
    for v in range(versions.CODEC_VERSION_MIN, versions.CODEC_VERSION_MAX + 1):
        assert encode_command(cmd, v) == expected
        assert decode_command(expected, v) == cmd


def test_prxy_carries_the_server_as_the_reference_encodes_it():
    # SMPWebTests "encodeProtocolServer": two hosts, port "5223", KeyHash [1..32]; then auth
    cmd = PRXY(("smp1.example.com", "smp2.example.com"), "5223", HASH, b"secret")
    assert encode_command(cmd) == (
        b"PRXY \x02\x10smp1.example.com\x10smp2.example.com\x045223\x20" + HASH + b"1\x06secret"
    )


@pytest.mark.parametrize(
    "data",
    [
        b"PRXY",  # no parameters
        b"PRXY \x00\x00\x00" + b"0",  # no host
        b"PRXY \x01\x00\x00\x00" + b"0",  # empty host
        b"PRXY \x01\x02a b\x00\x000",  # a space in the host
        b"PRXY \x01\x01a\x02ab\x000",  # a port that is not a number
        b"PRXY \x01\x01a\x00\x00",  # no Maybe
        b"PRXY \x01\x01a\x00\x001\x03a:b",  # a password with ':'
        b"PRXY \x01\x01a\x00\x000x",  # trailing bytes
        b"PFWD",
        b"PFWD \x00",  # no key
        b"PFWD \x00\x09" + bytes((44,)) + b"\x00" * 44,  # not an X25519 key
        b"RFWD",
    ],
)
def test_malformed_proxy_commands_are_cmd_syntax(data):
    with pytest.raises(ProtocolError) as info:
        decode_command(data)
    assert info.value.error == CMD_SYNTAX


def test_pfwd_pkey_and_the_tails_round_trip_at_every_version():
    client_key = x25519_spki(b"\x07" * 32)
    for v in range(versions.CODEC_VERSION_MIN, versions.CODEC_VERSION_MAX + 1):
        pfwd = PFWD(v, client_key, b"e" * px.PROXIED_ENC_SIZE)
        data = encode_command(pfwd, v)
        assert data[:7] == b"PFWD " + v.to_bytes(2, "big")
        assert data[7:8] == b"\x2c" and data[8:52] == client_key
        assert decode_command(data, v) == pfwd
        assert decode_command(b"RFWD abc", v) == RFWD(b"abc")
        pkey = PKEY(b"s" * 32, 8, 19, (b"online", b"identity"), b"signed")
        data = encode_response(pkey, v)
        assert data == (
            b"PKEY \x20" + b"s" * 32 + b"\x00\x08\x00\x13\x02\x00\x06online\x00\x08identity"
            b"\x00\x06signed"
        )
        assert decode_response(data, v) == pkey
        assert decode_response(b"PRES xyz", v) == PRES(b"xyz")
        assert decode_response(b"RRES ", v) == RRES(b"")


@pytest.mark.parametrize(
    "data",
    [b"PKEY", b"PKEY \x00\x00\x08\x00\x13\x00\x00\x00", b"PKEY \x00\x00\x08\x00\x13\x01\x00",
     b"PKEY \x00\x00\x08\x00\x13\x01\x00\x01c\x00\x01kx", b"PRES", b"RRES"],
)
def test_malformed_proxy_answers_are_cmd_syntax(data):
    with pytest.raises(ProtocolError) as info:
        decode_response(data)
    assert info.value.error == CMD_SYNTAX


# --- the PROXY errors ----------------------------------------------------------------------


def test_proxy_errors_have_the_reference_bytes_and_read_back():
    cases = [
        (PROXY_BASIC_AUTH, b"PROXY BASIC_AUTH"),
        (PROXY_NO_SESSION, b"PROXY NO_SESSION"),
        (proxy_protocol_error(AUTH), b"PROXY PROTOCOL AUTH"),
        (proxy_protocol_error(CMD_SYNTAX), b"PROXY PROTOCOL CMD SYNTAX"),
        (proxy_broker_error(b"TIMEOUT"), b"PROXY BROKER TIMEOUT"),
        (proxy_broker_error(b"HOST"), b"PROXY BROKER HOST"),
        (proxy_broker_error(b"NETWORK"), b"PROXY BROKER NETWORK"),
        (proxy_broker_error(b"RESPONSE", "BLOCK"), b"PROXY BROKER RESPONSE \x05BLOCK"),
        (proxy_broker_error(b"UNEXPECTED", "PONG"), b"PROXY BROKER UNEXPECTED \x04PONG"),
        (proxy_transport_error(TRANSPORT_VERSION), b"PROXY BROKER TRANSPORT VERSION"),
        (proxy_broker_error(b"TRANSPORT", "HANDSHAKE IDENTITY"),
         b"PROXY BROKER TRANSPORT HANDSHAKE IDENTITY"),
    ]
    for error, data in cases:
        assert encode_error(error) == data
        assert decode_error(data) == error
        assert decode_response(b"ERR " + data) == ERR(error)
    assert proxy_error_parts(proxy_protocol_error(AUTH)).protocol_error == AUTH
    assert proxy_error_parts(PROXY_NO_SESSION).kind == "NO_SESSION"
    parts = proxy_error_parts(proxy_transport_error(TRANSPORT_VERSION))
    assert (parts.kind, parts.broker) == ("BROKER", b"TRANSPORT VERSION")
    assert proxy_error_parts(AUTH) is None


def test_a_broker_error_outside_the_grammar_is_refused_when_built():
    with pytest.raises(ValueError):
        proxy_broker_error(b"TIMEOUT", "why")
    with pytest.raises(ProtocolError):
        proxy_broker_error(b"TRANSPORT", "NOPE")
    long_text = proxy_broker_error(b"RESPONSE", "x" * 400)
    assert decode_error(encode_error(long_text)) == long_text  # cut to one short string


# --- the two layers --------------------------------------------------------------------------


class Sides:
    """Keys of one proxied exchange: the destination's key of the proxy's connection,
    the proxy's hello key, and the session secret both derive."""

    def __init__(self) -> None:
        self.dest_private, self.dest_spki = new_x25519()
        self.proxy_private, self.proxy_spki = new_x25519()
        self.proxy_secret = px.session_secret(self.proxy_private, self.dest_spki)
        self.dest_secret = px.session_secret(self.dest_private, self.proxy_spki)
        self.session_id = os.urandom(32)


def _send_transmission(session_id: bytes, corr_id: bytes, sender_seed: bytes, v: int) -> bytes:
    command = encode_command(SEND(b"T", b"hello through a proxy"), v)
    snd_id = b"S" * 24
    auth = authorize(sender_seed, session_id, corr_id, snd_id, command)
    return encode_transmission(Transmission(auth, corr_id, snd_id, command), v)


@pytest.mark.parametrize("v", [versions.CODEC_VERSION_MIN, versions.CODEC_VERSION_MAX])
def test_a_send_goes_through_both_layers_and_its_answer_comes_back(v):
    s = Sides()
    sender_seed, sender_key = new_ed25519()
    corr_id = os.urandom(24)
    inner = _send_transmission(s.session_id, corr_id, sender_seed, v)

    # client
    request = px.encrypt_transmission(s.dest_spki, corr_id, inner)
    assert len(request.enc_transmission) == px.PROXIED_ENC_SIZE == 16242
    pfwd = encode_command(PFWD(v, request.client_key, request.enc_transmission), v)
    # proxy
    got = decode_command(pfwd, v)
    rfwd_corr_id = os.urandom(24)
    body = px.wrap_forward(
        s.proxy_secret, rfwd_corr_id, corr_id, got.version, got.client_key, got.enc_transmission
    )
    # destination
    fwd = px.unwrap_forward(s.dest_secret, rfwd_corr_id, body, s.dest_private)
    assert (fwd.corr_id, fwd.version, fwd.client_key) == (corr_id, v, request.client_key)
    t = decode_transmission(fwd.transmission, fwd.version)
    assert decode_command(t.command, v) == SEND(b"T", b"hello through a proxy")
    signed = transmission_authorized(s.session_id, t)
    assert verify_authorization(t.authorization, sender_key, signed)
    ok = encode_response(OK(), v)
    answer = encode_transmission(Transmission(b"", t.corr_id, t.entity_id, ok), v)
    rres = px.encrypt_forwarded_response(fwd, answer, s.dest_secret, rfwd_corr_id)
    # proxy
    back_corr_id, enc_response = px.unwrap_forward_response(s.proxy_secret, rfwd_corr_id, rres)
    assert back_corr_id == corr_id and len(enc_response) == px.PROXIED_ENC_SIZE
    # client
    opened = decode_transmission(px.decrypt_response(request, enc_response), v)
    assert (opened.corr_id, opened.entity_id) == (corr_id, b"S" * 24)
    assert decode_response(opened.command, v) == OK()


def test_an_x25519_authenticator_made_for_the_destination_key_verifies_there():
    s = Sides()
    queue_private, queue_spki = new_x25519()
    corr_id = os.urandom(24)
    command = encode_command(SEND(b"F", b"x"))
    from router.protocol import authorized_bytes, cb_authenticator

    signed = authorized_bytes(s.session_id, corr_id, b"S" * 24, command)
    auth = cb_authenticator(raw_key(s.dest_spki), queue_private, corr_id, signed)
    request = px.encrypt_transmission(
        s.dest_spki, corr_id, encode_transmission(Transmission(auth, corr_id, b"S" * 24, command))
    )
    rfwd_corr_id = os.urandom(24)
    body = px.wrap_forward(s.proxy_secret, rfwd_corr_id, corr_id, 10, request.client_key,
                           request.enc_transmission)
    fwd = px.unwrap_forward(s.dest_secret, rfwd_corr_id, body, s.dest_private)
    t = decode_transmission(fwd.transmission)
    assert verify_authorization(
        t.authorization, queue_spki, transmission_authorized(s.session_id, t),
        corr_id=t.corr_id, router_dh_private=s.dest_private,
    )


def test_layer_one_is_a_plain_crypto_box_with_the_corr_id_as_nonce_and_hash_padding():
    """Opened with PyNaCl's Box (not the module's helpers): the reference's cbEncrypt."""
    dest = PrivateKey.generate()
    client_private = os.urandom(32)
    corr_id = os.urandom(24)
    request = px.encrypt_transmission(bytes(dest.public_key), corr_id, b"T" * 100, client_private)
    assert request.client_key == x25519_spki(crypto_scalarmult_base(client_private))
    box = Box(dest, PublicKey(crypto_scalarmult_base(client_private)))
    plain = box.decrypt(request.enc_transmission, corr_id)
    assert len(plain) == px.PROXIED_PADDED_SIZE
    assert plain[:2] == (103).to_bytes(2, "big")
    assert plain[2:105] == b"\x01\x00\x64" + b"T" * 100
    assert set(plain[105:]) == {ord("#")}
    # the answer: the same secret, the nonce reversed
    answer = box.encrypt(
        (5).to_bytes(2, "big") + b"\x01\x00\x02OK" + b"#" * (px.PROXIED_PADDED_SIZE - 7),
        corr_id[::-1],
    ).ciphertext
    assert px.decrypt_response(request, answer) == b"OK"


def test_layer_two_is_an_unpadded_box_with_the_rfwd_nonce_and_its_reverse():
    s = Sides()
    rfwd_corr_id = os.urandom(24)
    body = px.wrap_forward(s.proxy_secret, rfwd_corr_id, b"c" * 24, 9, s.proxy_spki, b"ENC")
    box = Box(PrivateKey(s.dest_private), PublicKey(raw_key(s.proxy_spki)))
    assert box.decrypt(body, rfwd_corr_id) == (
        b"\x18" + b"c" * 24 + b"\x00\x09" + b"\x2c" + s.proxy_spki + b"ENC"
    )
    rres = box.encrypt(b"\x18" + b"c" * 24 + b"RESPONSE", rfwd_corr_id[::-1]).ciphertext
    opened = px.unwrap_forward_response(s.proxy_secret, rfwd_corr_id, rres)
    assert opened == (b"c" * 24, b"RESPONSE")


def _error(fn, *args) -> ErrorType:
    with pytest.raises(ProtocolError) as info:
        fn(*args)
    return info.value.error


def test_the_destination_answers_errors_as_the_reference_does():
    s = Sides()
    rfwd_corr_id = os.urandom(24)
    request = px.encrypt_transmission(s.dest_spki, b"c" * 24, b"t")
    body = px.wrap_forward(s.proxy_secret, rfwd_corr_id, b"c" * 24, 10, request.client_key,
                           request.enc_transmission)
    # a box that does not open: wrong nonce, wrong secret, cut short
    other = Sides()
    unwrap = px.unwrap_forward
    assert _error(unwrap, s.dest_secret, b"x" * 24, body, s.dest_private) == CRYPTO
    assert _error(unwrap, other.dest_secret, rfwd_corr_id, body, s.dest_private) == CRYPTO
    assert _error(unwrap, s.dest_secret, rfwd_corr_id, body[:10], s.dest_private) == CRYPTO
    # the inner box made for another destination
    assert _error(unwrap, s.dest_secret, rfwd_corr_id, body, other.dest_private) == CRYPTO
    # a forwarded transmission that does not parse
    bad = Box(PrivateKey(s.proxy_private), PublicKey(raw_key(s.dest_spki))).encrypt(
        b"\x18" + b"c" * 24 + b"\x00", rfwd_corr_id
    ).ciphertext
    assert _error(unwrap, s.dest_secret, rfwd_corr_id, bad, s.dest_private) == CMD_SYNTAX
    # two transmissions in the batch
    two = px.encrypt_transmission(s.dest_spki, b"c" * 24, b"t")
    client_private = os.urandom(32)
    shared = px.shared_secret(client_private, s.dest_spki)
    content = b"\x02\x00\x01a\x00\x01b"
    padding = b"#" * (px.PROXIED_PADDED_SIZE - 2 - len(content))
    padded = len(content).to_bytes(2, "big") + content + padding
    from nacl.bindings import crypto_box_easy_afternm

    enc = crypto_box_easy_afternm(padded, b"c" * 24, shared)
    client_key = x25519_spki(crypto_scalarmult_base(client_private))
    body2 = px.wrap_forward(s.proxy_secret, rfwd_corr_id, b"c" * 24, 10, client_key, enc)
    assert _error(unwrap, s.dest_secret, rfwd_corr_id, body2, s.dest_private) == BLOCK
    assert two.secret != shared


def test_the_proxy_reads_a_bad_rres_as_the_reference_does():
    s = Sides()
    rfwd_corr_id = os.urandom(24)
    assert _error(px.unwrap_forward_response, s.proxy_secret, rfwd_corr_id, b"x" * 40) == CRYPTO
    empty = Box(PrivateKey(s.dest_private), PublicKey(raw_key(s.proxy_spki))).encrypt(
        b"", rfwd_corr_id[::-1]
    ).ciphertext
    assert _error(px.unwrap_forward_response, s.proxy_secret, rfwd_corr_id, empty) == (
        proxy_broker_error(b"RESPONSE", "BLOCK")
    )


def test_a_transmission_too_long_for_the_padding_is_refused():
    dest_private, dest_spki = new_x25519()
    px.encrypt_transmission(dest_spki, b"c" * 24, b"x" * px.MAX_PROXIED_TRANSMISSION)
    assert _error(
        px.encrypt_transmission, dest_spki, b"c" * 24, b"x" * (px.MAX_PROXIED_TRANSMISSION + 1)
    ) == BLOCK


def test_a_pfwd_with_its_transmission_fits_in_a_block():
    """The whole PFWD transmission (empty authorization, 24-byte corrId, 32-byte session
    id) fits in one batch under the block limit, as the reference sizes it."""
    from router.protocol import MAX_TRANSMISSION_SIZE

    pfwd = encode_command(PFWD(19, x25519_spki(b"\x01" * 32), b"e" * px.PROXIED_ENC_SIZE), 19)
    t = encode_transmission(Transmission(b"", b"c" * 24, b"s" * 32, pfwd), 19)
    assert len(t) <= MAX_TRANSMISSION_SIZE
    rres = encode_response(RRES(b"r" * (16 + 25 + px.PROXIED_ENC_SIZE)), 19)
    rres_t = encode_transmission(Transmission(b"", b"c" * 24, b"", rres), 19)
    assert len(rres_t) <= MAX_TRANSMISSION_SIZE


# --- checking PKEY ------------------------------------------------------------------------------


def test_verify_relay_key_checks_the_chain_the_key_hash_and_the_signed_key():
    from router.server.edge.identity import generate_identity

    identity, other = generate_identity(), generate_identity()
    key = identity.connection_key()
    expected = raw_key(x25519_spki(crypto_scalarmult_base(key.private)))
    assert px.verify_relay_key(identity.chain, key.signed_key, identity.key_hash) == expected
    assert px.verify_relay_key(identity.chain, key.signed_key, other.key_hash) is None
    # a key signed by another router's online key
    assert px.verify_relay_key(
        identity.chain, other.connection_key().signed_key, identity.key_hash
    ) is None
    # an online certificate the identity did not issue
    mixed = (other.online_certificate, identity.certificate)
    assert px.verify_relay_key(mixed, other.connection_key().signed_key, identity.key_hash) is None
    # too short, too long
    assert px.verify_relay_key((identity.certificate,), key.signed_key, identity.key_hash) is None
    assert px.verify_relay_key(identity.chain * 3, key.signed_key, identity.key_hash) is None
    # garbage
    assert px.verify_relay_key((b"x", identity.certificate), b"y", identity.key_hash) is None


SIDES = Sides()  # fixed keys for the property below: only the data varies


@settings(max_examples=60, deadline=None)
@given(
    transmission=st.binary(max_size=2000),
    answer=st.binary(max_size=2000),
    corr_id=st.binary(min_size=1, max_size=32),
    rfwd_corr_id=st.binary(min_size=1, max_size=32),
    version=st.integers(0, 0xFFFF),
)
def test_any_transmission_and_answer_cross_both_layers_unchanged(
    transmission, answer, corr_id, rfwd_corr_id, version
):
    s = SIDES
    request = px.encrypt_transmission(s.dest_spki, corr_id, transmission)
    body = px.wrap_forward(s.proxy_secret, rfwd_corr_id, corr_id, version, request.client_key,
                           request.enc_transmission)
    fwd = px.unwrap_forward(s.dest_secret, rfwd_corr_id, body, s.dest_private)
    assert (fwd.transmission, fwd.version, fwd.corr_id) == (transmission, version, corr_id)
    rres = px.encrypt_forwarded_response(fwd, answer, s.dest_secret, rfwd_corr_id)
    back_corr_id, enc_response = px.unwrap_forward_response(s.proxy_secret, rfwd_corr_id, rres)
    assert back_corr_id == corr_id
    assert px.decrypt_response(request, enc_response) == answer



def test_a_key_that_is_not_x25519_is_crypto():
    private = os.urandom(32)
    assert _error(px.shared_secret, private, new_ed25519()[1]) == CRYPTO
    assert _error(px.shared_secret, private, b"\x00" * 44) == CRYPTO
    assert _error(px.shared_secret, private, b"\x00" * 32) == CRYPTO  # a low-order point
    _, spki = new_x25519()
    assert px.shared_secret(private, spki) == px.shared_secret(private, raw_key(spki))
