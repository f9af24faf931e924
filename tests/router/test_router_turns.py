"""Blocks take turns by their cost (router/server/core/turns.py): a costly block
waits for one of `AT_ONCE` places and pauses once it has spent a turn's budget;
a cheap block never waits, and the answers keep their order.

In the first test the commands are slowed down by a probe that waits on the
(mock) clock, as a store would: that makes every block long enough to overlap
with the others, so the test can count how many costly blocks work at once
and see the traffic of other clients pass the queue they form.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from smp_session import connect

from router.protocol import crypto
from router.protocol.block import BatchPacker, pad_block
from router.protocol.codec import encode_command
from router.protocol.transmission import encode_transmission
from router.protocol.types import (
    ACK,
    AUTH,
    BLOCK,
    DEL,
    ERR,
    MSG,
    NEW,
    NKEY,
    NO_MSG,
    OK,
    PING,
    PONG,
    SEND,
    SUB,
    Transmission,
)
from router.server.core import dispatch
from router.server.core.turns import (
    AT_ONCE,
    BASE,
    ED25519,
    FREE_COST,
    HASHED,
    KEYS,
    MESSAGE,
    X25519_AUTHENTICATOR,
    Pace,
    Turns,
    acknowledging_cost,
    block_cost,
    pace_of,
    transmission_cost,
)

CROWD = 12  # clients resubscribing at once
STEP = 0.001  # mock seconds each command takes
MANY = 10  # SUBs in each of the crowd's blocks: a costly block
VERSION = 10


@pytest.mark.one_process("the turns are each worker's own: every worker lets AT_ONCE costly "
                         "blocks run on its core (docs/workers.md#tests)")
@pytest.mark.parametrize("store_kind", ["memory"])
async def test_costly_blocks_take_turns_and_cheap_blocks_pass_them(
    router, monkeypatch, autojump_clock
):
    execute = dispatch.Dispatcher._execute
    costly_now = most = 0
    finished: list[str] = []

    async def slow_execute(self, subscriber, v, *run):
        nonlocal costly_now, most
        costly = isinstance(v.command, SUB)
        costly_now += costly
        most = max(most, costly_now)
        try:
            await trio.sleep(STEP)
            return await execute(self, subscriber, v, *run)
        finally:
            costly_now -= costly

    async def client(name: str, ready: trio.Event, go: trio.Event, sub: bool) -> None:
        async with connect(router) as session:
            queues = await session.create_queues(MANY) if sub else []
            ready.set()
            await go.wait()
            if sub:
                requests = [(q.recipient_id, SUB(), q.rcv_seed) for q in queues]
                assert await session.commands(requests) == [OK()] * MANY
            else:  # a busy client: many commands, cheap ones
                assert await session.commands([(b"", PING(), None)] * MANY) == [PONG()] * MANY
            finished.append(name)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            go = trio.Event()
            crowd = [trio.Event() for _ in range(CROWD)]
            for i, ready in enumerate(crowd):
                nursery.start_soon(client, f"subscribing {i}", ready, go, True)
            for ready in crowd:
                await ready.wait()
            monkeypatch.setattr(dispatch.Dispatcher, "_execute", slow_execute)
            go.set()
            await trio.sleep(STEP)  # the crowd's blocks are in
            nursery.start_soon(client, "busy", trio.Event(), go, False)
    assert len(finished) == CROWD + 1
    assert most == AT_ONCE, most
    # It came after every block of SUBs and is answered before most of them.
    assert finished.index("busy") < CROWD // 2, finished


@pytest.mark.parametrize("store_kind", ["memory"])
@pytest.mark.parametrize("delivery", ["single-task"])
async def test_a_costly_block_pauses_for_another_clients_ping(router, monkeypatch):
    """Without a mock clock: a block of 100 signed DELs is seconds of checks on no
    machine, but far more than one turn; the PING sent after it is answered first."""
    with trio.fail_after(60):
        async with connect(router) as flooder, connect(router) as other:
            queues = await flooder.create_queues(100)
            packer = BatchPacker()
            for q in queues:
                assert packer.add(flooder.transmission(q.recipient_id, DEL(), q.rcv_seed))
            block = packer.take_block()
            order: list[str] = []
            taken = []
            real_turn = Turns.turn

            def recorded_turn(self):
                taken.append(real_turn(self))
                return taken[-1]

            monkeypatch.setattr(Turns, "turn", recorded_turn)

            async def flood() -> None:
                await flooder.send_block(block)
                answers = []
                while len(answers) < len(queues):
                    answers.extend(await flooder.receive())
                assert [a.response for a in answers] == [OK()] * len(queues)
                order.append("flood answered")

            async def ping() -> None:
                while not taken:  # the block is being worked on
                    await trio.sleep(0)
                assert await other.command(b"", PING()) == PONG()
                order.append("ping answered")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                nursery.start_soon(ping)
    assert order == ["ping answered", "flood answered"], order
    [turn] = taken
    # Each turn spends its budget and at most one more transmission's check.
    per_turn = router.dispatcher.turns.budget + BASE + ED25519
    assert turn.turns_taken >= len(queues) * (BASE + ED25519) // per_turn, turn.turns_taken


@pytest.mark.parametrize("store_kind", ["memory"])
@pytest.mark.parametrize("delivery", ["single-task"])
async def test_a_costly_block_keeps_the_order_of_its_answers(router):
    """Pass-1 errors first, then the answers of the verified commands in order,
    across the pauses (dispatch.py)."""
    async with connect(router) as session:
        queues = await session.create_queues(20)
        wrong_seed, _ = crypto.new_ed25519()
        packer = BatchPacker()
        signed, refused = [], []
        for q in queues:
            raw = session.transmission(q.recipient_id, SUB(), q.rcv_seed)
            signed.append(raw)
            assert packer.add(raw)
            raw = session.transmission(q.recipient_id, SUB(), wrong_seed)
            refused.append(raw)
            assert packer.add(raw)
        assert block_cost(signed + refused, VERSION) > FREE_COST
        await session.send_block(packer.take_block())
        answers = []
        while len(answers) < 2 * len(queues):
            answers.extend(await session.receive())
    corr = lambda raw: raw[1 + raw[0] + 1 : 1 + raw[0] + 1 + 24]  # noqa: E731
    assert [a.corr_id for a in answers] == [corr(r) for r in refused + signed]
    assert [a.response for a in answers] == [ERR(AUTH)] * 20 + [OK()] * 20


@pytest.mark.parametrize("store_kind", ["memory"])
@pytest.mark.parametrize("delivery", ["single-task"])
async def test_a_message_pushed_during_a_pause_follows_the_answer_of_its_sub(
    router, monkeypatch
):
    """A block of 100 SUBs pauses between its commands; a (cheap) block of SENDs to
    the first ten queues lands meanwhile. Each MSG comes after its SUB's OK."""
    with trio.fail_after(60):
        async with connect(router) as recipient, connect(router) as sender:
            queues = await recipient.create_queues(100)
            subs = BatchPacker()
            for q in queues:
                assert subs.add(recipient.transmission(q.recipient_id, SUB(), q.rcv_seed))
            sends = BatchPacker()
            for q in queues[:10]:
                assert sends.add(sender.transmission(q.sender_id, SEND(b"F", b"hello"), None))
            execute = dispatch.Dispatcher._execute
            subscribing = trio.Event()

            async def noted_execute(self, subscriber, v, *run):
                if isinstance(v.command, SUB):
                    subscribing.set()  # the block of SUBs is in its second pass
                return await execute(self, subscriber, v, *run)

            monkeypatch.setattr(dispatch.Dispatcher, "_execute", noted_execute)
            received: list = []

            async def subscribe() -> None:
                await recipient.send_block(subs.take_block())
                while (sum(isinstance(r.response, MSG) for r in received) < 10
                       or sum(bool(r.corr_id) for r in received) < len(queues)):
                    received.extend(await recipient.receive())

            async def send() -> None:
                await subscribing.wait()
                await sender.send_block(sends.take_block())
                answers = []
                while len(answers) < 10:
                    answers.extend(await sender.receive())
                assert {type(a.response) for a in answers} == {OK}, answers

            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscribe)
                nursery.start_soon(send)
    answered: set[bytes] = set()
    pushed_during_the_block = 0
    for reply in received:
        if isinstance(reply.response, MSG):
            assert reply.entity_id in answered, "a MSG before its SUB's OK"
            pushed_during_the_block += len(answered) < len(queues)
        elif reply.corr_id:
            assert reply.response == OK(), reply
            answered.add(reply.entity_id)
    assert answered == {q.recipient_id for q in queues}
    assert pushed_during_the_block > 0  # the race this is about did happen


