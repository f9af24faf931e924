"""What docs/protocol.md promises a second implementer, against the real router.

Each test names the section of the page it pins: message expiration, the bytes
after the client hello's fields, the SOKS count, the order of checks for SUBS,
and how END and ENDS divide a takeover. Services connect by their TLS client
certificate (docs/protocol.md#client-service) over the router's native TLS.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio
import trio_websocket
from e2e_helpers import assert_no_more_events, create_queues, raw_block
from worker_count import serve_router_under_test

from bench.service_client import chain_of_two
from router.client import (
    AllReceivedEvent,
    EndEvent,
    MessageEvent,
    ServiceCertificate,
    ServiceEndEvent,
    open_client,
)
from router.protocol import crypto
from router.protocol.block import BLOCK_SIZE, decode_batch, pad_block, unpad_block
from router.protocol.codec import decode_response, encode_command
from router.protocol.encoding import ss
from router.protocol.handshake import decode_server_hello
from router.protocol.transmission import decode_transmission
from router.protocol.types import (
    ACK,
    CMD_NO_AUTH,
    ERR,
    MSG,
    NSUBS,
    OK,
    SERVICE,
    SUBS,
    Transmission,
)
from router.server import RouterConfig, RouterInfo
from store import Message

DAY = 86400

# --- helpers -------------------------------------------------------------------------


@pytest.fixture
async def one_router(nursery: trio.Nursery) -> RouterInfo:
    """One in-memory router, for what does not depend on the store."""
    config = RouterConfig(host="127.0.0.1", port=0, end_batch_interval=0.02)
    return await nursery.start(serve_router_under_test, config)


HelloBytes = Callable[[bytes], bytes]  # session id -> client hello content


@asynccontextmanager
async def raw_hello(
    info: RouterInfo, hello: HelloBytes
) -> AsyncIterator[tuple[trio_websocket.WebSocketConnection, bytes]]:
    """A bare WebSocket that has sent the client hello `hello(session_id)`."""
    async with trio_websocket.open_websocket_url(info.url, max_message_size=BLOCK_SIZE) as ws:
        session_id = decode_server_hello(unpad_block(await ws.get_message())).session_id
        await ws.send_message(pad_block(hello(session_id)))
        yield ws, session_id


async def assert_closed_without_a_block(ws: trio_websocket.WebSocketConnection) -> None:
    """docs/protocol.md#handshake-failures: no error block, no block at all, then the close."""
    with pytest.raises(trio_websocket.ConnectionClosed):
        await ws.get_message()


def client_key() -> bytes:
    return crypto.new_x25519()[1]


def certificate(role: bytes = b"M") -> ServiceCertificate:
    """A service's TLS client certificate (a chain of two) for `open_client`."""
    cert_file, key_file = chain_of_two().files()
    return ServiceCertificate(cert_file, key_file, role)


def head(info: RouterInfo, version: int = 10) -> bytes:
    return version.to_bytes(2, "big") + ss(info.key_hash)


async def raw_subs(
    ws: trio_websocket.WebSocketConnection, session_id: bytes, seed: bytes, sid: bytes
) -> object:
    """SUBS for service id `sid` signed with `seed` over the raw WebSocket; its answer."""
    corr_id = secrets.token_bytes(24)
    command = encode_command(SUBS())
    signature = crypto.authorize(seed, session_id, corr_id, sid, command)
    await ws.send_message(raw_block(Transmission(signature, corr_id, sid, command)))
    answer = decode_batch(await ws.get_message())[0]  # ALLS may share the block
    t = decode_transmission(answer)
    assert t.corr_id == corr_id
    return decode_response(t.command)


# --- message expiration (docs/protocol.md#expiration) ---------------------------------------


def a_day_later() -> float:
    return time.time() + DAY + 2


