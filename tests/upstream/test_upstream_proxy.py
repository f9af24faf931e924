"""Upstream's browser client, unmodified, sending through the router as a proxy
(docs/protocol.md#private-message-routing): the two scenarios of simplexmq's
tests/SMPWebTests.hs, "cross-language: JS sends via proxy to HS receiver" and "HS sends
via proxy to JS receiver (one server)", with the project's Python client where they use
the Haskell one.

Upstream's client speaks WebSocket to router A and asks it (PRXY) for router B, which A
reaches over SMP over TLS; its PFWD is forwarded as RFWD and the message lands on B.
"""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager

import trio
from loopback_router import running_router
from nacl import bindings
from upstream_helpers import UpstreamRepl, upstream_repl

from router.client import MessageEvent, SMPClient, open_client
from router.protocol import x25519_spki
from router.server.router import RouterInfo

PROXY = {"allow_proxy": True, "proxy_connect_timeout": 10.0, "proxy_answer_timeout": 10.0,
         "proxy_allow_destinations": ("127.0.0.0/8",)}


def router(**settings: object) -> AbstractAsyncContextManager[RouterInfo]:
    return running_router(store="memory", **{**PROXY, **settings})


async def connect(repl: UpstreamRepl, info: RouterInfo) -> None:
    assert await repl.command(f"CONNECT ws://127.0.0.1:{info.port} {info.key_hash.hex()}") == "ok"


async def prxy(repl: UpstreamRepl, destination: RouterInfo) -> tuple[str, int]:
    """PRXY in the REPL's form: (session id hex, version)."""
    answer = await repl.command(
        f"PRXY 127.0.0.1 {destination.port} {destination.key_hash.hex()}"
    )
    assert answer.startswith("ok: "), answer
    session_id, version = answer[4:].split()
    return session_id, int(version)


async def next_message(client: SMPClient) -> MessageEvent:
    with trio.fail_after(10):
        event = await client.next_event()
    assert isinstance(event, MessageEvent), event
    return event


async def test_upstreams_client_on_a_sends_through_a_to_a_python_recipient_on_b(
    upstream_client,
) -> None:
    """SMPWebTests: "cross-language: JS sends via proxy to HS receiver"."""
    with trio.fail_after(120):
        async with router() as a, router() as b:
            async with open_client(b.address) as recipient, upstream_repl(upstream_client) as js:
                queue = await recipient.create_queue(subscribe=True)
                await connect(js, a)
                session_id, version = await prxy(js, b)
                assert len(bytes.fromhex(session_id)) > 0 and version >= 8
                body = b"hello via proxy"
                answer = await js.command(f"PSEND {queue.sender_id.hex()} none 1 {body.hex()}")
                assert answer == "ok"
                event = await next_message(recipient)
                assert event.body == body
                await recipient.ack(queue, event.msg_id)

                # Secured with the upstream client's X25519 key: its authenticator,
                # made with B's key from PKEY, is checked by B.
                private = os.urandom(32)
                await recipient.secure_queue(
                    queue, x25519_spki(bindings.crypto_scalarmult_base(private))
                )
                signed = b"signed via proxy"
                answer = await js.command(
                    f"PSEND {queue.sender_id.hex()} {private.hex()} 0 {signed.hex()}"
                )
                assert answer == "ok"
                assert (await next_message(recipient)).body == signed
                # unsigned now: B's AUTH comes back through A
                answer = await js.command(f"PSEND {queue.sender_id.hex()} none 0 {b'x'.hex()}")
                assert answer == "error: PROTOCOL AUTH"
            b_stats, a_stats = b.router.statistics(), a.router.statistics()
            assert b_stats.proxy_messages_received == 3
            assert a_stats.proxy_sessions_successes == 1


async def test_python_sends_through_the_router_to_itself_to_upstreams_receiver(
    upstream_client,
) -> None:
    """SMPWebTests: "cross-language: HS sends via proxy to JS receiver (one server)"."""
    with trio.fail_after(120):
        async with router() as a:
            async with upstream_repl(upstream_client) as js, open_client(a.address) as sender:
                await connect(js, a)
                private = os.urandom(32)  # the queue's X25519 key: NEW takes SPKI and private hex
                spki = x25519_spki(bindings.crypto_scalarmult_base(private))
                answer = await js.command(f"NEW {spki.hex()} {private.hex()}")
                assert answer.startswith("ok: "), answer
                rcv_id, snd_id, _ = answer[4:].split()
                assert await js.command(f"SUB {rcv_id} {private.hex()}") == "ok"
                session = await sender.open_proxied_session(a.address)
                body = b"hello from python via proxy"
                await sender.proxied_send(session, bytes.fromhex(snd_id), body)
                answer = await js.command("RECV 10000")
                assert answer.startswith("ok: "), answer
                entity_id, _, received = answer[4:].split()
                assert (entity_id, bytes.fromhex(received)) == (rcv_id, body)
            stats = a.router.statistics()
            assert stats.proxy_sessions_requests_own == 1
            assert stats.proxy_messages_successes_own == 1
