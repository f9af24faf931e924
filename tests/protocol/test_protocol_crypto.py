"""Signatures, authorization checks and per-queue boxes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nacl.public import Box, PrivateKey, PublicKey

from router.protocol import (
    CMD_SYNTAX,
    CRYPTO,
    LARGE_MSG,
    MAX_MESSAGE_LENGTH,
    MSG_ENC_SIZE,
    MessageBody,
    ProtocolError,
    authorize,
    authorized_bytes,
    box_key,
    decrypt_msg_body,
    decrypt_ntf_meta,
    ed448_spki,
    encrypt_msg_body,
    encrypt_ntf_meta,
    new_ed25519,
    new_x25519,
    raw_key,
    sign,
    verify_authorization,
    x25519_public,
    x25519_spki,
)

SESSION = b"s" * 32
CORR = b"c" * 24
QUEUE = b"q" * 24
MSG_ID = b"m" * 24


def queue_keys() -> tuple[bytes, bytes, bytes]:
    """(router's box key, recipient's box key, recipient private) for one queue."""
    rcv_priv, rcv_pub = new_x25519()
    srv_priv, srv_pub = new_x25519()
    return box_key(srv_priv, rcv_pub), box_key(rcv_priv, srv_pub), rcv_priv


def test_both_ends_compute_the_same_box_key():
    srv_key, rcv_key, _ = queue_keys()
    assert srv_key == rcv_key and len(srv_key) == 32


@pytest.mark.parametrize("size", [0, 1, 100, MAX_MESSAGE_LENGTH])
@pytest.mark.parametrize("flags", [b"T", b"F", b"Tabcdef"])
def test_msg_body_round_trips_at_16122_bytes(size, flags):
    srv_key, rcv_key, _ = queue_keys()
    body = bytes(i % 251 for i in range(size))
    enc = encrypt_msg_body(srv_key, MSG_ID, 1_700_000_000, flags, body)
    assert len(enc) == MSG_ENC_SIZE == 16122
    assert decrypt_msg_body(rcv_key, MSG_ID, enc) == MessageBody(1_700_000_000, flags, body)


def test_quota_marker_round_trips_at_the_same_size():
    srv_key, rcv_key, _ = queue_keys()
    enc = encrypt_msg_body(srv_key, MSG_ID, 42, b"", b"", quota=True)
    assert len(enc) == 16122
    assert decrypt_msg_body(rcv_key, MSG_ID, enc) == MessageBody(42, b"", b"", True)


def test_msg_body_is_exactly_nacl_box_of_the_padded_plaintext():
    rcv_priv, rcv_pub = new_x25519()
    srv_priv, _ = new_x25519()
    enc = encrypt_msg_body(box_key(srv_priv, rcv_pub), MSG_ID, 7, b"T", b"hi")
    plain = (7).to_bytes(8, "big") + b"T hi"
    padded = len(plain).to_bytes(2, "big") + plain + b"#" * (16104 - len(plain))
    box = Box(PrivateKey(srv_priv), PublicKey(raw_key(rcv_pub)))
    assert enc == box.encrypt(padded, MSG_ID).ciphertext


def test_a_body_too_large_to_pad_is_refused():
    srv_key, _, _ = queue_keys()
    with pytest.raises(ProtocolError) as info:
        encrypt_msg_body(srv_key, MSG_ID, 0, b"T", b"x" * 16095)
    assert info.value.error == LARGE_MSG


def test_decrypting_with_the_wrong_nonce_or_key_is_a_crypto_error():
    srv_key, rcv_key, _ = queue_keys()
    enc = encrypt_msg_body(srv_key, MSG_ID, 1, b"T", b"x")
    for key, nonce in [(rcv_key, b"n" * 24), (b"\x00" * 32, MSG_ID)]:
        with pytest.raises(ProtocolError) as info:
            decrypt_msg_body(key, nonce, enc)
        assert info.value.error == CRYPTO


def test_ntf_meta_has_a_24_byte_nonce_and_144_bytes_and_round_trips():
    srv_key, rcv_key, _ = queue_keys()
    nonce, enc = encrypt_ntf_meta(srv_key, MSG_ID, 1_700_000_123)
    assert len(nonce) == 24 and len(enc) == 144
    assert decrypt_ntf_meta(rcv_key, nonce, enc) == (MSG_ID, 1_700_000_123)


def test_ntf_meta_uses_the_given_nonce_and_fresh_random_ones_otherwise():
    srv_key, _, _ = queue_keys()
    assert encrypt_ntf_meta(srv_key, MSG_ID, 1, nonce=b"n" * 24)[0] == b"n" * 24
    assert encrypt_ntf_meta(srv_key, MSG_ID, 1)[0] != encrypt_ntf_meta(srv_key, MSG_ID, 1)[0]


def test_ntf_meta_decoding_ignores_bytes_after_the_timestamp():
    srv_key, rcv_key, _ = queue_keys()
    meta = b"\x03abc" + (9).to_bytes(8, "big") + b"extra"
    padded = len(meta).to_bytes(2, "big") + meta + b"#" * (126 - len(meta))
    from nacl.bindings import crypto_box_easy_afternm

    enc = crypto_box_easy_afternm(padded, b"n" * 24, srv_key)
    assert decrypt_ntf_meta(rcv_key, b"n" * 24, enc) == (b"abc", 9)


def test_box_key_refuses_keys_that_are_not_x25519_or_are_low_order():
    priv, _ = new_x25519()
    _, ed_pub = new_ed25519()
    for peer in [ed_pub, x25519_spki(b"\x00" * 32), b"junk"]:
        with pytest.raises(ProtocolError) as info:
            box_key(priv, peer)
        assert info.value.error == CMD_SYNTAX


def test_x25519_public_matches_the_generated_key():
    priv, pub = new_x25519()
    assert x25519_public(priv) == pub


# --- authorization -----------------------------------------------------------------------

SIGNED = authorized_bytes(SESSION, CORR, QUEUE, b"SUB")


def signed_sub() -> tuple[bytes, bytes]:
    seed, pub = new_ed25519()
    return authorize(seed, SESSION, CORR, QUEUE, b"SUB"), pub


def test_a_good_signature_verifies():
    sig, pub = signed_sub()
    assert len(sig) == 64
    assert verify_authorization(sig, pub, SIGNED)


def test_a_signature_by_another_key_is_rejected():
    sig, _ = signed_sub()
    _, other = new_ed25519()
    assert not verify_authorization(sig, other, SIGNED)


@pytest.mark.parametrize(
    "data",
    [
        authorized_bytes(SESSION, CORR, QUEUE, b"GET"),
        authorized_bytes(b"t" * 32, CORR, QUEUE, b"SUB"),  # another session
        authorized_bytes(SESSION, CORR, b"r" * 24, b"SUB"),
        SIGNED[:-1],
    ],
)
def test_a_signature_over_other_bytes_is_rejected(data):
    sig, pub = signed_sub()
    assert not verify_authorization(sig, pub, data)


def test_a_missing_key_is_rejected():
    sig, _ = signed_sub()
    assert not verify_authorization(sig, None, SIGNED)


@pytest.mark.parametrize("key", [x25519_spki(b"\x05" * 32), ed448_spki(b"\x05" * 57), b"junk"])
def test_a_key_of_another_type_is_rejected(key):
    sig, _ = signed_sub()
    assert not verify_authorization(sig, key, SIGNED)


def test_an_80_byte_authenticator_is_rejected():
    _, pub = new_x25519()
    assert not verify_authorization(b"\x07" * 80, pub, SIGNED)


def test_an_ed448_signature_is_rejected_without_ed448_support():
    assert not verify_authorization(b"\x07" * 114, ed448_spki(b"\x05" * 57), SIGNED)


@pytest.mark.parametrize("length", [0, 1, 63, 65, 200])
def test_authorizations_of_other_lengths_are_rejected(length):
    _, pub = signed_sub()
    assert not verify_authorization(b"\x00" * length, pub, SIGNED)


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_sign_and_verify_agree_on_any_data(data):
    seed, pub = new_ed25519()
    assert verify_authorization(sign(seed, data), pub, data)


def test_verify_tls_identity_checks_the_chain_against_the_key_hash_and_the_signed_key():
    from router.protocol.crypto import verify_tls_identity
    from router.server.edge.identity import generate_identity

    identity, other = generate_identity(), generate_identity()
    signed_key = identity.connection_key().signed_key
    assert verify_tls_identity(identity.chain, signed_key, identity.key_hash)
    assert verify_tls_identity(identity.chain, None, identity.key_hash)
    assert not verify_tls_identity(identity.chain, signed_key, other.key_hash)
    # an online certificate the identity did not issue
    mixed = (other.online_certificate, identity.certificate)
    assert not verify_tls_identity(mixed, None, identity.key_hash)
    # a connection key signed by another router's online key
    assert not verify_tls_identity(
        identity.chain, other.connection_key().signed_key, identity.key_hash
    )
    assert not verify_tls_identity(identity.chain[:1], None, identity.key_hash)


def _pynacl_says(signature: bytes, public32: bytes, data: bytes) -> bool:
    from nacl import bindings
    from nacl.exceptions import CryptoError

    try:
        bindings.crypto_sign_open(bytes(signature) + bytes(data), public32)
    except (CryptoError, ValueError, TypeError):
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=20_000), flip=st.sampled_from(["none", "sig", "data", "key"]),
       position=st.integers(min_value=0))
def test_the_signature_check_agrees_with_pynacls_crypto_sign_open(data, flip, position):
    from nacl import bindings

    from router.protocol import crypto

    assert crypto._VERIFY_DETACHED is not None  # the check this test is about
    public, secret = bindings.crypto_sign_seed_keypair(b"\x02" * 32)
    signature = bindings.crypto_sign(data, secret)[:64]
    if flip == "sig":
        signature = _flipped(signature, position)
    elif flip == "data" and data:
        data = _flipped(data, position)
    elif flip == "key":
        public = _flipped(public, position)
    expected = _pynacl_says(signature, public, data)
    assert crypto._ed25519_ok(signature, public, data) is expected
    assert crypto._ed25519_ok(signature, public, memoryview(data)) is expected  # a view
    assert expected is (flip == "none" or (flip == "data" and not data))


@pytest.mark.parametrize("signature_size, key_size", [(63, 32), (65, 32), (0, 32), (64, 31),
                                                      (64, 33), (64, 0)])
def test_the_signature_check_refuses_other_lengths(signature_size, key_size):
    from router.protocol import crypto

    assert not crypto._ed25519_ok(b"\x01" * signature_size, b"\x02" * key_size, b"data")


def _flipped(value: bytes, position: int) -> bytes:
    i = position % len(value)
    return value[:i] + bytes((value[i] ^ 0x01,)) + value[i + 1:]
