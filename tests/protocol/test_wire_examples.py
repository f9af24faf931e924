"""The worked examples and the command table of docs/protocol.md, checked against the codec.

The examples are read from the page itself (code blocks marked ``hex <name>``),
so the page cannot drift from the code: every example must be recomputed here
from the page's own inputs, and every example on the page must be known here.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from nacl.bindings import crypto_box_easy_afternm, crypto_box_open_easy_afternm

from router.protocol import (
    ALLS,
    AUTH,
    DELD,
    END,
    ENDS,
    ERR,
    IDS,
    INFO,
    LNK,
    MSG,
    NEW,
    NID,
    NMSG,
    OK,
    PING,
    PONG,
    SOK,
    SOKS,
    SUB,
    ClientHello,
    ServerHello,
    Transmission,
    authorize,
    authorized_bytes,
    box_key,
    cb_authenticator,
    decode_batch,
    decode_client_hello,
    decode_command,
    decode_response,
    decode_server_hello,
    decode_transmission,
    ed25519_public,
    encode_batches,
    encode_client_hello,
    encode_command,
    encode_response,
    encode_response_transmission,
    encode_server_hello,
    encode_transmission,
    encrypt_msg_body,
    pad_block,
    proxying,
    sign,
    unpad_block,
    verify_authorization,
    web_proof_signed_bytes,
    x25519_public,
)
from router.protocol import types as t
from router.protocol.block_encryption import BlockCipher, chain_init, chain_step

PAGE = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

# The fixed inputs the page states in prose ("Inputs"), besides its key blocks.
SESSION_ID = b"\xaa" * 32
KEY_HASH = b"\xbb" * 32
RCV_ID = b"\x11" * 24
SND_ID = b"\x22" * 24
MSG_ID = b"\x33" * 24
MSG_TS = 1_700_000_000

_BLOCK_RE = re.compile(r"^```hex (\S+)[^\n]*\n(.*?)^```", re.M | re.S)
_TOKEN_RE = re.compile(r'"[^"]*"|\S+')


def parse_hex(text: str) -> bytes:
    """The bytes of one example block (grammar in the page's "Worked examples")."""
    out = bytearray()
    for line in text.splitlines():
        for token in _TOKEN_RE.findall(line.split(";", 1)[0]):
            if token == "|":
                continue
            if token.startswith('"'):
                out += token[1:-1].encode("ascii")
            elif "*" in token:
                byte, count = token.split("*")
                out += bytes.fromhex(byte) * int(count)
            else:
                out += bytes.fromhex(token)
    return bytes(out)


def page_examples() -> dict[str, bytes]:
    examples: dict[str, bytes] = {}
    for name, body in _BLOCK_RE.findall(PAGE.read_text(encoding="utf-8")):
        assert name not in examples, f"example {name} appears twice"
        examples[name] = parse_hex(body)
    return examples


EX = page_examples()


def _ping_like(tag_command: bytes) -> bytes:
    corr_id = EX["corr-id"]
    tr = encode_transmission(Transmission(b"", corr_id, b"", tag_command))
    [block] = encode_batches([tr])
    return block


def _sub_block() -> bytes:
    signature = authorize(EX["ed25519-seed"], SESSION_ID, EX["corr-id"], RCV_ID, b"SUB")
    tr = encode_transmission(Transmission(signature, EX["corr-id"], RCV_ID, encode_command(SUB())))
    [block] = encode_batches([tr])
    return block


def _new_command() -> bytes:
    cmd = NEW(EX["ed25519-spki"], EX["client-x25519-spki"], None, subscribe=True, snd_secure=True)
    return encode_command(cmd)


def _ids() -> bytes:
    return encode_response(IDS(RCV_ID, SND_ID, EX["router-x25519-spki"], snd_secure=True))


CHALLENGE = b"\xcc" * 32
BLOCKED_WITH_NOTICE = t.ErrorType("BLOCKED", 'reason=spam,notice={"ttl":3600}')


def x25519_raw(spki: bytes) -> bytes:
    return spki[12:]


def _sub_content_19() -> bytes:
    authenticator = cb_authenticator(
        x25519_raw(EX["router-x25519-spki"]), EX["client-x25519-private"], EX["corr-id"],
        EX["sub-authorized"],
    )
    tr = encode_transmission(Transmission(authenticator, EX["corr-id"], RCV_ID, b"SUB"), 19)
    return unpad_block(encode_batches([tr])[0])


def _chain_step() -> bytes:
    send, _ = chain_init(bytes(range(1, 33)), bytes(range(50, 82)))
    next_chain, key, nonce = chain_step(send)
    return key + nonce + next_chain


def _encrypted_block() -> bytes:
    secret = bytes(range(10, 42))
    return BlockCipher.for_router(secret, secret).seal(b"hello from typescript")


def _msg_key() -> bytes:
    return box_key(EX["client-x25519-private"], EX["router-x25519-spki"])


# Each example on the page, computed by the codec from the page's inputs.
COMPUTED = {
    "corr-id": lambda: bytes(range(1, 25)),
    "ed25519-spki": lambda: ed25519_public(EX["ed25519-seed"]),
    "client-x25519-spki": lambda: x25519_public(EX["client-x25519-private"]),
    "router-x25519-spki": lambda: x25519_public(EX["router-x25519-private"]),
    "router-hello": lambda: encode_server_hello(ServerHello(9, 19, SESSION_ID)),
    "client-hello": lambda: encode_client_hello(
        ClientHello(10, KEY_HASH, EX["client-x25519-spki"])
    ),
    "ping-block": lambda: _ping_like(encode_command(PING())),
    "pong-block": lambda: encode_batches(
        [encode_response_transmission(EX["corr-id"], b"", PONG())]
    )[0],
    "sub-authorized": lambda: authorized_bytes(SESSION_ID, EX["corr-id"], RCV_ID, b"SUB"),
    "sub-signature": lambda: authorize(
        EX["ed25519-seed"], SESSION_ID, EX["corr-id"], RCV_ID, b"SUB"
    ),
    "sub-block": _sub_block,
    "new-command": _new_command,
    "ids-response": _ids,
    "msg-box-key": _msg_key,
    "msg-plain": lambda: MSG_TS.to_bytes(8, "big") + b"T" + b" " + b"hi",
    "msg-enc-body-head": lambda: encrypt_msg_body(_msg_key(), MSG_ID, MSG_TS, b"T", b"hi")[:32],
    "client-hello-19": lambda: encode_client_hello(
        ClientHello(19, KEY_HASH, EX["client-x25519-spki"])
    ),
    "web-proof-signed-bytes": lambda: web_proof_signed_bytes(CHALLENGE, SESSION_ID),
    "web-proof": lambda: sign(EX["ed25519-seed"], web_proof_signed_bytes(CHALLENGE, SESSION_ID)),
    "sub-authenticator": lambda: cb_authenticator(
        x25519_raw(EX["router-x25519-spki"]), EX["client-x25519-private"], EX["corr-id"],
        EX["sub-authorized"],
    ),
    "sub-content-19": _sub_content_19,
    "new-command-19": lambda: encode_command(
        NEW(EX["ed25519-spki"], EX["client-x25519-spki"], None, True, True), 19
    ),
    "ids-response-19": lambda: encode_response(
        IDS(RCV_ID, SND_ID, EX["router-x25519-spki"], snd_secure=True), 19
    ),
    "sok-19": lambda: encode_response(SOK(None), 19),
    "lnk-response": lambda: encode_response(LNK(SND_ID, b"fix", b"user"), 19),
    "blocked-18": lambda: encode_response(ERR(BLOCKED_WITH_NOTICE), 18),
    "blocked-12": lambda: encode_response(ERR(BLOCKED_WITH_NOTICE), 12),
    "chain-keys": lambda: b"".join(chain_init(bytes(range(1, 33)), bytes(range(50, 82)))),
    "chain-step": _chain_step,
    "encrypted-block-head": lambda: _encrypted_block()[:48],
    "encrypted-block-sha256": lambda: hashlib.sha256(_encrypted_block()).digest(),
    "soks-3": lambda: encode_response(SOKS(3)),
    "ends-2": lambda: encode_response(ENDS(2)),
    "alls": lambda: encode_response(ALLS()),
    "prxy-command": lambda: encode_command(t.PRXY(("relay.example.com",), "", bytes(range(1, 33)))),
    "proxied-padded-head": lambda: _proxied_padded()[: len(EX["proxied-padded-head"])],
    "proxied-enc-head": lambda: _proxied_request().enc_transmission[:32],
    "proxied-enc-sha256": lambda: hashlib.sha256(_proxied_request().enc_transmission).digest(),
}


def _proxied_transmission() -> bytes:
    send = encode_command(t.SEND(b"F", b"hi"))
    return encode_transmission(Transmission(b"", EX["corr-id"], SND_ID, send))


def _proxied_request() -> proxying.ProxiedRequest:
    return proxying.encrypt_transmission(
        EX["router-x25519-spki"], EX["corr-id"], _proxied_transmission(),
        EX["client-x25519-private"],
    )


def _proxied_padded() -> bytes:
    """Layer 1's plaintext, opened with the box key of the MSG example."""
    return crypto_box_open_easy_afternm(
        _proxied_request().enc_transmission, EX["corr-id"], EX["msg-box-key"]
    )


# Private keys on the page: inputs, checked through the public keys derived from them.
INPUTS = {"ed25519-seed", "client-x25519-private", "router-x25519-private"}


def test_every_example_on_the_page_is_checked_and_every_checked_one_is_on_the_page():
    assert set(EX) == set(COMPUTED) | INPUTS


@pytest.mark.parametrize("name", sorted(COMPUTED))
def test_example_matches_the_codec_byte_for_byte(name):
    assert EX[name] == COMPUTED[name](), name


# --- what the examples say beyond their bytes -------------------------------------------


def test_the_example_inputs_are_the_published_test_vectors():
    # RFC 8032 7.1 tests 1 and 2, RFC 7748 6.1 (public keys), NaCl's box test (the shared key)
    assert EX["ed25519-spki"].endswith(bytes.fromhex(
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"))
    assert EX["client-x25519-spki"].endswith(bytes.fromhex(
        "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"))
    assert EX["router-x25519-spki"].endswith(bytes.fromhex(
        "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"))


def test_stated_sizes_hold():
    assert len(EX["ping-block"]) == len(EX["sub-block"]) == 16384
    assert len(EX["sub-authorized"]) == 86
    assert len(EX["new-command"]) == 97
    assert len(EX["ids-response"]) == 100
    [sub] = decode_batch(EX["sub-block"])
    assert len(sub) == 118


def test_the_examples_decode_back_to_what_they_show():
    [ping] = decode_batch(EX["ping-block"])
    tr = decode_transmission(ping)
    assert (tr.authorization, tr.corr_id, tr.entity_id) == (b"", EX["corr-id"], b"")
    assert decode_command(tr.command) == PING()
    assert decode_response(decode_transmission(decode_batch(EX["pong-block"])[0]).command) == PONG()
    assert decode_server_hello(EX["router-hello"]) == ServerHello(9, 19, SESSION_ID)
    hello = decode_client_hello(EX["client-hello"])
    assert hello == ClientHello(10, KEY_HASH, EX["client-x25519-spki"])
    assert verify_authorization(
        EX["sub-signature"], EX["ed25519-spki"], EX["sub-authorized"]
    )
    assert pad_block(EX["router-hello"])[:2] == b"\x00\x25"


def test_the_private_routing_example_pads_to_the_stated_size_and_answers_reversed():
    padded = _proxied_padded()
    assert len(padded) == 16226 and len(_proxied_request().enc_transmission) == 16242
    assert set(padded[len(EX["proxied-padded-head"]):]) == {ord("#")}
    assert _proxied_request().client_key == EX["client-x25519-spki"]
    content = b"\x01\x00\x02OK"  # a batch of one 2-byte transmission, for the check
    answer_plain = len(content).to_bytes(2, "big") + content + b"#" * (16226 - 2 - len(content))
    answer = crypto_box_easy_afternm(answer_plain, EX["corr-id"][::-1], EX["msg-box-key"])
    assert proxying.decrypt_response(_proxied_request(), answer) == b"OK"


# --- the command table -------------------------------------------------------------------

_TABLE_ROW_RE = re.compile(
    r"^\| `([A-Z]+)` \| (client|router) \| `([0-9a-f ]+)` \| ([^|]+) \|", re.M
)

# One value of each command and response, to compare with the table's bytes.
SAMPLES = {
    "PING": PING(), "SUB": SUB(), "NEW": None,
    "KEY": t.KEY(EX["ed25519-spki"]), "SKEY": t.SKEY(EX["ed25519-spki"]),
    "SEND": t.SEND(b"T", b"hi"), "ACK": t.ACK(MSG_ID), "GET": t.GET(), "OFF": t.OFF(),
    "DEL": t.DEL(), "QUE": t.QUE(), "NKEY": t.NKEY(EX["ed25519-spki"], EX["client-x25519-spki"]),
    "NDEL": t.NDEL(), "NSUB": t.NSUB(), "SUBS": t.SUBS(), "NSUBS": t.NSUBS(),
    "PRXY": t.PRXY(("h",), "", b"k"), "PFWD": t.PFWD(9, EX["client-x25519-spki"], b"x"),
    "RFWD": t.RFWD(b"x"), "PKEY": t.PKEY(b"s", 8, 19, (b"c",), b"k"), "PRES": t.PRES(b"x"),
    "RRES": t.RRES(b"x"),
    "RKEY": t.RKEY((EX["ed25519-spki"],)), "LSET": t.LSET(RCV_ID, b"f", b"u"), "LDEL": t.LDEL(),
    "LKEY": t.LKEY(EX["ed25519-spki"]), "LGET": t.LGET(),
    "LNK": LNK(SND_ID, b"f", b"u"), "SOK": SOK(None),
    "IDS": None, "MSG": MSG(MSG_ID, b"\x00" * 16122), "NID": NID(RCV_ID, EX["router-x25519-spki"]),
    "NMSG": NMSG(b"\x00" * 24, b"\x00" * 144), "END": END(), "DELD": DELD(), "OK": OK(),
    "PONG": PONG(), "INFO": INFO("{}"), "ERR": ERR(AUTH), "SOKS": SOKS(1), "ENDS": ENDS(1),
    "ALLS": ALLS(),
}


def command_table() -> list[tuple[str, str, bytes, str]]:
    section = PAGE.read_text(encoding="utf-8").split('<a id="command-table"></a>', 1)[1]
    section = section.split("<a id=", 1)[0]
    return [
        (name, sender, bytes.fromhex(tag), after.strip())
        for name, sender, tag, after in _TABLE_ROW_RE.findall(section)
    ]


def test_the_command_table_lists_every_command_and_response_once():
    names = [row[0] for row in command_table()]
    assert len(names) == len(set(names))
    assert set(names) == set(SAMPLES)


@pytest.mark.parametrize("row", command_table(), ids=lambda row: row[0])
def test_the_command_table_gives_each_tag_and_whether_parameters_follow(row):
    name, sender, tag, after = row
    assert tag == name.encode("ascii")
    value = SAMPLES[name]
    if value is None:
        encoded = _new_command() if name == "NEW" else _ids()
    elif sender == "client":
        encoded = encode_command(value)
    else:
        encoded = encode_response(value, 19)
    if after == "—":
        assert encoded == tag
    else:
        assert after.startswith("`SP")
        assert encoded.startswith(tag + b" ")
