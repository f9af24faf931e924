"""A subscriber that ACKs every MSG while another client sends pipelined SENDs
receives every message without subscribing again, on every store and fsync policy.

On a store where a write becomes visible only at its commit (the journal's group
commit), an ACK that arrives between a SEND's write and its commit finds the
queue empty; the message must still be pushed once the commit makes it visible.
"""

from __future__ import annotations

import pytest
import trio
from smp_session import Queue, Session, connect

from router.protocol.types import ACK, MSG, OK, SEND, SUB

FSYNC_POLICIES = ["never", "batch", "always"]
PIPELINE = 20  # SENDs per block, as a client that pipelines would send them
# A pushed MSG follows its trigger within milliseconds; this long without one is a stall.
STALL_SECONDS = 10


async def _send_pipelined(sender: Session, sender_ids: list[bytes], per_queue: int) -> None:
    requests = [
        (sid, SEND(b"F", b"%d" % i), None) for i in range(per_queue) for sid in sender_ids
    ]
    for start in range(0, len(requests), PIPELINE):
        responses = await sender.commands(requests[start : start + PIPELINE])
        assert all(isinstance(r, OK) for r in responses), responses


async def _receive_acking(
    recipient: Session, queues: dict[bytes, Queue], expected: int
) -> dict[bytes, list[bytes]]:
    """ACK every MSG as it comes until `expected` messages arrived; the bodies per queue."""
    received: dict[bytes, list[bytes]] = {rid: [] for rid in queues}
    for n in range(expected):
        event = None
        with trio.move_on_after(STALL_SECONDS):
            event = await recipient.next_event()
        if event is None:
            pytest.fail(f"{expected - n} of {expected} messages were never pushed")
        assert isinstance(event.response, MSG), event
        q = queues[event.entity_id]
        body = q.open(event.response)
        assert not body.quota, body
        received[event.entity_id].append(body.body)
        assert await recipient.recipient(q, ACK(event.response.msg_id)) == OK()
    return received


async def _burst(router, n_queues: int, per_queue: int) -> None:
    async with connect(router) as recipient, connect(router) as sender:
        queues = {q.recipient_id: q for q in await recipient.create_queues(n_queues)}
        subs = [(q.recipient_id, SUB(), q.rcv_seed) for q in queues.values()]
        assert set(await recipient.commands(subs)) == {OK()}
        sender_ids = [q.sender_id for q in queues.values()]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_pipelined, sender, sender_ids, per_queue)
            received = await _receive_acking(recipient, queues, n_queues * per_queue)
        expected = [b"%d" % i for i in range(per_queue)]
        assert all(bodies == expected for bodies in received.values())
        assert await recipient.no_more_events()


@pytest.mark.parametrize("fsync", FSYNC_POLICIES)
async def test_an_acking_subscriber_of_many_queues_gets_every_pipelined_message(
    router_factory, fsync
):
    router = await router_factory(fsync=fsync, quota=1000)
    with trio.fail_after(120):
        await _burst(router, n_queues=25, per_queue=40)


@pytest.mark.parametrize("fsync", FSYNC_POLICIES)
async def test_an_acking_subscriber_of_one_queue_gets_every_pipelined_message(
    router_factory, fsync
):
    router = await router_factory(fsync=fsync, quota=1000)
    with trio.fail_after(120):
        await _burst(router, n_queues=1, per_queue=300)
