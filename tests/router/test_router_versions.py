"""The router answers each connection at the version its client chose
(docs/protocol.md#versions, #version-table): block encryption from v11, the service
field and SOK from v16, NEW with notifier credentials from v17, ERR BLOCKED from v12
with its notice from v18, the web identity proof at v19; v9 and v10 clients as before.
"""

from __future__ import annotations

import base64
import os
from contextlib import asynccontextmanager

import pytest
import trio
import trio_websocket
from worker_count import serve_router_under_test

from router.client import MessageEvent, NotificationEvent, NotifierCredentials, open_client
from router.protocol import (
    AUTH,
    BLOCK_SIZE,
    ERR,
    IDS,
    NEW,
    OK,
    SERVICE,
    SOK,
    ClientHello,
    ClientServiceCert,
    NewNotifier,
    Transmission,
    crypto,
    decode_server_hello,
    encode_client_hello,
    encode_transmission,
    pad_block,
    unpad_block,
)
from router.protocol.block_encryption import BlockCipher, dh_secret
from router.protocol.types import ErrorType
from router.server import RouterConfig, RouterInfo


@asynccontextmanager
async def running_router(**options: object):
    async with trio.open_nursery() as nursery:
        info: RouterInfo = await nursery.start(
            serve_router_under_test,
            RouterConfig(host="127.0.0.1", port=0, store="memory", **options),
        )
        yield info
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("version", [9, 10, 11, 15, 16, 17, 18, 19])
async def test_a_client_at_each_version_creates_sends_receives_and_acknowledges(version):
    async with running_router() as info, open_client(info.address, versions=(9, version)) as c:
        assert c.version == version
        queue = await c.create_queue(subscribe=True)
        await c.send(queue.sender_id, b"at v%d" % version)
        with trio.fail_after(10):
            event = await c.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"at v%d" % version
        await c.ack(queue, event.msg_id)
        await c.subscribe(queue)  # OK before v16, SOK from it: the client takes both


async def test_old_and_new_clients_share_a_queue():
    async with running_router() as info:
        async with open_client(info.address, versions=(9, 10)) as old, \
                open_client(info.address) as new:
            assert (old.version, new.version) == (10, 19)
            queue = await old.create_queue(subscribe=True)
            await new.send(queue.sender_id, b"from v19 to v10")
            with trio.fail_after(10):
                event = await old.next_event()
            assert event.body == b"from v19 to v10"


async def raw_ws(info: RouterInfo, path: str = "/"):
    return trio_websocket.open_websocket("127.0.0.1", info.port, path, use_ssl=False)


async def test_blocks_are_encrypted_from_v11_and_plain_for_a_proxy_or_a_client_without_key():
    """The second block the router sends answers a PING: sealed with the chain at v11
    with a client key, plain for a proxyServer client or one that sent no key."""
    async with running_router() as info:
        cases = ((False, True, True), (True, True, False), (False, False, False))
        for proxy, with_key, sealed in cases:
            async with await raw_ws(info) as ws:
                hello = decode_server_hello(unpad_block(await ws.get_message()))
                priv, spki = crypto.new_x25519()
                reply = ClientHello(19, info.key_hash, spki if with_key else None, proxy)
                await ws.send_message(pad_block(encode_client_hello(reply)))
                ping = encode_transmission(Transmission(b"", b"c" * 24, b"", b"PING"), 19)
                content = bytes((1,)) + len(ping).to_bytes(2, "big") + ping
                cipher = None
                if sealed:
                    router_key = crypto.hello_dh_key(hello.signed_key)
                    cipher = BlockCipher.for_client(hello.session_id, dh_secret(priv, router_key))
                await ws.send_message(cipher.seal(content) if cipher else pad_block(content))
                answer = await ws.get_message()
                plain = cipher.open(answer) if cipher else unpad_block(answer)
                assert plain.endswith(b"PONG"), (proxy, with_key)


async def test_a_block_that_does_not_decrypt_ends_the_connection():
    async with running_router() as info, await raw_ws(info) as ws:
        await ws.get_message()
        _, spki = crypto.new_x25519()
        await ws.send_message(pad_block(encode_client_hello(ClientHello(19, info.key_hash, spki))))
        await ws.send_message(os.urandom(BLOCK_SIZE))
        with trio.fail_after(10), pytest.raises(trio_websocket.ConnectionClosed):
            await ws.get_message()


