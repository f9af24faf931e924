"""Block encryption, X25519 authenticators and the web identity proof, in the codec
(docs/protocol.md#block-encryption, #x25519-authenticator, #web-identity-proof).
The byte-for-byte vectors are the page's examples (test_wire_examples.py); these check
the behaviour around them."""

from __future__ import annotations

import hmac
import os

import pytest
from nacl import bindings

from router.protocol import ProtocolError, crypto, x25519_spki
from router.protocol.block import BLOCK_SIZE, pad_block, unpad_block
from router.protocol.block_encryption import (
    MAX_CONTENT,
    BlockCipher,
    _hsalsa20_python,
    chain_step,
    dh_secret,
    hkdf_sha512,
    hsalsa20,
)
from router.protocol.handshake import web_challenge
from router.protocol.types import LARGE_MSG


def test_hsalsa20_is_what_nacl_beforenm_applies_to_the_shared_secret():
    for _ in range(5):
        a, b = os.urandom(32), os.urandom(32)
        b_public = bindings.crypto_scalarmult_base(b)
        secret = bindings.crypto_scalarmult(a, b_public)
        assert hsalsa20(secret, bytes(16)) == bindings.crypto_box_beforenm(b_public, a)
        assert _hsalsa20_python(secret, bytes(16)) == hsalsa20(secret, bytes(16))


def test_hkdf_sha512_matches_rfc5869_shape():
    # RFC 5869 defines SHA-256 vectors only; check the construction's properties with SHA-512.
    out = hkdf_sha512(b"salt", b"ikm", b"info", 130)
    assert len(out) == 130 and out[:64] == hkdf_sha512(b"salt", b"ikm", b"info", 64)
    assert hkdf_sha512(b"", b"ikm", b"info", 32) == hkdf_sha512(bytes(64), b"ikm", b"info", 32)


def _hkdf_of_the_standard_library(salt: bytes, ikm: bytes, info: bytes, length: int) -> bytes:
    prk = hmac.digest(salt, ikm, "sha512")
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(prk, block + info + bytes((counter,)), "sha512")
        out, counter = out + block, counter + 1
    return out[:length]


@pytest.mark.parametrize("salt_size", [0, 20, 64, 128, 129, 300])
@pytest.mark.parametrize("length", [1, 32, 64, 88, 130])
def test_hkdf_sha512_with_its_own_hmac_equals_the_standard_librarys(salt_size, length):
    # Keys longer than SHA-512's block (129, 300) are hashed first (RFC 2104).
    salt, ikm = os.urandom(salt_size), os.urandom(48)
    assert hkdf_sha512(salt, ikm, b"info", length) == _hkdf_of_the_standard_library(
        salt, ikm, b"info", length)


def test_chain_step_is_the_hkdf_of_the_chain_key_written_out():
    for _ in range(20):
        chain = os.urandom(32)
        out = _hkdf_of_the_standard_library(b"", chain, b"SimpleXSbChain", 88)
        assert chain_step(chain) == (out[:32], out[32:64], out[64:88])


def test_both_ends_chains_agree_block_after_block_and_never_repeat():
    session, secret = os.urandom(32), os.urandom(32)
    router = BlockCipher.for_router(session, secret)
    client = BlockCipher.for_client(session, secret)
    sent = []
    for i in range(5):
        block = router.seal(b"r%d" % i)
        assert len(block) == BLOCK_SIZE and block not in sent
        sent.append(block)
        assert client.open(block) == b"r%d" % i
        assert router.open(client.seal(b"c%d" % i)) == b"c%d" % i
    assert client.open(router.seal(b"x" * MAX_CONTENT)) == b"x" * MAX_CONTENT