def _raw(command, authorization: bytes = b"", entity_id: bytes = b"q" * 24) -> bytes:
    body = command if isinstance(command, bytes) else encode_command(command)
    return encode_transmission(Transmission(authorization, b"c" * 24, entity_id, body))


def test_a_transmission_costs_its_checks_and_the_keys_its_handler_makes():
    ed25519, x25519 = b"s" * 64, b"a" * 80
    _, key = crypto.new_ed25519()
    _, dh = crypto.new_x25519()
    assert transmission_cost(_raw(PING(), entity_id=b""), VERSION) == BASE
    assert transmission_cost(_raw(DEL(), ed25519), VERSION) == BASE + ED25519
    assert transmission_cost(_raw(DEL(), x25519), VERSION) == BASE + X25519_AUTHENTICATOR
    assert transmission_cost(_raw(DEL(), b"e" * 114), VERSION) == BASE + ED25519  # dummy check
    assert transmission_cost(_raw(SUB(), ed25519), VERSION) == BASE + ED25519 + MESSAGE
    assert transmission_cost(_raw(NKEY(key, dh), ed25519), VERSION) == BASE + ED25519 + KEYS
    new = NEW(key, dh, None, False, True)
    assert transmission_cost(_raw(new, ed25519, b""), VERSION) == BASE + ED25519 + 2 * KEYS
    # No authorization (an unsecured SEND, or an AUTH to come): no check.
    assert transmission_cost(_raw(DEL()), VERSION) == BASE
    # Fields that do not fit: answered with its error, nothing more.
    assert transmission_cost(b"\x40" + b"x" * 10, VERSION) == BASE // 2 + ED25519
    # Everyday blocks are free; a block of many signed commands is not.
    assert block_cost([_raw(DEL(), ed25519)] * 2, VERSION) <= FREE_COST
    assert block_cost([_raw(DEL(), ed25519)] * 3, VERSION) > FREE_COST


