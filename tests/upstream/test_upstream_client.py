"""Upstream's browser SMP client, built unmodified, against the router: the scenarios of
simplexmq's tests/SMPWebTests.hs that need no second router, on every store.

The client connects with a challenge in the URL and checks the router's identity
(docs/protocol.md#web-identity-proof), negotiates version 19, encrypts every block
(#block-encryption) and authorizes every command with X25519 authenticators
(#x25519-authenticator) carrying the service field (#service-signature). The
project's own Python client plays the other side where SMPWebTests.hs uses the
Haskell client.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import trio
from nacl import bindings
from postgres_server import router_store_settings
from upstream_helpers import UpstreamRepl, run_node_script, upstream_repl
from worker_count import serve_router_under_test

from router.client import MessageEvent, open_client
from router.protocol import (
    IDS,
    NEW,
    QueueLink,
    Transmission,
    crypto,
    encode_command,
    encode_transmission,
    pad_block,
    x25519_spki,
)
from router.server import RouterConfig, RouterInfo

# Every store kind unless SMP_E2E_STORES narrows them (the run at two workers does).
STORES = [kind for kind in os.environ.get("SMP_E2E_STORES", "memory,journal,sqlite,postgres")
          .split(",") if kind]


@pytest.fixture(params=STORES)
async def router(request, nursery: trio.Nursery, tmp_path) -> RouterInfo:
    settings = {"host": "127.0.0.1", "port": 0,
                **router_store_settings(request.param, tmp_path / "router")}
    return await nursery.start(serve_router_under_test, RouterConfig(**settings))


def x25519_pair() -> tuple[str, str]:
    """(SPKI hex, private key hex): the queue keys upstream's client authorizes with."""
    private = os.urandom(32)
    return x25519_spki(bindings.crypto_scalarmult_base(private)).hex(), private.hex()


async def connect(repl: UpstreamRepl, info: RouterInfo, key_hash: bytes | None = None) -> str:
    url = f"ws://127.0.0.1:{info.port}"
    return await repl.command(f"CONNECT {url} {(key_hash or info.key_hash).hex()}")


async def new_queue(repl: UpstreamRepl) -> tuple[str, str, str]:
    """NEW in upstream's form (v17: subscribe, messaging queue, no link, no notifier):
    (rcvId, sndId, recipient private key), all hex."""
    public, private = x25519_pair()
    answer = await repl.command(f"NEW {public} {private}")
    assert answer.startswith("ok: "), answer
    rcv_id, snd_id, _ = answer[4:].split()
    return rcv_id, snd_id, private


async def receive(repl: UpstreamRepl) -> tuple[str, str, bytes]:
    """RECV: (entityId, msgId, decrypted body)."""
    answer = await repl.command("RECV 10000")
    assert answer.startswith("ok: "), answer
    entity_id, msg_id, body = answer[4:].split()
    return entity_id, msg_id, bytes.fromhex(body)


async def test_connects_with_the_challenge_verifies_the_identity_and_pings(
    router: RouterInfo, upstream_client
) -> None:
    async with upstream_repl(upstream_client) as repl:
        assert await connect(repl, router) == "ok"
        assert await repl.command("PING") == "ok"


async def test_a_wrong_key_hash_fails_the_identity_check(
    router: RouterInfo, upstream_client
) -> None:
    async with upstream_repl(upstream_client) as repl:
        answer = await connect(repl, router, key_hash=bytes(32))
        assert answer == "error: Server identity verification failed"


