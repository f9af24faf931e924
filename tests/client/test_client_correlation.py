"""Commands and their answers: corrId correlation, packing into blocks, local limits."""

from __future__ import annotations

import math

import pytest
import trio
from smp_fake_peer import PeerConnection, fake_peer, fake_queue

from router.client import BadResponse, SMPError, open_client
from router.client._connection import SUBMIT_CHUNK
from router.protocol import BATCH_LIMIT, MAX_BATCH, MAX_TRANSMISSION_SIZE
from router.protocol.types import (
    AUTH,
    ERR,
    INFO,
    LARGE_MSG,
    OK,
    PONG,
    QUE,
    SEND,
    SUB,
)


async def test_answers_sent_out_of_order_reach_the_caller_that_asked():
    async def script(conn: PeerConnection) -> None:
        received = await conn.receive_commands(3)
        # Answer last to first, each with the entity it was asked about.
        answers = [(t.corr_id, t.entity_id, INFO(t.entity_id.decode())) for t, _ in received]
        await conn.send(answers[::-1])

    results: dict[str, str] = {}

    async def ask(client, name: str) -> None:
        resp = await client.command(name.encode(), QUE())
        results[name] = resp.json

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            async with trio.open_nursery() as nursery:
                for name in ("a", "b", "c"):
                    nursery.start_soon(ask, c, name)
    assert results == {"a": "a", "b": "b", "c": "c"}


async def test_commands_returns_answers_in_request_order_whatever_the_wire_order():
    async def script(conn: PeerConnection) -> None:
        received = await conn.receive_commands(4)
        answers = [(t.corr_id, t.entity_id, INFO(t.entity_id.decode())) for t, _ in received]
        await conn.send([answers[2], answers[0], answers[3], answers[1]])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            resps = await c.commands([(name.encode(), QUE(), None) for name in "wxyz"])
    assert [r.json for r in resps] == list("wxyz")


async def test_a_thousand_subscriptions_travel_in_as_few_blocks_as_fit():
    queues = [fake_queue() for _ in range(1000)]
    stats: dict[str, int] = {}

    async def script(conn: PeerConnection) -> None:
        received = await conn.receive_commands(len(queues))
        stats["blocks"] = conn.blocks_received
        stats["size"] = len(received[0][0].command) + 2 * 24 + 64 + 3
        assert all(isinstance(cmd, SUB) for _, cmd in received)
        await conn.send([(t.corr_id, t.entity_id, OK()) for t, _ in received])

    with trio.fail_after(20):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            results = await c.subscribe_many(queues)
    assert results == [None] * len(queues)
    per_block = min(MAX_BATCH, BATCH_LIMIT // (2 + stats["size"]))
    assert stats["blocks"] == math.ceil(len(queues) / per_block)


async def test_subscribe_many_reports_each_queue_s_own_result():
    queues = [fake_queue() for _ in range(5)]
    refused = {queues[1].recipient_id, queues[3].recipient_id}

    async def script(conn: PeerConnection) -> None:
        received = await conn.receive_commands(len(queues))
        await conn.send([
            (t.corr_id, t.entity_id, ERR(AUTH) if t.entity_id in refused else OK())
            for t, _ in received
        ])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            results = await c.subscribe_many(queues)
    assert results == [None, AUTH, None, AUTH, None]


async def test_a_transmission_too_large_for_any_block_is_refused_locally():
    seen: list[int] = []

    async def script(conn: PeerConnection) -> None:
        while True:
            for t, _ in await conn.receive_commands(1):
                seen.append(len(t.command))
                await conn.send([(t.corr_id, t.entity_id, OK())])

    too_long = b"x" * MAX_TRANSMISSION_SIZE
    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            requests = [(b"s", SEND(b"F", too_long), None), (b"s", SEND(b"F", b"hi"), None)]
            resps = await c.commands(requests)
            assert resps == [ERR(LARGE_MSG), OK()]
            with pytest.raises(SMPError) as e:
                await c.send(b"s", too_long)
            assert e.value.error == LARGE_MSG
    assert seen == [len(b"SEND F hi")]


async def test_a_response_that_does_not_parse_is_reported_to_its_caller():
    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        raw = b"\x00" + bytes([len(t.corr_id)]) + t.corr_id + b"\x00" + b"NONSENSE"
        await conn.send_transmissions([raw])
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, b"", PONG())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(BadResponse):
                await c.ping()
            await c.ping()  # the connection is still usable


async def test_an_answer_of_the_wrong_kind_is_a_bad_response():
    async def script(conn: PeerConnection) -> None:
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(t.corr_id, b"", INFO("{}"))])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with pytest.raises(BadResponse, match="expected PONG/OK"):
                await c.ping()


async def test_an_err_answer_raises_smp_error_from_high_level_calls_and_is_returned_low_level():
    async def script(conn: PeerConnection) -> None:
        while True:
            for t, _ in await conn.receive_commands(1):
                await conn.send([(t.corr_id, t.entity_id, ERR(AUTH))])

    q = fake_queue()
    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            for call in (c.subscribe(q), c.suspend(q), c.delete(q), c.get(q), c.ack(q, b"m")):
                with pytest.raises(SMPError) as e:
                    await call
                assert e.value.error == AUTH
            assert await c.command(q.recipient_id, SUB(), q.rcv_auth_seed) == ERR(AUTH)


async def test_more_subscriptions_than_one_submission_chunk_keep_their_order():
    queues = [fake_queue() for _ in range(SUBMIT_CHUNK + 300)]
    refused = {q.recipient_id for q in queues[::7]}

    async def script(conn: PeerConnection) -> None:
        received = await conn.receive_commands(len(queues))
        await conn.send([
            (t.corr_id, t.entity_id, ERR(AUTH) if t.entity_id in refused else OK())
            for t, _ in received
        ])

    with trio.fail_after(30):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            results = await c.subscribe_many(queues)
            stats = c.statistics()
    assert results == [AUTH if q.recipient_id in refused else None for q in queues]
    assert stats.pending_commands == 0 and stats.queued_transmissions == 0
    assert stats.blocks_received >= 1 and stats.blocks_sent <= len(queues) // 100


async def test_an_answer_that_arrives_after_its_caller_gave_up_is_dropped_quietly():
    async def script(conn: PeerConnection) -> None:
        [(late, _)] = await conn.receive_commands(1)
        [(t, _)] = await conn.receive_commands(1)
        await conn.send([(late.corr_id, b"", PONG()), (t.corr_id, b"", PONG())])

    with trio.fail_after(10):
        async with fake_peer(script) as peer, open_client(peer.address) as c:
            with trio.move_on_after(0.05):
                await c.ping()
            await c.ping()
            assert c.next_event_nowait() is None
            assert c.statistics().pending_commands == 0
