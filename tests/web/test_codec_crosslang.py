"""The JavaScript codec against router.protocol, both ways, on encodings made at test time.

Python encodes, JavaScript decodes (and must give the same values and, encoding
them again, the same bytes); JavaScript encodes and signs, Python decodes and
verifies. Nothing here is a stored copy of bytes that could drift from either codec.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

from web_helpers import run_node_json

from router.protocol import (
    ACK,
    ALLS,
    AUTH,
    CMD_NO_ENTITY,
    CMD_SYNTAX,
    DEL,
    DELD,
    END,
    ENDS,
    ERR,
    GET,
    IDS,
    INFO,
    KEY,
    MSG,
    NDEL,
    NEW,
    NID,
    NKEY,
    NMSG,
    NSUB,
    NSUBS,
    OFF,
    OK,
    PING,
    PONG,
    PROXY_BASIC_AUTH,
    QUE,
    QUOTA,
    SEND,
    SKEY,
    SOKS,
    SUB,
    SUBS,
    ClientHello,
    ErrorType,
    ServerHello,
    Transmission,
    authorized_bytes,
    crypto,
    decode_batch,
    decode_client_hello,
    decode_command,
    decode_error,
    decode_server_hello,
    decode_transmission,
    encode_batches,
    encode_client_hello,
    encode_command,
    encode_error,
    encode_response,
    encode_server_hello,
    encode_transmission,
    pad_block,
    store_error,
    unpad_block,
)
from router.protocol.handshake import identity_matches
from router.server.edge.identity import generate_identity


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


# Fields of NEW and IDS that versions 9 and 10 do not carry (docs/protocol.md#short-links):
# the JavaScript codec leaves them out of what it decodes at those versions.
LATER_FIELDS = {"link", "notifier", "link_id", "service_id"}
# v19's service figures, which the v10 view has not: SUBS/NSUBS's count (-1 before
# v19) and the ids hash of SUBS, NSUBS, SOKS and ENDS (none before v19).
V19_DEFAULTS = {"ids_hash": bytes(16), "count": -1}


def view(value: object) -> dict:
    """A command or response as the JavaScript codec shows it at v10 (bytes as hex)."""
    out: dict[str, object] = {"type": type(value).__name__}
    for f in fields(value):  # type: ignore[arg-type]
        v = getattr(value, f.name)
        if f.name in LATER_FIELDS and v is None:
            continue
        if f.name in V19_DEFAULTS and v == V19_DEFAULTS[f.name]:
            continue
        if isinstance(v, bytes):
            v = v.hex()
        elif isinstance(v, ErrorType):
            v = str(v)
        out[camel(f.name)] = v
    return out


def keys() -> tuple[bytes, bytes]:
    return crypto.new_ed25519()[1], crypto.new_x25519()[1]


def python_commands() -> list:
    ed, x = keys()
    return [
        NEW(ed, x, None, True, True), NEW(ed, x, b"p4ss", False, False), KEY(ed), SKEY(ed),
        SEND(b"T", "héllo".encode()), SEND(b"Fab", bytes(16064)), ACK(os.urandom(24)),
        NKEY(ed, x), PING(), SUB(), GET(), OFF(), DEL(), QUE(), NDEL(), NSUB(), SUBS(), NSUBS(),
    ]


def python_responses() -> list:
    _, x = keys()
    return [
        IDS(os.urandom(24), os.urandom(24), x, True), MSG(os.urandom(24), os.urandom(16122)),
        NID(os.urandom(24), x), NMSG(os.urandom(24), os.urandom(144)), INFO('{"size": 3}'),
        ERR(AUTH), ERR(QUOTA), ERR(CMD_SYNTAX), ERR(CMD_NO_ENTITY), ERR(PROXY_BASIC_AUTH),
        ERR(store_error("disk full")), SOKS(3), ENDS(-2), END(), DELD(), OK(), PONG(), ALLS(),
    ]


ERRORS = [
    AUTH, QUOTA, CMD_SYNTAX, PROXY_BASIC_AUTH, store_error("journal: é"),
    ErrorType("PROXY", b"PROTOCOL CMD NO_AUTH"), ErrorType("PROXY", b"BROKER RESPONSE \x02ok"),
    ErrorType("BLOCKED", "reason=spam,notice={}"),
]


def fixtures() -> tuple[list[dict], list[object]]:
    """(what the JavaScript side is given, what it must decode each to)."""
    given: list[dict] = []
    expected: list[object] = []
    for cmd in python_commands():
        given.append({"kind": "command", "hex": encode_command(cmd).hex()})
        expected.append(view(cmd))
    for resp in python_responses():
        given.append({"kind": "response", "hex": encode_response(resp).hex()})
        expected.append(view(resp))
    for err in ERRORS:
        given.append({"kind": "error", "hex": encode_error(err).hex()})
        expected.append(str(err))
    return given, expected


def test_javascript_decodes_what_python_encodes(node: str, tmp_path: Path) -> None:
    given, expected = fixtures()
    path = tmp_path / "fixtures.json"
    path.write_text(json.dumps(given))
    results = run_node_json(node, "crosscheck.mjs", "decode", str(path))
    assert len(results) == len(given)
    for fixture, want, got in zip(given, expected, results, strict=True):
        assert got.get("value") == want, (fixture["kind"], got)
        assert got["same"] is True, f"re-encoding {want} gave other bytes"


def test_javascript_reads_python_blocks_hellos_and_boxes(node: str, tmp_path: Path) -> None:
    session_id = os.urandom(32)
    key_hash = os.urandom(32)
    x = crypto.new_x25519()[1]
    transmissions = [
        encode_transmission(
            Transmission(os.urandom(64), os.urandom(24), os.urandom(24), encode_command(c))
        )
        for c in python_commands()
    ] * 20  # enough for several blocks
    blocks = encode_batches(transmissions)
    assert len(blocks) > 1
    box_key = os.urandom(32)
    msg_id = os.urandom(24)
    enc = crypto.encrypt_msg_body(box_key, msg_id, 1767225600, b"T", "über".encode())
    quota = crypto.encrypt_msg_body(box_key, msg_id, 7, b"", b"", quota=True)
    nonce, meta = crypto.encrypt_ntf_meta(box_key, msg_id, 99)
    with_certs = ServerHello(9, 10, session_id, (os.urandom(400), os.urandom(3)), os.urandom(100))
    given = [
        {"kind": "serverHello", "hex": _hello_block(ServerHello(9, 10, session_id))},
        {"kind": "serverHello", "hex": _hello_block(with_certs)},
        {"kind": "clientHello", "hex": _hello_block(ClientHello(10, key_hash, x))},
        *({"kind": "batch", "hex": b.hex()} for b in blocks),
        {"kind": "transmission", "hex": transmissions[0].hex()},
        {"kind": "msgBody", "hex": enc.hex(), "key": box_key.hex(), "msgId": msg_id.hex()},
        {"kind": "msgBody", "hex": quota.hex(), "key": box_key.hex(), "msgId": msg_id.hex()},
        {"kind": "msgBody", "hex": enc.hex(), "key": os.urandom(32).hex(), "msgId": msg_id.hex()},
        {"kind": "ntfMeta", "hex": meta.hex(), "key": box_key.hex(), "nonce": nonce.hex()},
    ]
    path = tmp_path / "fixtures.json"
    path.write_text(json.dumps(given))
    results = run_node_json(node, "crosscheck.mjs", "decode", str(path))
    hello, hello_certs, client_hello, *rest = results
    assert hello["value"]["sessionId"] == session_id.hex() and hello["same"]
    assert len(hello_certs["value"]["certChain"]) == 2 and hello_certs["same"]
    assert client_hello["value"] == {
        "version": 10, "keyHash": key_hash.hex(), "clientKey": x.hex(),
    }
    decoded_blocks, rest = rest[: len(blocks)], rest[len(blocks) :]
    assert [t for b in decoded_blocks for t in b["value"]] == [t.hex() for t in transmissions]
    assert all(b["same"] for b in decoded_blocks), "JavaScript packs the same blocks as Python"
    transmission, body, quota_marker, wrong_key, ntf = rest
    assert transmission["same"]
    assert body["value"] == {
        "ts": 1767225600, "flags": b"T".hex(), "body": "über".encode().hex(), "quota": False,
    }
    assert quota_marker["value"]["quota"] is True and quota_marker["value"]["ts"] == 7
    assert wrong_key == {"error": "CRYPTO"}
    assert ntf["value"] == {"msgId": msg_id.hex(), "ts": 99}


def test_python_decodes_and_verifies_what_javascript_signs(node: str, tmp_path: Path) -> None:
    session_id = os.urandom(32)
    key_hash = os.urandom(32)
    priv, pub = crypto.new_x25519()
    router_priv, router_pub = crypto.new_x25519()
    box_key = crypto.box_key(router_priv, pub)
    request = {
        "sessionId": session_id.hex(), "keyHash": key_hash.hex(), "boxKey": box_key.hex(),
        "errors": [str(e) for e in ERRORS],
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    out = run_node_json(node, "crosscheck.mjs", "encode", str(path))
    signer = bytes.fromhex(out["signerKey"])

    from_blocks = [t for b in out["blocks"] for t in decode_batch(bytes.fromhex(b))]
    assert from_blocks == [bytes.fromhex(c["hex"]) for c in out["commands"]]
    assert [b.hex() for b in encode_batches(from_blocks)] == out["blocks"], "same packing"
    for entry in out["commands"]:
        t = decode_transmission(bytes.fromhex(entry["hex"]))
        cmd = decode_command(t.command)
        assert view(cmd) == entry["cmd"]
        assert encode_command(cmd) == t.command
        if entry["cmd"]["type"] == "PING":
            assert t.authorization == b""
        else:
            signed = authorized_bytes(session_id, t.corr_id, t.entity_id, t.command)
            assert crypto.verify_authorization(t.authorization, signer, signed)
            assert not crypto.verify_authorization(t.authorization, signer, signed + b"x")

    hello = decode_client_hello(unpad_block(bytes.fromhex(out["clientHello"])))
    assert (hello.version, hello.key_hash) == (10, key_hash) and hello.client_key is not None

    # The recipient's box key, computed from the other side, opens what JavaScript boxed.
    body = crypto.decrypt_msg_body(
        crypto.box_key(priv, router_pub), bytes.fromhex(out["msgBody"]["msgId"]),
        bytes.fromhex(out["msgBody"]["hex"]),
    )
    assert (body.ts, body.flags, body.body) == (1767225600, b"T", b"boxed in JavaScript")
    assert [decode_error(bytes.fromhex(h)) for h in out["errors"]] == ERRORS


def _hello_block(hello: ServerHello | ClientHello) -> str:
    if isinstance(hello, ServerHello):
        return pad_block(encode_server_hello(hello)).hex()
    return pad_block(encode_client_hello(hello)).hex()


def test_javascript_checks_the_router_identity_as_python_does(node: str, tmp_path: Path) -> None:
    """The same server hellos, made by router.protocol with a router's real identity
    certificate: JavaScript's verdict on the identity is Python's."""
    identity = generate_identity()
    chain, signed_key = identity.chain, identity.connection_key().signed_key
    session_id = os.urandom(32)
    other = generate_identity().certificate
    hellos = {
        "online then identity": ServerHello(9, 10, session_id, chain, signed_key),
        "one certificate": ServerHello(9, 10, session_id, (identity.certificate,), signed_key),
        "another router": ServerHello(9, 10, session_id, (other,), signed_key),
        "no cert part": ServerHello(9, 10, session_id),
    }
    blocks = {name: pad_block(encode_server_hello(h)) for name, h in hellos.items()}
    # A cert part that does not parse (a length past the end) is absent.
    unparsable = encode_server_hello(hellos["no cert part"]) + b"\x01\xff\xff"
    blocks["unparsable cert part"] = pad_block(unparsable)
    given = [
        {"kind": "identity", "hex": block.hex(), "keyHash": identity.key_hash.hex()}
        for block in blocks.values()
    ]
    path = tmp_path / "fixtures.json"
    path.write_text(json.dumps(given))
    results = run_node_json(node, "crosscheck.mjs", "decode", str(path))
    verdicts = {name: r["value"]["matches"] for name, r in zip(blocks, results, strict=True)}
    python = {
        name: identity_matches(decode_server_hello(unpad_block(block)), identity.key_hash)
        for name, block in blocks.items()
    }
    assert verdicts == python
    assert verdicts == {
        "online then identity": True, "one certificate": True, "another router": False,
        "no cert part": None, "unparsable cert part": None,
    }