async def test_an_expired_message_is_never_delivered_and_nothing_is_sent(router_factory):
    info = await router_factory(message_ttl=DAY)
    with trio.fail_after(10):
        async with open_client(info.address) as client, open_client(info.address) as reader:
            q = await client.create_queue(subscribe=False)
            await client.send(q.sender_id, b"too old")
            info.router.expirer.wall_clock = a_day_later
            assert await info.router.expirer.expire_all() == 1
            await client.subscribe(q)  # OK, and no MSG follows
            await assert_no_more_events(client)
            reader.add_queue(q)
            assert await reader.get(q) is None


async def test_an_expired_message_in_flight_is_acknowledged_with_ok_and_not_sent_again(
    router_factory,
):
    info = await router_factory(message_ttl=DAY)
    with trio.fail_after(10):
        async with open_client(info.address) as client, open_client(info.address) as other:
            q = await client.create_queue(subscribe=True)
            await client.send(q.sender_id, b"delivered, then expired")
            delivered = await client.next_event()
            assert isinstance(delivered, MessageEvent)
            info.router.expirer.wall_clock = a_day_later
            assert await info.router.expirer.expire_all() == 1
            answer = await client.command(q.recipient_id, ACK(delivered.msg_id), q.rcv_auth_seed)
            assert answer == OK()
            await client.subscribe(q)  # SUB again: nothing to send again
            await assert_no_more_events(client)
            other.add_queue(q)
            await other.subscribe(q)
            await assert_no_more_events(other)


async def test_the_ack_of_an_expired_message_answers_the_next_one(router_factory):
    info = await router_factory(message_ttl=DAY)
    with trio.fail_after(10):
        async with open_client(info.address) as client:
            q = await client.create_queue(subscribe=False)
            old = Message(secrets.token_bytes(24), int(time.time()) - DAY - 60, b"F", b"old")
            await info.router.messages.write_message(q.recipient_id, old, 128)
            await client.send(q.sender_id, b"fresh")
            await client.subscribe(q)
            first = await client.next_event()
            assert isinstance(first, MessageEvent) and first.body == b"old"
            assert await info.router.expirer.expire_all() == 1  # only the old one
            answer = await client.command(q.recipient_id, ACK(first.msg_id), q.rcv_auth_seed)
            assert isinstance(answer, MSG) and answer.msg_id != first.msg_id
            body = crypto.decrypt_msg_body(q.box_key, answer.msg_id, answer.enc_body).body
            assert body == b"fresh"


# --- bytes after the client hello's fields (docs/protocol.md#handshake-client-hello) ----------

# What this router once read as its service extension: "SVC1", a service key, a signature.
FORMER_EXTENSION = b"SVC1" + ss(crypto.new_ed25519()[1]) + ss(b"s" * 64)


@pytest.mark.parametrize("version", [9, 10])
@pytest.mark.parametrize("with_key", [True, False])
async def test_bytes_after_the_hellos_fields_are_ignored_and_prove_no_service(
    one_router, version, with_key
):
    seed, _ = crypto.new_ed25519()

    def hello(session_id: bytes) -> bytes:
        key = ss(client_key()) if with_key else b""
        return head(one_router, version) + key + FORMER_EXTENSION + b"any trailing bytes"

    with trio.fail_after(10):
        async with raw_hello(one_router, hello) as (ws, session_id):
            assert await raw_subs(ws, session_id, seed, b"s" * 24) == ERR(SERVICE)


# --- SUBS: order of checks (docs/protocol.md#check-order, #service-errors) -----------------


async def test_subs_without_entity_or_signature_is_no_auth_with_or_without_a_service(one_router):
    seed, _ = crypto.new_ed25519()
    with trio.fail_after(10):
        async with (
            open_client(one_router.address) as plain,
            open_client(one_router.address, service_cert=certificate()) as service,
        ):
            assert service.service_id is not None
            for client in (plain, service):
                for cmd in (SUBS(), NSUBS()):
                    assert await client.command(b"", cmd, None) == ERR(CMD_NO_AUTH)
                    assert await client.command(b"", cmd, seed) == ERR(CMD_NO_AUTH)
                    assert await client.command(service.service_id, cmd, None) == ERR(CMD_NO_AUTH)
            # with both present, a connection that acts for no service gets SERVICE
            assert await plain.command(service.service_id, SUBS(), seed) == ERR(SERVICE)


