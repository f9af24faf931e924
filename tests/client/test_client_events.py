"""Pushes and deliveries: MSG/END/DELD/NMSG events, piggybacked MSGs, raw responses."""

from __future__ import annotations

import os

import trio
import trio.testing
from smp_fake_peer import PeerConnection, fake_peer, fake_queue, sealed

from router.client import (
    DeletedEvent,
    EndEvent,
    MessageEvent,
    NotificationEvent,
    NotifierCredentials,
    UndecryptedMessageEvent,
    open_client,
)
from router.protocol import crypto
from router.protocol.types import (
    ACK,
    BLOCK,
    DELD,
    END,
    ERR,
    GET,
    NMSG,
    OK,
    PONG,
    SUB,
)


async def test_pushes_with_an_empty_corr_id_become_events():
    q, stranger = fake_queue(), fake_queue()
    first, unknown = sealed(q, b"hello"), sealed(stranger, b"not for you")

    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([
            (b"", q.recipient_id, first),
            (b"", stranger.recipient_id, unknown),
            (b"", q.recipient_id, END()),
            (b"", q.recipient_id, DELD()),
            (t.corr_id, b"", PONG()),
        ])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            c.add_queue(q)
            await c.ping()
            events = [await c.next_event() for _ in range(4)]
    assert events == [
        MessageEvent(q.recipient_id, first.msg_id, 1_700_000_000, b"F", b"hello"),
        UndecryptedMessageEvent(stranger.recipient_id, unknown.msg_id, unknown.enc_body),
        EndEvent(q.recipient_id),
        DeletedEvent(q.recipient_id),
    ]


async def test_a_quota_marker_arrives_as_a_message_event_marked_quota():
    q = fake_queue()
    marker = sealed(q, b"", ts=5, quota=True)

    async def script(conn: PeerConnection) -> None:
        await conn.send([(b"", q.recipient_id, marker)])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            c.add_queue(q)
            event = await c.next_event()
    assert event == MessageEvent(q.recipient_id, marker.msg_id, 5, b"", b"", quota=True)


async def test_an_err_block_with_an_empty_corr_id_is_a_raw_response():
    async def script(conn: PeerConnection) -> None:
        await conn.ws.get_message()
        await conn.send([(b"", b"", ERR(BLOCK))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            await c.send_raw_block(b"\xff" * 16384)
            assert await c.next_raw_response() == ERR(BLOCK)
            assert c.next_event_nowait() is None


async def test_answers_to_unknown_corr_ids_are_raw_responses_with_their_ids():
    async def script(conn: PeerConnection) -> None:
        await conn.send([(b"mine", b"entity", OK())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            raw = await c.next_raw_transmission()
    assert (raw.corr_id, raw.entity_id, raw.response) == (b"mine", b"entity", OK())


async def test_a_message_piggybacked_on_ack_goes_to_the_event_stream():
    q = fake_queue()
    nxt = sealed(q, b"second")

    async def script(conn: PeerConnection) -> None:
        [(t, cmd)] = await conn.receive_commands(1)
        assert isinstance(cmd, ACK) and cmd.msg_id == b"first-id"
        await conn.send([(t.corr_id, t.entity_id, nxt)])
        [(t, cmd)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, t.entity_id, OK())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            c.add_queue(q)
            await c.ack(q, b"first-id")
            event = c.next_event_nowait()
            await c.ack(q, nxt.msg_id)
            assert c.next_event_nowait() is None
    assert isinstance(event, MessageEvent) and event.body == b"second"


async def test_a_message_answering_sub_directly_is_delivered_as_an_event():
    q = fake_queue()
    waiting = sealed(q, b"waiting")

    async def script(conn: PeerConnection) -> None:
        [(t, cmd)] = await conn.receive_commands(1)
        assert isinstance(cmd, SUB)
        await conn.send([(t.corr_id, t.entity_id, waiting)])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            await c.subscribe(q)
            event = await c.next_event()
    assert event.msg_id == waiting.msg_id and event.body == b"waiting"


async def test_get_returns_the_message_or_none_when_the_queue_is_empty():
    q = fake_queue()
    head = sealed(q, b"head")

    async def script(conn: PeerConnection) -> None:
        for answer in (head, OK()):
            [(t, cmd)] = await conn.receive_commands(1)
            assert isinstance(cmd, GET)
            await conn.send([(t.corr_id, t.entity_id, answer)])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            got = await c.get(q)
            assert await c.get(q) is None
            assert c.next_event_nowait() is None
    assert got == MessageEvent(q.recipient_id, head.msg_id, 1_700_000_000, b"F", b"head")


async def test_notifications_are_opened_when_the_notifier_key_is_known():
    ntf_box = os.urandom(32)
    creds = NotifierCredentials(b"r" * 24, b"n" * 24, b"s" * 32, b"k", b"p", b"d", ntf_box)
    nonce, meta = crypto.encrypt_ntf_meta(ntf_box, b"m" * 24, 42)

    async def script(conn: PeerConnection) -> None:
        await conn.send([(b"", creds.notifier_id, NMSG(nonce, meta)),
                         (b"", b"other", NMSG(nonce, meta))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            c.add_notifier(creds)
            opened, sealed_event = await c.next_event(), await c.next_event()
    assert opened == NotificationEvent(creds.notifier_id, nonce, meta, b"m" * 24, 42)
    assert sealed_event == NotificationEvent(b"other", nonce, meta)


async def test_events_can_be_iterated_until_the_client_closes():
    q = fake_queue()
    msgs = [sealed(q, bytes([i])) for i in range(3)]

    async def script(conn: PeerConnection) -> None:
        await conn.send([(b"", q.recipient_id, m) for m in msgs])

    bodies = []
    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            c.add_queue(q)
            async for event in c.events():
                bodies.append(event.body)
                if len(bodies) == len(msgs):
                    await c.aclose()
    assert bodies == [b"\x00", b"\x01", b"\x02"]


async def test_a_message_piggybacked_on_an_abandoned_ack_is_still_delivered():
    q = fake_queue()
    nxt = sealed(q, b"not lost")

    async def script(conn: PeerConnection) -> None:
        [(ack, _)] = await conn.receive_commands(1)
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(ack.corr_id, ack.entity_id, nxt), (t.corr_id, b"", PONG())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            c.add_queue(q)
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(c.ack, q, b"first")
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
            await c.ping()
            event = c.next_event_nowait()
    assert event is not None and event.body == b"not lost"