async def test_create_secure_subscribe_send_signed_receive_and_ack(
    router: RouterInfo, upstream_client
) -> None:
    """SMPWebTests: "JS client REPL: create queue and send/receive message"."""
    async with upstream_repl(upstream_client) as rcv, upstream_repl(upstream_client) as snd:
        assert await connect(rcv, router) == "ok"
        assert await connect(snd, router) == "ok"
        rcv_id, snd_id, rcv_key = await new_queue(rcv)
        snd_public, snd_private = x25519_pair()
        assert await rcv.command(f"KEY {rcv_id} {rcv_key} {snd_public}") == "ok"
        assert await rcv.command(f"SUB {rcv_id} {rcv_key}") == "ok"
        for text in (b"hello from sender", b"second"):
            assert await snd.command(f"SEND {snd_id} {snd_private} 1 {text.hex()}") == "ok"
            entity, msg_id, body = await receive(rcv)
            assert (entity, body) == (rcv_id, text)
            assert await rcv.command(f"ACK {rcv_id} {rcv_key} {msg_id}") == "ok"
        # Unsigned now that the queue is secured: refused.
        assert await snd.command(f"SEND {snd_id} none 1 {b'x'.hex()}") == "error: PROTOCOL AUTH"


async def test_the_sender_secures_the_queue_with_skey(router: RouterInfo, upstream_client) -> None:
    async with upstream_repl(upstream_client) as rcv, upstream_repl(upstream_client) as snd:
        assert await connect(rcv, router) == "ok"
        assert await connect(snd, router) == "ok"
        rcv_id, snd_id, rcv_key = await new_queue(rcv)
        _, snd_private = x25519_pair()
        assert await snd.command(f"SKEY {snd_id} {snd_private}") == "ok"
        assert await rcv.command(f"SUB {rcv_id} {rcv_key}") == "ok"
        assert await snd.command(f"SEND {snd_id} {snd_private} 0 {b'secured'.hex()}") == "ok"
        assert (await receive(rcv))[2] == b"secured"
        other = x25519_pair()[1]
        assert await snd.command(f"SEND {snd_id} {other} 0 {b'x'.hex()}") == "error: PROTOCOL AUTH"


async def test_python_sender_upstream_receiver(router: RouterInfo, upstream_client) -> None:
    """SMPWebTests: "cross-language: HS sender, JS receiver" (unsigned SEND)."""
    async with upstream_repl(upstream_client) as rcv, open_client(router.address) as py:
        assert py.version == 19
        assert await connect(rcv, router) == "ok"
        rcv_id, snd_id, rcv_key = await new_queue(rcv)
        assert await rcv.command(f"SUB {rcv_id} {rcv_key}") == "ok"
        await py.send(bytes.fromhex(snd_id), b"hello from python")
        entity, _, body = await receive(rcv)
        assert (entity, body) == (rcv_id, b"hello from python")


async def test_upstream_sender_python_receiver(router: RouterInfo, upstream_client) -> None:
    """SMPWebTests: "cross-language: JS sender, HS receiver"."""
    async with upstream_repl(upstream_client) as snd, open_client(router.address) as py:
        queue = await py.create_queue(subscribe=True)
        assert await connect(snd, router) == "ok"
        assert await snd.command(f"SEND {queue.sender_id.hex()} none 1 {b'hello'.hex()}") == "ok"
        with trio.fail_after(10):
            event = await py.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"hello"
        await py.ack(queue, event.msg_id)


async def test_off_then_del(router: RouterInfo, upstream_client) -> None:
    async with upstream_repl(upstream_client) as rcv, upstream_repl(upstream_client) as snd:
        assert await connect(rcv, router) == "ok"
        assert await connect(snd, router) == "ok"
        rcv_id, snd_id, rcv_key = await new_queue(rcv)
        assert await rcv.command(f"OFF {rcv_id} {rcv_key}") == "ok"
        assert await snd.command(f"SEND {snd_id} none 0 {b'x'.hex()}") == "error: PROTOCOL AUTH"
        assert await rcv.command(f"DEL {rcv_id} {rcv_key}") == "ok"
        assert await rcv.command(f"SUB {rcv_id} {rcv_key}") == "error: PROTOCOL AUTH"