# --- the count of SOKS (docs/protocol.md#soks-count) -----------------------------------------


async def test_soks_counts_suspended_queues_and_leaves_deleted_ones_out(router_factory):
    info = await router_factory()
    messaging, notifying = certificate(), certificate(b"N")
    with trio.fail_after(20):
        async with open_client(info.address, service_cert=messaging) as service:
            kept, suspended, deleted = await create_queues(service, 3, subscribe=True)
            await service.send(suspended.sender_id, b"waiting in a suspended queue")
            assert isinstance(await service.next_event(), MessageEvent)  # pushed on arrival
            await service.suspend(suspended)
            await service.delete(deleted)
            await service.enable_notifications(kept)
            creds = await service.enable_notifications(suspended)
        async with open_client(info.address, service_cert=notifying) as notifier:
            await notifier.subscribe_notifications(creds)  # associates this notifier only
        async with (
            open_client(info.address, service_cert=messaging) as successor,
            open_client(info.address, service_cert=notifying) as notifier,
        ):
            for q in (kept, suspended):
                successor.add_queue(q)
            assert await successor.subscribe_service() == 2
            # the walk subscribes the suspended queue and delivers what it holds
            moved = await successor.next_event()
            assert isinstance(moved, MessageEvent)
            assert moved.recipient_id == suspended.recipient_id
            assert await successor.next_event() == AllReceivedEvent()
            assert await notifier.subscribe_service_notifications() == 1
            await successor.disable_notifications(suspended)
            assert await notifier.subscribe_service_notifications() == 0


# --- takeover: END and ENDS (docs/protocol.md#end-and-ends) ----------------------------------


async def test_a_takeover_sends_one_ends_for_the_walked_queues_and_an_end_for_a_plain_sub(
    router_factory,
):
    info = await router_factory()
    cert = certificate()
    with trio.fail_after(20):
        async with (
            open_client(info.address, service_cert=cert) as first,
            open_client(info.address, service_cert=cert) as second,
        ):
            walked = await create_queues(first, 2, subscribe=True)
            assert await first.subscribe_service() == 2
            assert await first.next_event() == AllReceivedEvent()
            # subscribed by plain SUB after the walk: an individual subscription
            [plain] = await create_queues(first, 1, subscribe=False)
            await first.subscribe(plain)
            for q in [*walked, plain]:
                second.add_queue(q)
            assert await second.subscribe_service() == 3
            assert await first.next_event() == ServiceEndEvent(first.service_id, 2)
            assert await second.next_event() == AllReceivedEvent()
            assert await first.next_event() == EndEvent(plain.recipient_id)
            info.router.subscriptions.events.flush()  # any END still gathering goes out now
            await assert_no_more_events(first)  # no END for the walked queues
            await first.send(plain.sender_id, b"for the new subscriber")
            event = await second.next_event()
            assert isinstance(event, MessageEvent) and event.recipient_id == plain.recipient_id


async def test_a_notifier_takeover_sends_one_ends_and_an_end_for_a_plain_nsub(one_router):
    cert = certificate(b"N")
    with trio.fail_after(20):
        async with (
            open_client(one_router.address) as recipient,
            open_client(one_router.address, service_cert=cert) as first,
            open_client(one_router.address, service_cert=cert) as second,
        ):
            by_nsubs, by_nsub = await create_queues(recipient, 2)
            creds = await recipient.enable_notifications(by_nsubs)
            await first.subscribe_notifications(creds)  # associates it with the service
            assert await first.subscribe_service_notifications() == 1
            plain_creds = await recipient.enable_notifications(by_nsub)
            await first.subscribe_notifications(plain_creds)  # plain NSUB after NSUBS
            assert await second.subscribe_service_notifications() == 2
            assert await first.next_event() == ServiceEndEvent(first.service_id, 1)
            assert await first.next_event() == EndEvent(plain_creds.notifier_id)
            one_router.router.subscriptions.events.flush()
            await assert_no_more_events(first)
