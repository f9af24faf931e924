"""A block of SUBs reads its queues' records and heads in one store call each
(dispatch.py, "Store reads by the block"); on every store kind it answers what the
SUBs one by one answer, and keeps the delivery invariants (docs/protocol.md#behaviour):
a queue with a waiting message delivers it in its SUB's answer or right after it, and
one message of a queue is unacknowledged at a time."""

from __future__ import annotations

import os

import pytest
import trio
from smp_session import Queue, Session, connect

from router.protocol import crypto
from router.protocol.block import BatchPacker, decode_batch
from router.protocol.codec import decode_response
from router.protocol.transmission import decode_transmission
from router.protocol.types import ACK, AUTH, ERR, MSG, NO_MSG, OK, PING, PONG, SEND, SUB
from router.server.core import dispatch

QUEUES = 24
WAITING = {0: 2, 1: 1}  # queue index % 3 -> messages waiting before the SUBs


def _block(session: Session, requests: list[tuple[bytes, object, bytes | None]]) -> bytes:
    packer = BatchPacker()
    for request in requests:
        assert packer.add(session.transmission(*request))
    return packer.take_block()


async def _raw_answers(session: Session, count: int) -> list[bytes]:
    """Every transmission the router writes until `count` of them carry a corrId."""
    raws: list[bytes] = []
    while sum(bool(decode_transmission(r).corr_id) for r in raws) < count:
        raws += decode_batch(await session.transport.receive_block())
    return raws


async def _queues_with_messages(router) -> tuple[list[Queue], dict[bytes, list[bytes]]]:
    """QUEUES queues, some with messages waiting (WAITING): the queues and the bodies."""
    async with connect(router) as maker:
        queues = await maker.create_queues(QUEUES)
        waiting: dict[bytes, list[bytes]] = {}
        for i, q in enumerate(queues):
            bodies = [f"{i}-{n}".encode() for n in range(WAITING.get(i % 3, 0))]
            for body in bodies:
                await maker.send(q.sender_id, body)
            waiting[q.recipient_id] = bodies
    return queues, waiting


def _sub_requests(queues: list[Queue]) -> list[tuple[bytes, object, bytes | None]]:
    """A SUB of every queue, with a queue that does not exist, one signed with another
    key, and one queue twice among them."""
    wrong_seed, _ = crypto.new_ed25519()
    requests: list[tuple[bytes, object, bytes | None]] = [
        (q.recipient_id, SUB(), q.rcv_seed) for q in queues]
    requests.insert(3, (os.urandom(24), SUB(), wrong_seed))
    requests.insert(7, (queues[10].recipient_id, SUB(), wrong_seed))
    requests.insert(12, (queues[4].recipient_id, SUB(), queues[4].rcv_seed))
    requests.append((b"", PING(), None))  # its PONG comes after every answer before it
    return requests


@pytest.mark.one_process("two connections' answers compared byte for byte: on two workers a "
                         "block's answers from the owner come before the front's own "
                         "(docs/workers.md#hand-offs-in-blocks); one dispatcher patched")
async def test_a_block_of_subs_answers_as_the_subs_one_by_one(router, monkeypatch):
    """The same block, on two fresh connections one after the other (each takes the
    queues over and gets their heads again): batched, and with every SUB reading its
    queue alone, the router writes the same bytes."""
    with trio.fail_after(60):
        queues, _ = await _queues_with_messages(router)
        requests = _sub_requests(queues)
        answers = []
        for batched in (True, False):
            if not batched:
                monkeypatch.setattr(dispatch.Dispatcher, "_read_records",
                                    _no_records, raising=True)
                monkeypatch.setattr(router.dispatcher, "_subscribe_run", None)
            async with connect(router) as session:
                await session.send_block(_block(session, requests))
                answers.append(await _raw_answers(session, len(requests)))
        assert answers[0] == answers[1]
        responses = [decode_response(decode_transmission(r).command) for r in answers[0]]
        assert responses.count(ERR(AUTH)) == 2 and responses[-1] == PONG()
        assert sum(isinstance(r, MSG) for r in responses) == sum(
            1 for i in range(QUEUES) if WAITING.get(i % 3)) + 1  # queue 4 twice


async def _no_records(self, conn, parsed):
    return {}


