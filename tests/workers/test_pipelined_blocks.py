"""A front reads a connection's next block while its last waits for other workers'
answers (docs/workers.md#pipelined-blocks): the next block's part goes to its owner
meanwhile; a command that names no queue (a PING) still follows every answer before
it, and nothing pushed meanwhile overtakes an answer before it; a subscribing block
waits for its answers."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from router.client import MessageEvent, RecipientQueue, SMPClient, _connection, open_client
from router.protocol.types import AUTH, ERR, LGET, PING, PONG, SOK, SUB
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers import handoff
from router.server.workers.in_process import workers_in_process

CONFIG = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)


class HeldOwner:
    """Once `hold` is called, the owner's shadows answer no part until `release`."""

    def __init__(self, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        self.holding = False
        self.reached, self.released = trio.Event(), trio.Event()
        answer_part = handoff.ShadowServing.process_block
        held = self

        async def held_back(self, client, block):  # type: ignore[no-untyped-def]
            if held.holding:
                held.reached.set()
                await held.released.wait()
            return await answer_part(self, client, block)

        monkeypatch.setattr(handoff.ShadowServing, "process_block", held_back)

    def hold(self) -> None:
        self.holding = True


def _routed(monkeypatch) -> list[tuple[bytes, bytes]]:  # type: ignore[no-untyped-def]
    """What the clients get, each transmission's entity id and tag, in the order it came."""
    routed: list[tuple[bytes, bytes]] = []
    route = _connection.Connection._route

    async def recording(self, t):  # type: ignore[no-untyped-def]
        routed.append((t.entity_id, t.command.split(b" ")[0]))
        await route(self, t)

    monkeypatch.setattr(_connection.Connection, "_route", recording)
    return routed


@asynccontextmanager
async def _mine_and_theirs() -> AsyncIterator[tuple[SMPClient, SMPClient, RecipientQueue,
                                                    RecipientQueue]]:
    """Two workers; a client of the front with a queue of the front's (`mine`), a sender
    there, and a queue of the owner's (`theirs`)."""
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            theirs = await maker.create_queue(snd_secure=False)
        async with open_client(front.address) as client, open_client(
                front.address) as sender:
            yield client, sender, await client.create_queue(snd_secure=False), theirs


async def _until(check) -> None:  # type: ignore[no-untyped-def]
    while not check():
        await trio.sleep(0.01)


def _window_to(fronts: handoff.Handoff, worker: int) -> handoff._Owner:
    [front] = fronts._fronts.values()
    window = front.owner(worker)
    assert window is not None
    return window


async def test_the_next_blocks_part_goes_to_its_owner_while_the_last_waits(
        monkeypatch) -> None:
    owner_held = HeldOwner(monkeypatch)
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            theirs = [await maker.create_queue(snd_secure=False) for _ in range(2)]
        assert {Ownership(2, 0).owner_of(q.recipient_id) for q in theirs} == {0}
        fronts = front.router._fronts
        assert isinstance(fronts, handoff.Handoff)
        owner_held.hold()
        async with open_client(front.address) as sender:
            answered: list[int] = []

            async def send(n: int) -> None:
                await sender.send(theirs[n].sender_id, b"message %d" % n)
                answered.append(n)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send, 0)
                    await owner_held.reached.wait()
                    nursery.start_soon(send, 1)
                    # Without pipelining the front reads the second block only once the
                    # first is answered, which the held owner never does: this waits on.
                    await _until(lambda: _window_to(fronts, 0).sent == 2)
                    assert answered == []
                    owner_held.released.set()
            assert sorted(answered) == [0, 1]
            # Every place given back once the owner answered.
            assert fronts._awaiting == {}
            assert fronts._awaiting_owners.value == handoff.BLOCKS_AWAITING_OWNERS
            assert fronts._in_flight_places.value == handoff.BLOCKS_IN_FLIGHT