async def test_batched_subscriptions(router: RouterInfo, upstream_client) -> None:
    """SMPWebTests: "JS batch subscribe: create 3 queues, batch subscribe, receive messages"."""
    async with upstream_repl(upstream_client) as rcv, open_client(router.address) as py:
        assert await connect(rcv, router) == "ok"
        queues = [await new_queue(rcv) for _ in range(3)]
        batch = " ".join(f"{rcv_id}:{key}" for rcv_id, _, key in queues)
        assert await rcv.command(f"BSUB {batch}") == "ok"
        for i, (_, snd_id, _) in enumerate(queues, 1):
            await py.send(bytes.fromhex(snd_id), b"batch msg %d" % i)
        received = {(await receive(rcv))[2] for _ in queues}
        assert received == {b"batch msg 1", b"batch msg 2", b"batch msg 3"}


# Upstream's client reads a short link with `getQueueLink` (LGET); its REPL has no
# command for it and its NEW carries no link data, so the Python client makes the
# contact queue and a script calls upstream's client library directly.
LGET_SCRIPT = """
const {createSMPClient} = await import('./dist/client.js')
const hex = (b) => Buffer.from(b).toString('hex')
const bytes = (h) => Uint8Array.from(Buffer.from(h, 'hex'))
const I = INPUTS
const c = await createSMPClient(I.url, bytes(I.keyHash), () => {}, () => {}, {timeout: 15000})
const out = {}
const r = await c.getQueueLink(bytes(I.linkId))
out.type = r.type
out.lnk = [hex(r.response.senderId), hex(r.response.encFixedData), hex(r.response.encUserData)]
try {
  await c.getQueueLink(bytes(I.unknownId))
  out.unknown = 'answered'
} catch (e) {
  out.unknown = e.type + ' ' + e.error
}
c.close()
console.log(JSON.stringify(out))
process.exit(0)
"""


async def new_contact_queue_with_link(py, link_id: bytes, fixed: bytes, user: bytes) -> IDS:
    """NEW 'C' with link data from the Python client; the sender id is
    SHA3-384(corrId)[:24], as docs/protocol.md#short-links requires."""
    seed, key = crypto.new_ed25519()
    _, dh = crypto.new_x25519()
    corr_id = os.urandom(24)
    sender_id = hashlib.sha3_384(corr_id).digest()[:24]
    cmd = NEW(key, dh, None, False, False, QueueLink(sender_id, fixed, user, link_id))
    body = encode_command(cmd, py.version)
    auth = crypto.authorize(seed, py.session_id, corr_id, b"", body)
    data = encode_transmission(Transmission(auth, corr_id, b"", body), py.version)
    await py.send_raw_block(pad_block(bytes((1,)) + len(data).to_bytes(2, "big") + data))
    with trio.fail_after(10):
        ids = await py.next_raw_response()
    assert isinstance(ids, IDS) and ids.link_id == link_id and ids.snd_id == sender_id, ids
    return ids


async def test_upstream_client_reads_a_contact_queue_link(
    router: RouterInfo, upstream_client
) -> None:
    """Upstream's getQueueLink (LGET, unsigned, entityId = linkId) gets LNK with the
    sender id and both parts of the link data; an unknown link id is ERR AUTH."""
    link_id = os.urandom(24)
    fixed, user = os.urandom(300), b"user data"
    async with open_client(router.address) as py:
        ids = await new_contact_queue_with_link(py, link_id, fixed, user)
    inputs = {
        "url": f"ws://127.0.0.1:{router.port}", "keyHash": router.key_hash.hex(),
        "linkId": link_id.hex(), "unknownId": os.urandom(24).hex(),
    }
    script = LGET_SCRIPT.replace("INPUTS", json.dumps(inputs))  # a JSON object is JS
    result = json.loads(await run_node_script(upstream_client, script))
    assert result["type"] == "LNK"
    assert result["lnk"] == [ids.snd_id.hex(), fixed.hex(), user.hex()]
    assert result["unknown"] == "PROTOCOL AUTH"
