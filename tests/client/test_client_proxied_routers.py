"""The client's proxied sessions against real routers on 127.0.0.1
(docs/protocol.md#private-message-routing): `SMPClient.open_proxied_session` on router A
for a queue on router B, then `proxied_send` / `proxied_command` through it."""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager

import pytest
import trio
from loopback_router import running_router

from router.client import (
    MessageEvent,
    ProxyError,
    SMPClient,
    SMPError,
    open_client,
    parse_address,
)
from router.protocol import AUTH, LARGE_MSG, OK, PROXY_BASIC_AUTH, SKEY, crypto, versions
from router.server.router import RouterInfo

PROXY = {"allow_proxy": True, "proxy_connect_timeout": 5.0, "proxy_answer_timeout": 5.0,
         "proxy_allow_destinations": ("127.0.0.0/8",)}


def router(**settings: object) -> AbstractAsyncContextManager[RouterInfo]:
    return running_router(store="memory", **{**PROXY, **settings})


async def next_message(client: SMPClient) -> MessageEvent:
    with trio.fail_after(10):
        event = await client.next_event()
    assert isinstance(event, MessageEvent), event
    return event


async def test_a_sender_on_a_secures_and_sends_to_a_queue_on_b_that_b_delivers():
    with trio.fail_after(30):
        async with router() as a, router() as b:
            async with open_client(b.address) as recipient, open_client(a.address) as sender:
                queue = await recipient.create_queue(subscribe=True)
                session = await sender.open_proxied_session(b.address)
                assert session.destination == parse_address(b.address)
                assert versions.SENDING_PROXY <= session.version <= versions.SMP_VERSION_MAX
                # unsigned, as to a queue not yet secured
                await sender.proxied_send(session, queue.sender_id, b"first, through A")
                event = await next_message(recipient)
                assert event.body == b"first, through A"
                await recipient.ack(queue, event.msg_id)
                # the sender secures the queue through A, then signs through A
                seed, key = crypto.new_ed25519()
                secured = await sender.proxied_command(session, queue.sender_id, SKEY(key), seed)
                assert secured == OK()
                await sender.proxied_send(session, queue.sender_id, b"signed", sender_seed=seed)
                event = await next_message(recipient)
                assert event.body == b"signed"
                # unsigned now: the destination's AUTH, not an error of the proxy
                with pytest.raises(SMPError) as info:
                    await sender.proxied_send(session, queue.sender_id, b"unsigned")
                assert info.value.error == AUTH and not isinstance(info.value, ProxyError)
            stats = b.router.statistics()
            # B saw the recipient's connection and A's, never the sender's
            assert stats.connections_total == 2 and stats.proxy_messages_received == 4


async def test_a_router_that_does_not_proxy_is_a_proxy_error():
    with trio.fail_after(30):
        async with router(allow_proxy=False) as a, router() as b:
            async with open_client(a.address) as sender:
                with pytest.raises(ProxyError) as info:
                    await sender.open_proxied_session(b.address)
    assert info.value.error == PROXY_BASIC_AUTH


async def test_the_proxys_password_opens_the_session():
    with trio.fail_after(30):
        async with router(proxy_password=b"relay-pass") as a, router() as b:
            async with open_client(a.address) as sender:
                with pytest.raises(ProxyError):
                    await sender.open_proxied_session(b.address)
                session = await sender.open_proxied_session(b.address, basic_auth=b"relay-pass")
                assert session.basic_auth == b"relay-pass"


async def test_a_destination_the_proxy_cannot_verify_is_a_broker_error():
    with trio.fail_after(30):
        async with router() as a, router() as b, router() as c:
            # B's host and port with C's identity: A's TLS check of B fails
            wrong = parse_address(b.address)
            wrong = type(wrong)(wrong.host, wrong.port, c.key_hash, native=True)
            async with open_client(a.address) as sender:
                with pytest.raises(ProxyError) as info:
                    await sender.open_proxied_session(wrong)
    assert info.value.parts is not None and info.value.parts.kind == "BROKER"


async def test_a_router_proxying_to_itself():
    with trio.fail_after(30):
        async with router() as a:
            async with open_client(a.address) as recipient, open_client(a.address) as sender:
                queue = await recipient.create_queue(subscribe=True)
                session = await sender.open_proxied_session(a.address)
                await sender.proxied_send(session, queue.sender_id, b"to myself", notify=True)
                assert (await next_message(recipient)).body == b"to myself"


async def test_the_longest_message_goes_through_signed_and_a_second_prxy_gets_the_same_session():
    """simplexmq SMPProxyTests "max message size, Ed25519 keys"."""
    with trio.fail_after(30):
        async with router() as a, router() as b:
            async with open_client(b.address) as recipient, open_client(a.address) as sender:
                queue = await recipient.create_queue(subscribe=True)
                session = await sender.open_proxied_session(b.address)
                assert (await sender.open_proxied_session(b.address)).session_id == (
                    session.session_id
                )
                seed, key = crypto.new_ed25519()
                await recipient.secure_queue(queue, key)
                longest = os.urandom(versions.max_message_length(session.version))
                await sender.proxied_send(session, queue.sender_id, longest, sender_seed=seed)
                assert (await next_message(recipient)).body == longest
                with pytest.raises(SMPError) as info:
                    await sender.proxied_send(session, queue.sender_id, longest + b"x",
                                              sender_seed=seed)
                # the destination's refusal, not the proxy's
                assert info.value.error == LARGE_MSG and not isinstance(info.value, ProxyError)