async def test_a_push_does_not_overtake_an_answer_of_a_block_in_flight(monkeypatch) -> None:
    """A block of ACKs of a queue of the front's and one of the owner's: the front's own
    OK waits for the owner's answer; a MSG sent meanwhile to the front's queue waits
    behind it."""
    owner_held = HeldOwner(monkeypatch)
    routed = _routed(monkeypatch)
    async with _mine_and_theirs() as (client, sender, mine, theirs):
        assert not any(await client.subscribe_many([mine, theirs]))
        delivered = {}
        for queue in (mine, theirs):
            await sender.send(queue.sender_id, b"first")
        with trio.fail_after(10):
            while len(delivered) < 2:
                event = await client.next_event()
                assert isinstance(event, MessageEvent)
                delivered[event.recipient_id] = event.msg_id
        owner_held.hold()
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.ack_many, [
                    (queue, delivered[queue.recipient_id]) for queue in (mine, theirs)])
                await owner_held.reached.wait()
                await sender.send(mine.sender_id, b"second")
                await trio.sleep(0.2)  # the MSG is made while the OK of `mine` waits
                owner_held.released.set()
            event = await client.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"second"
        ours = [tag for entity, tag in routed if entity == mine.recipient_id]
        assert ours[-2:] == [b"OK", b"MSG"]


async def test_a_ping_follows_the_answers_of_the_blocks_before_it(monkeypatch) -> None:
    owner_held = HeldOwner(monkeypatch)
    routed = _routed(monkeypatch)
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            theirs = await maker.create_queue(snd_secure=False)
        owner_held.hold()
        async with open_client(front.address) as client:
            done: list[str] = []

            async def run(name: str, work) -> None:  # type: ignore[no-untyped-def]
                await work()
                done.append(name)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(run, "SEND", lambda: client.send(theirs.sender_id, b"x"))
                    await owner_held.reached.wait()
                    nursery.start_soon(run, "PING", client.ping)
                    await trio.sleep(0.3)  # a PONG that did not wait would be in by now
                    assert done == []
                    owner_held.released.set()
            assert sorted(done) == ["PING", "SEND"]
            assert [tag for _, tag in routed][-2:] == [b"OK", b"PONG"]


async def test_a_subscribing_block_waits_for_its_answers(monkeypatch) -> None:
    """A SUB block is answered before the connection's next block is read: a
    subscribing burst keeps one block per connection in flight (RSS)."""
    owner_held = HeldOwner(monkeypatch)
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            theirs = [await maker.create_queue(snd_secure=False) for _ in range(2)]
        fronts = front.router._fronts
        assert isinstance(fronts, handoff.Handoff)
        owner_held.hold()
        async with open_client(front.address) as client:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.subscribe, theirs[0])
                    await owner_held.reached.wait()
                    nursery.start_soon(client.send, theirs[1].sender_id, b"x")
                    await trio.sleep(0.3)  # a block read meanwhile would be handed off now
                    assert _window_to(fronts, 0).sent == 1
                    owner_held.released.set()


@pytest.mark.parametrize("gathered", [False, True])
async def test_a_push_does_not_overtake_the_own_answers_of_a_waiting_block(
        monkeypatch, gathered: bool) -> None:
    """A block that waits for its owner's answers (SUBs of a queue of the front's and of
    one of the owner's, then a PING; with `gathered`, first an LGET, which every worker
    answers): a MSG sent meanwhile to the front's queue comes after the SOK that
    subscribed it, as in one process, and the PONG still comes last."""
    owner_held = HeldOwner(monkeypatch)
    routed = _routed(monkeypatch)
    async with _mine_and_theirs() as (client, sender, mine, theirs):
        client.add_queue(mine)
        client.add_queue(theirs)
        owner_held.hold()
        asked = [(os.urandom(24), LGET(), None)] if gathered else []
        asked += [(q.recipient_id, SUB(), q.rcv_auth_seed) for q in (mine, theirs)]
        asked.append((b"", PING(), None))
        answers = []
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                async def subscribe() -> None:
                    answers.extend(await client.commands(asked))

                nursery.start_soon(subscribe)
                await owner_held.reached.wait()
                await sender.send(mine.sender_id, b"meanwhile")
                await trio.sleep(0.2)  # the MSG is made while the block waits
                owner_held.released.set()
            event = await client.next_event()
        assert isinstance(event, MessageEvent) and event.body == b"meanwhile"
        assert answers == [ERR(AUTH)] * gathered + [SOK(None), SOK(None), PONG()]
        ours = [tag for entity, tag in routed if entity == mine.recipient_id]
        assert ours[-2:] == [b"SOK", b"MSG"]
        assert [tag for _, tag in routed][-1] == b"PONG"