async def test_a_client_service_certificate_without_a_tls_one_is_bad_auth_then_closed():
    """A WebSocket connection has no TLS client certificate to prove the chain against:
    the reference's third block `E HANDSHAKE BAD_AUTH`, then the close
    (docs/protocol.md#client-service)."""
    async with running_router() as info, await raw_ws(info) as ws:
        await ws.get_message()
        _, spki = crypto.new_x25519()
        service = ClientServiceCert(b"M", (b"certificate",), b"signed key")
        hello = ClientHello(16, info.key_hash, spki, client_service=service)
        await ws.send_message(pad_block(encode_client_hello(hello)))
        with trio.fail_after(10):
            assert unpad_block(await ws.get_message()) == b"EHANDSHAKE BAD_AUTH"
        with trio.fail_after(10), pytest.raises(trio_websocket.ConnectionClosed):
            await ws.get_message()


async def test_the_hello_signs_the_url_challenge_with_the_online_key():
    async with running_router() as info:
        challenge = os.urandom(32)
        value = base64.urlsafe_b64encode(challenge).rstrip(b"=").decode()
        for path, proven in ((f"/?challenge={value}", True), ("/", False),
                             ("/?challenge=not-32-bytes", False)):
            async with await raw_ws(info, path) as ws:
                hello = decode_server_hello(unpad_block(await ws.get_message()))
                assert len(hello.cert_chain) == 2 and hello.max_version == 19
                assert (hello.web_proof is not None) == proven
                if proven:
                    assert crypto.verify_web_identity(
                        hello.cert_chain, hello.signed_key, hello.web_proof, challenge,
                        hello.session_id, info.key_hash,
                    )
                    assert not crypto.verify_web_identity(
                        hello.cert_chain, hello.signed_key, hello.web_proof, os.urandom(32),
                        hello.session_id, info.key_hash,
                    )


async def test_each_connection_gets_its_own_router_key():
    async with running_router() as info, await raw_ws(info) as a, await raw_ws(info) as b:
        first = decode_server_hello(unpad_block(await a.get_message()))
        second = decode_server_hello(unpad_block(await b.get_message()))
        assert crypto.hello_dh_key(first.signed_key) != crypto.hello_dh_key(second.signed_key)
        assert first.cert_chain == second.cert_chain


async def test_a_service_signature_field_is_answered_err_service():
    async with running_router() as info, open_client(info.address) as c:
        queue = await c.create_queue()
        seed = queue.rcv_auth_seed
        corr = os.urandom(24)
        auth = crypto.authorize(seed, c.session_id, corr, queue.recipient_id, b"SUB")
        t = Transmission(auth, corr, queue.recipient_id, b"SUB", service_sig=os.urandom(64))
        data = encode_transmission(t, 19)
        await c.send_raw_block(pad_block(bytes((1,)) + len(data).to_bytes(2, "big") + data))
        with trio.fail_after(10):
            assert await c.next_raw_response() == ERR(SERVICE)


async def test_new_with_notifier_credentials_makes_the_notifier_at_once():
    async with running_router(ntf_batch_interval=0.01) as info, open_client(info.address) as c:
        seed, auth_key = crypto.new_ed25519()
        dh_priv, dh_key = crypto.new_x25519()
        ntf_seed, ntf_key = crypto.new_ed25519()
        ntf_priv, ntf_dh = crypto.new_x25519()
        cmd = NEW(auth_key, dh_key, None, False, True, None, NewNotifier(ntf_key, ntf_dh))
        ids = await c.command(b"", cmd, seed)
        assert isinstance(ids, IDS) and ids.notifier is not None and ids.snd_secure is True
        assert ids.link_id is None and ids.service_id is None
        creds = NotifierCredentials(
            ids.rcv_id, ids.notifier.notifier_id, ntf_seed, ntf_key, ntf_priv,
            ids.notifier.srv_ntf_dh_key, crypto.box_key(ntf_priv, ids.notifier.srv_ntf_dh_key),
        )
        await c.subscribe_notifications(creds)
        await c.send(ids.snd_id, b"notify me", notify=True)
        with trio.fail_after(10):
            event = await c.next_event()
        assert isinstance(event, NotificationEvent)


async def test_blocked_is_auth_before_v12_and_blocked_from_it():
    async with running_router() as info:
        answers = {}
        for version in (11, 12, 19):
            async with open_client(info.address, versions=(9, version)) as c:
                queue = await c.create_queue()
                assert await info.router.block_queue(queue.recipient_id, "spam")
                answers[version] = await c.command(queue.recipient_id, b"SUB", queue.rcv_auth_seed)
        assert answers[11] == ERR(AUTH)
        assert answers[12] == answers[19] == ERR(ErrorType("BLOCKED", "reason=spam"))


async def test_sub_is_answered_sok_from_v16():
    async with running_router() as info:
        for version, expected in ((15, OK()), (16, SOK(None))):
            async with open_client(info.address, versions=(9, version)) as c:
                queue = await c.create_queue()
                assert await c.command(queue.recipient_id, b"SUB", queue.rcv_auth_seed) == expected
