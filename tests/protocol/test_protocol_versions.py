"""Every version's encodings, kept as golden bytes (docs/protocol.md#version-table).

`golden_versions.json` holds, for each version the codec knows, the bytes of the two
hellos, a transmission with and without an authorization, one command of each kind and
one answer of each kind. The test fails if any of them changes: a change of encoding
must be made on purpose, by regenerating the file
(``python tests/protocol/test_protocol_versions.py --write``) and reviewing its diff.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from router.protocol import (
    ACK,
    ALLS,
    AUTH,
    DEL,
    DELD,
    END,
    ENDS,
    ERR,
    GET,
    IDS,
    INFO,
    KEY,
    LDEL,
    LGET,
    LKEY,
    LNK,
    LSET,
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
    PFWD,
    PING,
    PKEY,
    PONG,
    PRES,
    PRXY,
    QUE,
    RFWD,
    RKEY,
    RRES,
    SEND,
    SKEY,
    SOK,
    SOKS,
    SUB,
    SUBS,
    ClientHello,
    ErrorType,
    NewNotifier,
    QueueLink,
    ServerHello,
    Transmission,
    decode_client_hello,
    decode_command,
    decode_response,
    decode_server_hello,
    decode_transmission,
    encode_client_hello,
    encode_command,
    encode_response,
    encode_server_hello,
    encode_transmission,
    versions,
)

GOLDEN = Path(__file__).with_name("golden_versions.json")
PAGE = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

ED = bytes.fromhex("302a300506032b6570032100") + bytes(range(32))
X = bytes.fromhex("302a300506032b656e032100") + bytes(range(32, 64))
X2 = bytes.fromhex("302a300506032b656e032100") + bytes(range(64, 96))
RID, SID, NID_, LID, SVC = b"r" * 24, b"s" * 24, b"n" * 24, b"l" * 24, b"v" * 24
SIG = bytes(range(64))
SESSION = b"\xaa" * 32
KEY_HASH = b"\xbb" * 32
CHAIN = (b"online certificate", b"identity certificate")
SIGNED_KEY = b"signed X25519 key"
BLOCKED_NOTICE = ErrorType("BLOCKED", 'reason=content,notice={"ttl":60}')


def _new(v: int) -> NEW:
    if versions.has_short_links(v):
        link = QueueLink(SID, b"fixed", b"user", LID)
        notifier = NewNotifier(ED, X2) if versions.has_new_notifier(v) else None
        return NEW(ED, X, b"pass", False, False, link, notifier)
    return NEW(ED, X, b"pass", False, True)


def _ids(v: int) -> IDS:
    if not versions.has_short_links(v):
        return IDS(RID, SID, X, True)
    service = SVC if versions.has_service_field(v) else None
    notifier = NID(NID_, X2) if versions.has_new_notifier(v) else None
    return IDS(RID, SID, X, False, LID, service, notifier)


def samples(v: int) -> dict[str, bytes]:
    """The golden values of version `v`, by name."""
    proof = SIG if versions.has_web_identity_proof(v) else None
    out = {
        "server-hello": encode_server_hello(ServerHello(9, v, SESSION, CHAIN, SIGNED_KEY, proof)),
        "client-hello": encode_client_hello(ClientHello(v, KEY_HASH, X)),
        "client-hello-no-key": encode_client_hello(ClientHello(v, KEY_HASH)),
        "transmission-signed": encode_transmission(Transmission(SIG, b"c" * 24, RID, b"SUB"), v),
        "transmission-unsigned": encode_transmission(
            Transmission(b"", b"c" * 24, SID, b"SEND F hi"), v),
    }
    commands = [
        PING(), _new(v), SUB(), KEY(ED), SKEY(ED), SEND(b"T", b"body"), ACK(b"m" * 24), GET(),
        OFF(), DEL(), QUE(), NKEY(ED, X), NDEL(), NSUB(), SUBS(), NSUBS(), RKEY((ED, X)),
        LSET(LID, b"fixed", b"user"), LDEL(), LKEY(ED), LGET(),
        PRXY(("a.example", "b.example"), "5223", KEY_HASH, b"pw"), PFWD(v, X, b"e" * 40),
        RFWD(b"f" * 40),
    ]
    for cmd in commands:
        out["command " + type(cmd).__name__] = encode_command(cmd, v)
    responses = [
        _ids(v), MSG(b"m" * 24, b"e" * 40), NID(NID_, X), NMSG(b"\x01" * 24, b"\x02" * 144), END(),
        DELD(), OK(), PONG(), INFO('{"qiSnd":false}'), ERR(AUTH), ERR(BLOCKED_NOTICE), SOKS(3),
        ENDS(2), ALLS(), LNK(SID, b"fixed", b"user"), SOK(None), SOK(SVC),
        PKEY(SESSION, 8, v, CHAIN, SIGNED_KEY), RRES(b"r" * 40),
        PRES(b"p" * 40),
    ]
    for i, resp in enumerate(responses):
        out[f"answer {i:02} {type(resp).__name__}"] = encode_response(resp, v)
    return out


def all_samples() -> dict[str, dict[str, str]]:
    return {
        str(v): {name: data.hex() for name, data in samples(v).items()}
        for v in range(versions.CODEC_VERSION_MIN, versions.CODEC_VERSION_MAX + 1)
    }


@pytest.mark.parametrize("v", range(versions.CODEC_VERSION_MIN, versions.CODEC_VERSION_MAX + 1))
def test_the_encodings_of_each_version_are_the_golden_ones(v):
    golden = json.loads(GOLDEN.read_text())[str(v)]
    assert {name: data.hex() for name, data in samples(v).items()} == golden


@pytest.mark.parametrize("v", range(versions.CODEC_VERSION_MIN, versions.CODEC_VERSION_MAX + 1))
def test_the_golden_bytes_decode_at_their_version(v):
    s = samples(v)
    hello = decode_server_hello(s["server-hello"])
    assert (hello.cert_chain, hello.signed_key) == (CHAIN, SIGNED_KEY)
    assert hello.web_proof == (SIG if versions.has_web_identity_proof(v) else None)
    assert decode_client_hello(s["client-hello"]) == ClientHello(v, KEY_HASH, X)
    assert decode_client_hello(s["client-hello-no-key"]) == ClientHello(v, KEY_HASH)
    signed = decode_transmission(s["transmission-signed"], v)
    assert (signed.authorization, signed.command, signed.service_sig) == (SIG, b"SUB", None)
    assert decode_command(s["command NEW"], v) == _new(v)
    assert decode_response(s["answer 00 IDS"], v) == _ids(v)


def test_what_the_versions_change_shows_in_the_golden_bytes():
    """Spot checks of the version table against the golden bytes themselves."""
    g = {int(v): {n: bytes.fromhex(h) for n, h in d.items()} for v, d in all_samples().items()}
    # v10: DELD; v9: END
    assert g[9]["answer 05 DELD"] == b"END" and g[10]["answer 05 DELD"] == b"DELD"
    # v12: BLOCKED instead of AUTH; v18: with its notice
    assert g[11]["answer 10 ERR"] == b"ERR AUTH"
    assert g[12]["answer 10 ERR"] == b"ERR BLOCKED reason=content"
    assert g[18]["answer 10 ERR"] == b'ERR BLOCKED reason=content,notice={"ttl":60}'
    # v14: proxyServer; v16: clientService
    assert g[13]["client-hello-no-key"].endswith(KEY_HASH)
    assert g[14]["client-hello-no-key"].endswith(KEY_HASH + b"F")
    assert g[16]["client-hello-no-key"].endswith(KEY_HASH + b"F0")
    # v16: the service field after an authorization, SOK
    assert g[15]["transmission-signed"][65:66] == b"\x18"
    assert g[16]["transmission-signed"][65:67] == b"0\x18"
    assert g[15]["answer 15 SOK"] == b"OK" and g[16]["answer 15 SOK"] == b"SOK 0"
    # v15, v17: the NEW tail
    assert g[14]["command NEW"].endswith(b"CT")
    assert g[15]["command NEW"].endswith(
        b"C1" + b"\x18" + LID + b"\x18" + SID + b"\x00\x05fixed\x00\x04user")
    assert g[17]["command NEW"].endswith(b"user1\x2c" + ED + b"\x2c" + X2)
    # v19: the count and ids hash of SUBS, SOKS, ENDS
    assert g[18]["command SUBS"] == b"SUBS"
    assert g[18]["answer 11 SOKS"] == b"SOKS " + bytes(7) + b"\x03"
    assert g[19]["command SUBS"] == b"SUBS " + b"\xff" * 8 + b"\x10" + bytes(16)
    assert g[19]["answer 11 SOKS"] == b"SOKS " + bytes(7) + b"\x03\x10" + bytes(16)
    # v19: the web proof
    assert g[18]["server-hello"].endswith(SIGNED_KEY)
    assert g[19]["server-hello"].endswith(SIGNED_KEY + b"\x40" + SIG)


def test_the_page_table_and_the_versions_module_list_the_same_versions():
    section = PAGE.read_text(encoding="utf-8").split('<a id="version-table"></a>', 1)[1]
    section = section.split("<a id=", 1)[0]
    rows = {int(v) for v in re.findall(r"^\| (\d+) \|", section, re.M)}
    assert rows == set(versions.VERSION_ADDITIONS)
    assert max(rows) == versions.CODEC_VERSION_MAX
    # Below the oldest version served, only what that version still has: v8's proxying.
    assert {v for v in rows if v < versions.CODEC_VERSION_MIN} == {versions.SENDING_PROXY}


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(all_samples(), indent=1, sort_keys=True) + "\n")
