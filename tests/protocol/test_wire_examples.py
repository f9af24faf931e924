"""The worked examples of the SMP wire reference, reproduced byte for byte."""

from router.protocol import (
    BLOCK_SIZE,
    IDS,
    NEW,
    PING,
    PONG,
    SUB,
    ClientHello,
    ServerHello,
    Transmission,
    authorize,
    authorized_bytes,
    decode_batch,
    decode_client_hello,
    decode_command,
    decode_response,
    decode_server_hello,
    decode_transmission,
    ed25519_public,
    ed25519_spki,
    encode_batches,
    encode_client_hello,
    encode_command,
    encode_response,
    encode_response_transmission,
    encode_server_hello,
    encode_transmission,
    pad_block,
    verify_authorization,
    x25519_spki,
)

CORR_ID = bytes(range(1, 25))
SESSION_ID = b"\xaa" * 32
RCV_ID = b"\x11" * 24
# RFC 8032 section 7.1, test 1.
SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
SUB_SIGNATURE = bytes.fromhex(
    "e67958a5b33dcf80df36cb1116a4dd52a8eeccd53f97079f2e4cd98983394983"
    "fa151a46c22265e539d3dbd8302e189a04e85c59d35c328b505e4e7a94e7c404"
)
ED_PREFIX = bytes.fromhex("302a300506032b6570032100")
X_PREFIX = bytes.fromhex("302a300506032b656e032100")
X_PUBLIC = bytes(range(100, 132))


def ping_block_bytes(tag: bytes) -> bytes:
    head = b"\x00\x22" + b"\x01" + b"\x00\x1f" + b"\x00" + b"\x18" + CORR_ID + b"\x00" + tag
    return head + b"#" * 16348


def test_ping_block_is_byte_exact():
    t = encode_transmission(Transmission(b"", CORR_ID, b"", encode_command(PING())))
    assert encode_batches([t]) == [ping_block_bytes(b"PING")]


def test_ping_block_decodes_to_one_ping_transmission():
    [raw] = decode_batch(ping_block_bytes(b"PING"))
    t = decode_transmission(raw)
    assert (t.authorization, t.corr_id, t.entity_id) == (b"", CORR_ID, b"")
    assert decode_command(t.command) == PING()


def test_pong_reply_differs_from_ping_only_in_the_tag():
    t = encode_response_transmission(CORR_ID, b"", PONG())
    [block] = encode_batches([t])
    assert block == ping_block_bytes(b"PONG")
    assert decode_response(decode_transmission(decode_batch(block)[0]).command) == PONG()


def test_signed_sub_signs_the_86_byte_authorized_form():
    signed = authorized_bytes(SESSION_ID, CORR_ID, RCV_ID, b"SUB")
    assert signed == b"\x20" + SESSION_ID + b"\x18" + CORR_ID + b"\x18" + RCV_ID + b"SUB"
    assert len(signed) == 86
    assert ed25519_public(SEED) == ED_PREFIX + PUBLIC


def test_signed_sub_signature_matches_rfc8032_key_1():
    assert authorize(SEED, SESSION_ID, CORR_ID, RCV_ID, b"SUB") == SUB_SIGNATURE
    signed = authorized_bytes(SESSION_ID, CORR_ID, RCV_ID, b"SUB")
    assert verify_authorization(SUB_SIGNATURE, ed25519_spki(PUBLIC), signed)


def test_signed_sub_transmission_is_118_bytes_and_block_prefix_matches():
    t = encode_transmission(
        Transmission(SUB_SIGNATURE, CORR_ID, RCV_ID, encode_command(SUB()))
    )
    assert t == b"\x40" + SUB_SIGNATURE + b"\x18" + CORR_ID + b"\x18" + RCV_ID + b"SUB"
    assert len(t) == 118
    [block] = encode_batches([t])
    assert block[:8] == bytes.fromhex("0079010076 40e679".replace(" ", ""))
    assert len(block) == BLOCK_SIZE


def test_new_command_is_97_bytes_in_the_documented_layout():
    cmd = NEW(ED_PREFIX + PUBLIC, X_PREFIX + X_PUBLIC, None, subscribe=True, snd_secure=True)
    expected = (
        b"NEW " + b"\x2c" + ED_PREFIX + PUBLIC + b"\x2c" + X_PREFIX + X_PUBLIC + b"0" + b"S" + b"T"
    )
    assert encode_command(cmd) == expected
    assert len(expected) == 97
    assert decode_command(expected) == cmd


def test_ids_response_is_100_bytes_in_the_documented_layout():
    snd_id = b"\x22" * 24
    resp = IDS(RCV_ID, snd_id, x25519_spki(X_PUBLIC), snd_secure=True)
    expected = b"IDS " + b"\x18" + RCV_ID + b"\x18" + snd_id + b"\x2c" + X_PREFIX + X_PUBLIC + b"T"
    assert encode_response(resp) == expected
    assert len(expected) == 100
    assert decode_response(expected) == resp


def test_server_hello_without_cert_part():
    hello = ServerHello(9, 9, SESSION_ID)
    content = encode_server_hello(hello)
    assert content == b"\x00\x09\x00\x09\x20" + SESSION_ID
    block = pad_block(content)
    assert block[:2] == b"\x00\x25" and len(block) == BLOCK_SIZE
    assert decode_server_hello(content) == hello


def test_client_hello_with_and_without_client_key():
    key_hash = bytes(range(200, 232))
    bare = ClientHello(9, key_hash)
    assert encode_client_hello(bare) == b"\x00\x09\x20" + key_hash
    with_key = ClientHello(9, key_hash, x25519_spki(X_PUBLIC))
    expected = b"\x00\x09\x20" + key_hash + b"\x2c" + X_PREFIX + X_PUBLIC
    assert encode_client_hello(with_key) == expected
    assert decode_client_hello(expected) == with_key
    assert decode_client_hello(b"\x00\x09\x20" + key_hash) == bare