async def test_a_turn_gives_its_place_to_the_oldest_waiting_block_when_spent():
    places = Turns(at_once=1, budget=10)
    log: list[str] = []
    others_wait = trio.Event()

    async def block(name: str, costs: list[int]) -> None:
        turn = places.turn()
        await turn.begin()
        if name == "a":
            await others_wait.wait()
        try:
            for i, cost in enumerate(costs):
                await turn.spend(cost)
                log.append(f"{name}{i}")
        finally:
            turn.end()

    async with trio.open_nursery() as nursery:
        for name, costs in (("a", [6, 6, 6, 6]), ("b", [6, 6, 6]), ("c", [20])):
            nursery.start_soon(block, name, costs)
            await trio.testing.wait_all_tasks_blocked()
        others_wait.set()
    # a spends 12 of its 10 before it yields; then b, c (past its budget in one
    # piece), a again, b again: each in the order it came to wait.
    assert log == ["a0", "a1", "b0", "b1", "c0", "a2", "a3", "b2"], log
    assert places.statistics().borrowed_tokens == 0


def test_a_check_costs_more_for_the_bytes_it_hashes():
    ed25519 = b"s" * 64
    small = _raw(SEND(b"F", b"x"), ed25519)
    large = _raw(SEND(b"F", b"x" * 16_000), ed25519)
    assert transmission_cost(small, VERSION) == BASE + ED25519
    assert transmission_cost(large, VERSION) == BASE + ED25519 + len(large) // HASHED
    assert transmission_cost(_raw(SEND(b"F", b"x" * 16_000)), VERSION) == BASE  # nothing checked


def test_the_acknowledging_cost_is_the_acks_of_messages_in_flight():
    ed25519 = b"s" * 64
    in_flight = {(b"q" * 24, b"m" * 24)}

    def awaits_ack(recipient_id: bytes, msg_id: bytes) -> bool:
        return (recipient_id, msg_id) in in_flight

    expected = _raw(ACK(b"m" * 24), ed25519)
    other_message = _raw(ACK(b"n" * 24), ed25519)
    other_queue = _raw(ACK(b"m" * 24), ed25519, entity_id=b"r" * 24)
    cut_short = _raw(b"ACK " + bytes((24,)) + b"m" * 23, ed25519)
    no_id = _raw(b"ACK ", ed25519)  # no length byte at all: a CMD error, not a crash
    assert acknowledging_cost([expected], VERSION, awaits_ack) == transmission_cost(
        expected, VERSION)
    blocks = [[other_message], [other_queue], [cut_short], [no_id], [_raw(DEL(), ed25519)],
              [b"\x40"]]
    for block in blocks:
        assert acknowledging_cost(block, VERSION, awaits_ack) == 0, block
    assert acknowledging_cost([expected, other_message], VERSION, awaits_ack) == (
        transmission_cost(expected, VERSION))