def test_plain_blocks_are_sealed_and_opened_as_their_content_is():
    session, secret = os.urandom(32), os.urandom(32)
    router, twin = BlockCipher.for_router(session, secret), BlockCipher.for_router(session, secret)
    client = BlockCipher.for_client(session, secret)
    for content in (b"", b"abc", os.urandom(1000), b"y" * MAX_CONTENT):
        # the same box, byte for byte, as sealing the content itself
        sealed = router.seal(content)
        assert twin.seal_plain_block(pad_block(content)) == sealed
        assert client.open(sealed) == content
        opened = router.open_to_plain_block(client.seal(content))
        assert len(opened) == BLOCK_SIZE and unpad_block(opened) == content
    with pytest.raises(ProtocolError) as too_long:
        router.seal_plain_block(pad_block(b"z" * (MAX_CONTENT + 1)))
    assert too_long.value.error == LARGE_MSG
    with pytest.raises(ProtocolError):
        router.seal_plain_block(b"\x00\x01abc")
    tampered = bytearray(client.seal(b"t"))
    tampered[50] ^= 1
    with pytest.raises(ProtocolError):
        router.open_to_plain_block(bytes(tampered))
    with pytest.raises(ProtocolError):
        router.open_to_plain_block(b"\x00" * 100)


def test_a_replayed_tampered_or_foreign_block_does_not_open():
    session, secret = os.urandom(32), os.urandom(32)
    router = BlockCipher.for_router(session, secret)
    client = BlockCipher.for_client(session, secret)
    first = router.seal(b"one")
    assert client.open(first) == b"one"
    with pytest.raises(ProtocolError):
        client.open(first)  # the chain has moved on
    second = bytearray(router.seal(b"two"))
    second[100] ^= 1
    with pytest.raises(ProtocolError):
        BlockCipher.for_client(session, secret).open(bytes(second))
    with pytest.raises(ProtocolError):
        client.open(b"\x00" * 100)


def test_a_low_order_key_gives_no_shared_secret():
    with pytest.raises(ProtocolError):
        dh_secret(os.urandom(32), bytes(32))


def _queue_and_router_keys():
    queue_priv = os.urandom(32)
    router_priv = os.urandom(32)
    queue_spki = x25519_spki(bindings.crypto_scalarmult_base(queue_priv))
    return queue_priv, queue_spki, router_priv, bindings.crypto_scalarmult_base(router_priv)


def test_an_x25519_authenticator_verifies_only_with_its_keys_corrid_and_bytes():
    queue_priv, queue_spki, router_priv, router_pub = _queue_and_router_keys()
    corr, data = os.urandom(24), b"authorized bytes"
    auth = crypto.cb_authenticator(router_pub, queue_priv, corr, data)
    assert len(auth) == crypto.AUTHENTICATOR_SIZE
    ok = crypto.verify_authorization
    assert ok(auth, queue_spki, data, corr_id=corr, router_dh_private=router_priv)
    assert not ok(auth, queue_spki, data + b"!", corr_id=corr, router_dh_private=router_priv)
    assert not ok(auth, queue_spki, data, corr_id=os.urandom(24), router_dh_private=router_priv)
    assert not ok(auth, queue_spki, data, corr_id=corr, router_dh_private=os.urandom(32))
    assert not ok(auth, queue_spki, data, corr_id=corr)  # no router key of the connection
    assert not ok(auth, None, data, corr_id=corr, router_dh_private=router_priv)  # no queue
    ed_key = crypto.new_ed25519()[1]
    assert not ok(auth, ed_key, data, corr_id=corr, router_dh_private=router_priv)


def test_a_short_corrid_is_zero_padded_to_the_nonce():
    assert crypto.cb_nonce(b"\x01") == b"\x01" + bytes(23)
    assert crypto.cb_nonce(bytes(range(30))) == bytes(range(24))


@pytest.mark.parametrize(("path", "expected"), [
    (b"/smp?challenge=" + b"A" * 43, bytes(32)),
    (b"/?x=1&challenge=" + b"A" * 43 + b"&y=2", bytes(32)),
    (b"/", None),
    (b"/?challenge=", None),
    (b"/?challenge=" + b"A" * 42, None),  # 31 bytes
    (b"/?challenge=" + b"*" * 43, None),
    (b"/?challenge=" + b"A" * 43 + b"=", None),
])
def test_the_url_challenge_is_32_bytes_of_unpadded_base64url(path, expected):
    assert web_challenge(path) == expected