async def test_a_block_of_subs_delivers_each_waiting_message_once_in_order(router):
    """A reconnecting client's block of SUBs while a sender writes to its empty
    queues: each queue's messages come one at a time, the first in or right after the
    SUB's answer, the next only after the ACK, none twice, none lost."""
    with trio.fail_after(60):
        queues, waiting = await _queues_with_messages(router)
        by_id = {q.recipient_id: q for q in queues}
        late = [q for i, q in enumerate(queues) if i % 3 == 2]
        async with connect(router) as recipient, connect(router) as sender:
            requests = [(q.recipient_id, SUB(), q.rcv_seed) for q in queues]
            sends = BatchPacker()
            for q in late:
                assert sends.add(sender.transmission(q.sender_id, SEND(b"F", b"late"), None))
                waiting[q.recipient_id] = [b"late"]
            await recipient.send_block(_block(recipient, requests))
            await sender.send_block(sends.take_block())
            assert {decode_response(decode_transmission(r).command) for r in
                    decode_batch(await sender.transport.receive_block())} == {OK()}

            answered: set[bytes] = set()
            in_flight: dict[bytes, bytes] = {}  # queue -> msg id delivered, not acked
            received: dict[bytes, list[bytes]] = {rid: [] for rid in by_id}

            def take(raws: list[bytes]) -> None:
                for raw in raws:
                    t = decode_transmission(raw)
                    response = decode_response(t.command)
                    if t.corr_id:
                        assert response == OK(), response
                        answered.add(t.entity_id)
                    else:
                        assert isinstance(response, MSG), response
                        assert t.entity_id in answered, "a MSG before its SUB's OK"
                        assert t.entity_id not in in_flight, "a second unacknowledged MSG"
                        in_flight[t.entity_id] = response.msg_id
                        received[t.entity_id].append(by_id[t.entity_id].open(response).body)

            take(await _raw_answers(recipient, len(requests)))
            while any(len(received[rid]) < len(bodies) for rid, bodies in waiting.items()):
                if not in_flight:
                    take(decode_batch(await recipient.transport.receive_block()))
                    continue
                rid, msg_id = next(iter(in_flight.items()))
                del in_flight[rid]
                ack = recipient.transmission(rid, ACK(msg_id), by_id[rid].rcv_seed)
                packer = BatchPacker()
                assert packer.add(ack)
                await recipient.send_block(packer.take_block())
                while True:  # the ACK's answer: OK, or the next MSG in its place
                    raws = decode_batch(await recipient.transport.receive_block())
                    answer = [r for r in raws if decode_transmission(r).corr_id]
                    take([r for r in raws if not decode_transmission(r).corr_id])
                    if answer:
                        t = decode_transmission(answer[0])
                        response = decode_response(t.command)
                        if isinstance(response, MSG):
                            in_flight[rid] = response.msg_id
                            received[rid].append(by_id[rid].open(response).body)
                        else:
                            assert response == OK(), response
                        break
            assert received == waiting
            assert await recipient.no_more_events()


async def test_a_block_mixing_subs_with_other_commands_keeps_their_order(router):
    """SUBs around an ACK and a SUB of the same queue twice: answered in order, the
    head once per SUB (a SUB again sends the head again), nothing in between."""
    with trio.fail_after(60):
        queues, _ = await _queues_with_messages(router)
        q0, q1, q2 = queues[0], queues[1], queues[2]  # two, one and no messages
        async with connect(router) as session:
            requests = [
                (q0.recipient_id, SUB(), q0.rcv_seed),
                (q2.recipient_id, SUB(), q2.rcv_seed),
                (q1.recipient_id, ACK(b"\0" * 24), q1.rcv_seed),  # nothing delivered yet
                (q1.recipient_id, SUB(), q1.rcv_seed),
                (q0.recipient_id, SUB(), q0.rcv_seed),
                (b"", PING(), None),  # its PONG comes after every answer before it
            ]
            await session.send_block(_block(session, requests))
            raws = await _raw_answers(session, len(requests))
        got = [(decode_transmission(r).entity_id, decode_response(decode_transmission(r).command))
               for r in raws]
        kinds = [(rid, type(resp).__name__) for rid, resp in got]
        assert kinds == [
            (q0.recipient_id, "OK"), (q0.recipient_id, "MSG"),
            (q2.recipient_id, "OK"),
            (q1.recipient_id, "ERR"),
            (q1.recipient_id, "OK"), (q1.recipient_id, "MSG"),
            (q0.recipient_id, "OK"), (q0.recipient_id, "MSG"),
            (b"", "PONG"),
        ], kinds
        assert got[3][1] == ERR(NO_MSG)
        assert got[1][1].msg_id == got[7][1].msg_id