@pytest.mark.parametrize("store_kind", ["memory"])
@pytest.mark.parametrize("delivery", ["single-task"])
async def test_a_block_of_acks_of_pushed_messages_needs_no_place(router):
    """With every place held, a costly block of ACKs of the messages pushed to this
    connection is answered; a block of ACKs of other messages waits for a place."""
    with trio.fail_after(30):
        async with connect(router) as recipient, connect(router) as sender:
            queues = await recipient.create_queues(10, subscribe=True)
            for q in queues:
                await sender.send(q.sender_id, b"hello")
            pushed = {}
            while len(pushed) < len(queues):
                event = await recipient.next_event()
                assert isinstance(event.response, MSG), event
                pushed[event.entity_id] = event.response.msg_id
            places = router.dispatcher.turns._places
            holders = [object() for _ in range(AT_ONCE)]
            for holder in holders:
                places.acquire_on_behalf_of_nowait(holder)

            expected = BatchPacker()
            raws = [recipient.transmission(q.recipient_id, ACK(pushed[q.recipient_id]),
                                           q.rcv_seed) for q in queues]
            for raw in raws:
                assert expected.add(raw)
            assert block_cost(raws, VERSION) > FREE_COST
            await recipient.send_block(expected.take_block())
            answers = []
            while len(answers) < len(queues):  # in slices, so maybe in several blocks
                answers.extend(await recipient.receive())
            assert [a.response for a in answers] == [OK()] * len(queues)

            others = BatchPacker()
            for q in queues:
                assert others.add(recipient.transmission(q.recipient_id, ACK(b"x" * 24),
                                                         q.rcv_seed))
            await recipient.send_block(others.take_block())
            with trio.move_on_after(0.5) as waited:
                await recipient.receive()
            assert waited.cancelled_caught, "ACKs of no message in flight passed the turns"
            for holder in holders:
                places.release_on_behalf_of(holder)
            answers = []
            while len(answers) < len(queues):
                answers.extend(await recipient.receive())
            assert [a.response for a in answers] == [ERR(NO_MSG)] * len(queues)


async def test_a_block_of_many_pings_needs_no_place(router):
    """With every place held (a reconnect storm's SUB blocks), a block of 60 PINGs, what
    a client that waited packs its PINGs into, is answered; a block of as many signed
    commands waits for a place."""
    with trio.fail_after(30):
        async with connect(router) as client:
            queues = await client.create_queues(2)
            places = router.dispatcher.turns._places
            holders = [object() for _ in range(AT_ONCE)]
            for holder in holders:
                places.acquire_on_behalf_of_nowait(holder)
            pings = BatchPacker()
            raws = [client.transmission(b"", PING(), None) for _ in range(60)]
            for raw in raws:
                assert pings.add(raw)
            assert block_cost(raws, VERSION) > FREE_COST
            await client.send_block(pings.take_block())
            answers = []
            while len(answers) < len(raws):  # in slices, so maybe in several blocks
                answers.extend(await client.receive())
            assert [a.response for a in answers] == [PONG()] * len(raws)

            signed = BatchPacker()
            for _ in range(3):
                for q in queues:
                    assert signed.add(client.transmission(q.recipient_id, SUB(), q.rcv_seed))
            await client.send_block(signed.take_block())
            with trio.move_on_after(0.5) as waited:
                await client.receive()
            assert waited.cancelled_caught, "a block of signed SUBs passed the turns"
            for holder in holders:
                places.release_on_behalf_of(holder)
            answers = []
            while len(answers) < 6:
                answers.extend(await client.receive())
            assert len(answers) == 6


