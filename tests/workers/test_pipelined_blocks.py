"""A front reads a connection's next block while its last waits for other workers'
answers (docs/workers.md#pipelined-blocks): the next block's part goes to its owner
meanwhile; a command that names no queue (a PING) still follows every answer before
it; the answers go out together, as a block's do."""

from __future__ import annotations

import trio

from router.client import _connection, open_client
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers import handoff
from router.server.workers.in_process import workers_in_process

CONFIG = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)


class HeldOwner:
    """The owner's shadows answer no part until `release`."""

    def __init__(self, monkeypatch) -> None:  # type: ignore[no-untyped-def]
        self.reached, self.released = trio.Event(), trio.Event()
        answer_part = handoff.ShadowServing.process_block
        held = self

        async def held_back(self, client, block):  # type: ignore[no-untyped-def]
            held.reached.set()
            await held.released.wait()
            return await answer_part(self, client, block)

        monkeypatch.setattr(handoff.ShadowServing, "process_block", held_back)


async def _until(check) -> None:  # type: ignore[no-untyped-def]
    while not check():
        await trio.sleep(0.01)


async def test_the_next_blocks_part_goes_to_its_owner_while_the_last_waits(
        monkeypatch) -> None:
    owner_held = HeldOwner(monkeypatch)
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            theirs = [await maker.create_queue(snd_secure=False) for _ in range(2)]
        async with open_client(front.address) as client:
            mine = await client.create_queue(snd_secure=False)
            assert {Ownership(2, 0).owner_of(q.recipient_id) for q in theirs} == {0}
            assert Ownership(2, 0).owner_of(mine.recipient_id) == 1
            fronts = front.router._fronts
            assert isinstance(fronts, handoff.Handoff)
            answered: list[int] = []

            async def subscribe(n: int, queues: list) -> None:  # type: ignore[type-arg]
                assert not any(await client.subscribe_many(queues))
                answered.append(n)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(subscribe, 1, [theirs[0]])
                    await owner_held.reached.wait()
                    # A block of a queue of each worker's, the front's own answered at once.
                    nursery.start_soon(subscribe, 2, [mine, theirs[1]])
                    window = fronts._fronts[next(iter(fronts._fronts))].owner(0)
                    assert window is not None
                    # Without pipelining the front reads the second block only once the
                    # first is answered, which the held owner never does: this waits on.
                    await _until(lambda: window.sent == 2)
                    assert answered == []
                    owner_held.released.set()
            assert sorted(answered) == [1, 2]
            assert len(front.router.subscriptions) == 1
            # Every place given back once the owner answered.
            assert fronts._awaiting == {}
            assert fronts._awaiting_owners.value == handoff.BLOCKS_AWAITING_OWNERS


def _routed(monkeypatch) -> list[tuple[bytes, bytes]]:  # type: ignore[no-untyped-def]
    """What the clients get, each transmission's entity id and tag, in the order it came."""
    routed: list[tuple[bytes, bytes]] = []
    route = _connection.Connection._route

    async def recording(self, t):  # type: ignore[no-untyped-def]
        routed.append((t.entity_id, t.command.split(b" ")[0]))
        await route(self, t)

    monkeypatch.setattr(_connection.Connection, "_route", recording)
    return routed


async def test_a_message_does_not_overtake_the_answer_to_its_sub(monkeypatch) -> None:
    """A block in flight's own SOK waits for its owners' answers; a MSG sent meanwhile to
    that queue waits behind it."""
    owner_held = HeldOwner(monkeypatch)
    routed = _routed(monkeypatch)
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            theirs = await maker.create_queue(snd_secure=False)
        async with open_client(front.address) as client, open_client(
                front.address) as sender:
            mine = await client.create_queue(snd_secure=False)
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.subscribe_many, [mine, theirs])
                    await owner_held.reached.wait()
                    await sender.send(mine.sender_id, b"hello")
                    await trio.sleep(0.2)  # the MSG is made while the SOK of `mine` waits
                    owner_held.released.set()
                event = await client.next_event()
            assert event.body == b"hello"  # type: ignore[union-attr]
            assert routed.index((mine.recipient_id, b"SOK")) < routed.index(
                (mine.recipient_id, b"MSG"))


async def test_a_ping_follows_the_answers_of_the_blocks_before_it(monkeypatch) -> None:
    owner_held = HeldOwner(monkeypatch)
    routed = _routed(monkeypatch)
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            theirs = await maker.create_queue(snd_secure=False)
        async with open_client(front.address) as client:
            done: list[str] = []

            async def run(name: str, work) -> None:  # type: ignore[no-untyped-def]
                await work()
                done.append(name)

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(run, "SUB", lambda: client.subscribe(theirs))
                    await owner_held.reached.wait()
                    nursery.start_soon(run, "PING", client.ping)
                    await trio.sleep(0.3)  # a PONG that did not wait would be in by now
                    assert done == []
                    owner_held.released.set()
            assert sorted(done) == ["PING", "SUB"]
            assert [tag for _, tag in routed][-2:] == [b"SOK", b"PONG"]
