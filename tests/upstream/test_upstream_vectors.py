"""The examples docs/protocol.md marks *upstream*, computed by upstream's own client.

The page's examples are checked against the project's codec (tests/protocol/
test_wire_examples.py); here the same inputs go through upstream's browser client
(built unmodified), so the examples are the reference's bytes and not only ours.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from upstream_helpers import run_node_script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from test_wire_examples import EX, RCV_ID, SESSION_ID  # noqa: E402

SCRIPT = """
import sodium from '@simplex-chat/xftp-web/node_modules/libsodium-wrappers-sumo/dist/modules-sumo/libsodium-wrappers.js'
await sodium.ready
const C = await import('./dist/crypto.js')
const T = await import('./dist/transport.js')
const P = await import('./dist/protocol.js')
const hex = (b) => Buffer.from(b).toString('hex')
const bytes = (h) => Uint8Array.from(Buffer.from(h, 'hex'))
const range = (a, b) => Uint8Array.from({length: b - a + 1}, (_, i) => a + i)
const I = JSON.parse(process.env.INPUTS)
const out = {}
const ck = C.sbcInit(range(1, 32), range(50, 81))
out['chain-keys'] = hex(ck.sndKey) + hex(ck.rcvKey)
const step = C.sbcHkdf(ck.sndKey)
out['chain-step'] = hex(step.keyNonce.sbKey) + hex(step.keyNonce.nonce) + hex(step.nextChainKey)
const ck2 = C.sbcInit(range(10, 41), range(10, 41))
const block = C.sbEncryptBlock(ck2.sndKey, new TextEncoder().encode('hello from typescript'), 16368).encrypted
out['encrypted-block-head'] = hex(block.subarray(0, 48))
const crypto = await import('node:crypto')
out['encrypted-block-sha256'] = crypto.createHash('sha256').update(block).digest('hex')
const {tForAuth, tToSend} = P.encodeTransmissionForAuth(bytes(I.session), bytes(I.corr), bytes(I.rcv), P.encodeSUB())
const auth = P.authTransmission(bytes(I.routerPub), {type: 'x25519', key: bytes(I.clientPriv)}, bytes(I.corr), tForAuth)
out['sub-authenticator'] = hex(auth)
out['sub-content-19'] = hex(P.tEncodeBatch1(auth, tToSend))
out['client-hello-19'] = hex(T.encodeSMPClientHandshake({smpVersion: 19, keyHash: bytes(I.keyHash),
  authPubKey: bytes(I.clientSpki), proxyServer: false, clientService: null}))
out['new-command-19'] = hex(P.encodeNEW(bytes(I.edSpki), bytes(I.clientSpki), null, true))
console.log(JSON.stringify(out))
"""


async def test_the_upstream_examples_are_what_upstreams_client_computes(
    upstream_client, monkeypatch
):
    inputs = {
        "session": SESSION_ID.hex(), "corr": EX["corr-id"].hex(), "rcv": RCV_ID.hex(),
        "routerPub": EX["router-x25519-spki"][12:].hex(),
        "clientPriv": EX["client-x25519-private"].hex(), "keyHash": ("bb" * 32),
        "clientSpki": EX["client-x25519-spki"].hex(), "edSpki": EX["ed25519-spki"].hex(),
    }
    monkeypatch.setenv("INPUTS", json.dumps(inputs))
    computed = json.loads(await run_node_script(upstream_client, SCRIPT))
    assert computed == {name: EX[name].hex() for name in computed}
    assert len(computed) == 8