async def test_at_most_in_progress_blocks_are_between_their_first_turn_and_their_last():
    """A crowd of costly blocks: each holds what it parsed from its first turn to its
    last, so only `in_progress` of them may be there at once; the others start in
    arrival order as those finish, and those in progress still take turns."""
    places = Turns(at_once=2, budget=10, in_progress=4)
    started: list[int] = []
    finished: list[int] = []
    finished_before: dict[int, int] = {}  # block -> blocks finished when it started
    now = most = 0
    go = trio.Event()

    async def block(index: int) -> None:
        nonlocal now, most
        turn = places.turn()
        try:
            await turn.begin()
            started.append(index)
            finished_before[index] = len(finished)
            now += 1
            most = max(most, now)
            await go.wait()
            for _ in range(5):
                await turn.spend(6)
            now -= 1
            finished.append(index)
        finally:
            turn.finish()

    async with trio.open_nursery() as nursery:
        for index in range(20):
            nursery.start_soon(block, index)
            await trio.testing.wait_all_tasks_blocked()
        go.set()
    assert most == 4, most
    assert sorted(started[:4]) == [0, 1, 2, 3], started
    # the fifth block to arrive starts once one has finished, the sixth once two have...
    assert all(finished_before[i] >= i - 3 for i in range(4, 20)), finished_before
    assert sorted(finished) == list(range(20))
    statistics = places.statistics()
    assert statistics.borrowed_tokens == 0
    assert places._in_progress.value == 4  # every place in progress given back


async def test_a_block_that_steps_aside_lets_a_waiting_block_start():
    """A block waiting on its client (dispatch.py: its answers cannot leave) gives its
    place in progress to the next block, and queues again for one afterwards."""
    places = Turns(at_once=1, budget=10, in_progress=1)
    log: list[str] = []
    client_reads = trio.Event()

    async def slow_reader() -> None:
        turn = places.turn()
        try:
            await turn.begin()
            log.append("slow begins")
            turn.step_aside()
            await client_reads.wait()
            await turn.begin()
            log.append("slow resumes")
        finally:
            turn.finish()

    async def other() -> None:
        turn = places.turn()
        try:
            await turn.begin()
            log.append("other")
        finally:
            turn.finish()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow_reader)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(other)
        await trio.testing.wait_all_tasks_blocked()
        assert log == ["slow begins", "other"], log
        client_reads.set()
    assert log == ["slow begins", "other", "slow resumes"], log


def test_a_blocks_pace_is_its_full_costing_read_only_as_far_as_needed():
    ed25519 = b"s" * 64
    in_flight = {(b"q" * 24, b"m" * 24)}

    def awaits_ack(recipient_id: bytes, msg_id: bytes) -> bool:
        return (recipient_id, msg_id) in in_flight

    ack, ping, dele = _raw(ACK(b"m" * 24), ed25519), _raw(PING(), entity_id=b""), _raw(
        DEL(), ed25519)
    for block in ([ping], [ping] * 15, [ping] * 16, [ping] * 100, [dele] * 2, [dele] * 3,
                  [ack] * 20, [ack] * 20 + [dele] * 2, [ack] * 20 + [dele] * 3,
                  [ping] * 50 + [dele] * 2, [ping] * 50 + [dele] * 3, [dele, b"\x40"] * 2,
                  [_raw(b"ACK ", ed25519)], [_raw(b"ACK", ed25519)] * 3):
        cost = block_cost(block, VERSION)
        light = sum(c for raw in block if (c := transmission_cost(raw, VERSION)) <= BASE)
        heavy = cost - acknowledging_cost(block, VERSION, awaits_ack) - light
        expected = (Pace.FREE if cost <= FREE_COST else
                    Pace.SLICES if heavy <= FREE_COST else Pace.TURNS)
        assert pace_of(block, VERSION, awaits_ack) is expected, (len(block), cost)

    read = []

    def hundred_dels():
        for _ in range(100):
            read.append(dele)
            yield dele

    assert pace_of(hundred_dels(), VERSION, awaits_ack) is Pace.TURNS
    # up to the first DEL that takes the cost past FREE_COST, no further
    assert len(read) == FREE_COST // (BASE + ED25519) + 1, len(read)


@pytest.mark.parametrize("store_kind", ["memory"])
async def test_a_costly_block_with_a_defect_past_its_first_transmissions_gets_err_block(router):
    """The pace of a block of SUBs is known from its first few; the rest is read at its
    turn, and a defect there is the whole block's one ERR BLOCK, as before its turn."""
    with trio.fail_after(30):
        async with connect(router) as client:
            queues = await client.create_queues(20)
            raws = [client.transmission(q.recipient_id, SUB(), q.rcv_seed) for q in queues]
            batch = b"".join(len(raw).to_bytes(2, "big") + raw for raw in raws)
            for content in (bytes((len(raws) + 1,)) + batch,  # one transmission short
                            bytes((len(raws),)) + batch + b"zz"):  # bytes after the last
                await client.send_block(pad_block(content))
                [reply] = await client.receive()
                assert (reply.corr_id, reply.entity_id, reply.response) == (b"", b"", ERR(BLOCK))
                assert await client.command(b"", PING()) == PONG()
