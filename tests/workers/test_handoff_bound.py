"""The bound on a worker's blocks waiting for other workers' answers
(`handoff.BLOCKS_AWAITING_OWNERS`, `handoff.BLOCKS_IN_FLIGHT`,
docs/workers.md#hand-offs-in-blocks)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from router.client import open_client
from router.protocol.types import OK, SEND
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers import handoff
from router.server.workers.channel import Frame
from router.server.workers.in_process import workers_in_process

CONFIG = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)
BOUND = 3
CLIENTS = 12


@pytest.mark.parametrize("bound, other", [("BLOCKS_AWAITING_OWNERS", "_in_flight_places"),
                                          ("BLOCKS_IN_FLIGHT", "_awaiting_owners")])
async def test_a_front_holds_at_most_the_bound_of_blocks_for_other_workers(
        monkeypatch, bound: str, other: str) -> None:
    """Many clients of one worker each send a block for the other worker's queues at
    once (the owner slowed, so that they would all wait together): SUBs, which wait for
    their answers, or SENDs, which go in flight. No more than their bound wait for the
    owner at once, none takes a place of the other kind, the rest wait their turn, and
    every block is answered."""
    monkeypatch.setattr(handoff, bound, BOUND)
    answer_part = handoff.ShadowServing.process_block

    async def slowly(self, client, block):  # type: ignore[no-untyped-def]
        await trio.sleep(0.05)
        return await answer_part(self, client, block)

    monkeypatch.setattr(handoff.ShadowServing, "process_block", slowly)
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            made = [[await maker.create_queue(snd_secure=False) for _ in range(2)]
                    for _ in range(CLIENTS)]
        assert {Ownership(2, 0).owner_of(q.recipient_id) for qs in made for q in qs} == {0}
        fronts = front.router._fronts
        assert isinstance(fronts, handoff.Handoff)
        others_free = getattr(fronts, other).value
        errors: list[object] = []
        answered = 0

        async def use(queues: list) -> None:  # type: ignore[type-arg]
            nonlocal answered
            async with open_client(front.address) as client:
                if bound == "BLOCKS_AWAITING_OWNERS":
                    results = await client.subscribe_many(queues)
                else:
                    answers = await client.commands(
                        [(q.sender_id, SEND(b"F", b"hello"), None) for q in queues])
                    results = [None if a == OK() else a for a in answers]
                answered += len(results)
                errors.extend(e for e in results if e)
                assert getattr(fronts, other).value == others_free

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for queues in made:
                    nursery.start_soon(use, queues)
        assert errors == []
        assert fronts.awaiting_peak == BOUND
        assert answered == 2 * CLIENTS
        # Every place is given back once the blocks are answered.
        assert fronts._awaiting == {}
        assert fronts._awaiting_owners.value == handoff.BLOCKS_AWAITING_OWNERS
        assert fronts._in_flight_places.value == handoff.BLOCKS_IN_FLIGHT


async def test_a_block_waiting_for_its_own_client_gives_its_place_back() -> None:
    """A shadow's write reaches a front whose client does not read (its pending list
    full): the block no longer waits for the owner but for its client, and gives its
    place back, so that a client that stops reading cannot hold every other client of
    the worker."""
    wrote: list[list[bytes]] = []
    conn = SimpleNamespace(id=7, service_id=None, leave=wrote.append, outbox_full=lambda: True,
                           wait_for_room=trio.sleep_forever)
    shares = handoff.Handoff(Ownership(2, 1), "test-bound")
    front = shares._front(SimpleNamespace(conn=conn))  # type: ignore[arg-type]
    front.add_owner(0)
    await shares._awaiting_owners.acquire()  # as `process_block` takes it
    shares._awaiting[conn.id] = [shares._awaiting_owners]
    answer = b"\x00\x02ab\x18" + b"\x00" * 24 + b"OK"  # any transmission: passed on as is
    payload = handoff._join([answer])  # a shadow writes transmissions as they are
    async with trio.open_nursery() as nursery:
        shares._nursery = nursery
        await shares._on_frame(0, Frame(handoff.OUT, conn.id, payload))
        assert wrote == [[answer]]
        assert shares._awaiting == {}
        assert shares._awaiting_owners.value == handoff.BLOCKS_AWAITING_OWNERS
        nursery.cancel_scope.cancel()  # the OUT_TAKEN that waits for room
