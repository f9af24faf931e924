"""The agent against the real router on a loopback port: subscribing, UP / DOWN,
reconnection after a restart, END / DELD, refused queues, groups."""

from __future__ import annotations

import pytest
import trio
from agent_helpers import (
    RESTART_KINDS,
    EventLog,
    create_queues,
    restartable_router,
    send_to,
)

from router.client import open_client
from router.client.agent import open_agent
from router.client.agent_state import (
    Connected,
    QueuesRemoved,
    QueueState,
    ReceivedMessage,
    RemovalReason,
)
from router.client.backoff import Backoff
from router.protocol.types import AUTH

FAST = Backoff(initial=0.01, maximum=0.2)


async def test_queues_added_to_the_agent_are_subscribed_and_each_reported_up_once(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            queues = await create_queues(router.address, 30)
            log = EventLog()
            async with open_agent(backoff=FAST, batch_size=7) as agent, trio.open_nursery() as n:
                n.start_soon(log.pump, agent)
                assert agent.add_queues(router.address, [q.queue for q in queues]) == 30
                assert agent.add_queues(router.address, [queues[0].queue]) == 0
                await log.wait_all_up(q.rid for q in queues)
                assert all(log.history[q.rid] == ["UP"] for q in queues)
                assert all(agent.state(q.rid) is QueueState.ACTIVE for q in queues)
                stats = agent.statistics()
                assert (stats.active, stats.pending, stats.connected) == (30, 0, 1)
                n.cancel_scope.cancel()


async def test_a_delivered_message_is_acknowledged_and_the_next_one_follows(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            [q] = await create_queues(router.address, 1)
            await send_to(router.address, q, b"first", b"second")
            async with open_agent(backoff=FAST) as agent:
                agent.add_queues(router.address, [q.queue])
                bodies = []
                async for event in agent.events():
                    if isinstance(event, ReceivedMessage):
                        bodies.append(event.message.body)
                        assert await agent.ack(event)
                        if len(bodies) == 2:
                            break
                assert bodies == [b"first", b"second"]


@pytest.mark.parametrize("kind", RESTART_KINDS)
async def test_after_a_router_restart_every_queue_goes_down_once_and_up_once(tmp_path, kind):
    with trio.fail_after(30):
        async with restartable_router(tmp_path, kind) as router:
            queues = await create_queues(router.address, 40)
            rids = [q.rid for q in queues]
            log = EventLog()
            async with open_agent(backoff=FAST, batch_size=16) as agent, trio.open_nursery() as n:
                n.start_soon(log.pump, agent)
                agent.add_queues(router.address, [q.queue for q in queues])
                await log.wait_all_up(rids)
                await router.restart()
                await log.wait_all_up(rids, times=2)
                assert all(log.history[r] == ["UP", "DOWN", "UP"] for r in rids)
                assert sum(isinstance(e, Connected) for e in log.events) == 2
                n.cancel_scope.cancel()


async def test_a_message_delivered_to_a_replaced_session_is_not_acknowledged_but_comes_again(
    tmp_path,
):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            [q] = await create_queues(router.address, 1)
            await send_to(router.address, q, b"only")
            async with open_agent(backoff=FAST) as agent:
                agent.add_queues(router.address, [q.queue])
                first = await _next_message(agent)
                await router.restart()
                again = await _next_message(agent)
                assert again.msg_id == first.msg_id and again.session != first.session
                assert not await agent.ack(first)  # the old session: not sent
                assert await agent.ack(again)
                await send_to(router.address, q, b"later")
                later = await _next_message(agent)
                assert later.message.body == b"later"


async def test_end_from_another_subscriber_removes_only_that_queue_from_the_set(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            taken, kept = await create_queues(router.address, 2)
            log = EventLog()
            async with open_agent(backoff=FAST) as agent, trio.open_nursery() as n:
                n.start_soon(log.pump, agent)
                agent.add_queues(router.address, [taken.queue, kept.queue])
                await log.wait_all_up([taken.rid, kept.rid])
                async with open_client(router.address) as other:
                    await other.subscribe(taken.queue)
                    await log.progress.wait_until(lambda: len(log.history[taken.rid]) == 2)
                removed = [e for e in log.events if isinstance(e, QueuesRemoved)]
                assert removed == [
                    QueuesRemoved(router.address, None, (taken.rid,), RemovalReason.ENDED)
                ]
                assert agent.state(kept.rid) is QueueState.ACTIVE
                # The router restarting does not bring the ended queue back.
                await router.restart()
                await log.wait_all_up([kept.rid], times=2)
                assert agent.state(taken.rid) is None
                assert log.history[taken.rid] == ["UP", "REMOVED:ended"]
                n.cancel_scope.cancel()


async def test_a_queue_deleted_by_its_owner_elsewhere_is_removed_as_deleted(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            [q] = await create_queues(router.address, 1)
            log = EventLog()
            async with open_agent(backoff=FAST) as agent, trio.open_nursery() as n:
                n.start_soon(log.pump, agent)
                agent.add_queues(router.address, [q.queue])
                await log.wait_all_up([q.rid])
                async with open_client(router.address) as owner:
                    await owner.delete(q.queue)
                await log.progress.wait_until(lambda: len(log.history[q.rid]) == 2)
                assert agent.state(q.rid) is None
                assert log.history[q.rid] == ["UP", "REMOVED:deleted"]
                n.cancel_scope.cancel()


async def test_a_queue_the_router_refuses_is_removed_with_the_error(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            gone, fine = await create_queues(router.address, 2)
            async with open_client(router.address) as owner:
                await owner.delete(gone.queue)
            log = EventLog()
            async with open_agent(backoff=FAST) as agent, trio.open_nursery() as n:
                n.start_soon(log.pump, agent)
                agent.add_queues(router.address, [gone.queue, fine.queue])
                await log.progress.wait_until(
                    lambda: log.history[gone.rid] and log.history[fine.rid]
                )
                assert agent.state(gone.rid) is None
                [removed] = [e for e in log.events if isinstance(e, QueuesRemoved)]
                assert removed.reason is RemovalReason.REFUSED and removed.error == AUTH
                assert removed.recipient_ids == (gone.rid,)
                n.cancel_scope.cancel()


async def test_queues_share_one_connection_per_router_unless_given_a_group(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            a, b, c, d = await create_queues(router.address, 4)
            log = EventLog()
            async with open_agent(backoff=FAST) as agent, trio.open_nursery() as n:
                n.start_soon(log.pump, agent)
                agent.add_queues(router.address, [a.queue, b.queue])
                agent.add_queues(router.address, [c.queue], group="billing")
                agent.add_queues(router.address, [d.queue], group="billing")
                await log.wait_all_up([a.rid, b.rid, c.rid, d.rid])
                assert router.info.router.statistics().connections == 2
                assert agent.statistics().sessions == 2
                with pytest.raises(ValueError):
                    agent.add_queues(router.address, [a.queue], group="billing")
                n.cancel_scope.cancel()


async def test_a_removed_queue_is_no_longer_reported(tmp_path):
    with trio.fail_after(20):
        async with restartable_router(tmp_path) as router:
            dropped, kept = await create_queues(router.address, 2)
            async with open_agent(backoff=FAST) as agent:
                agent.add_queues(router.address, [dropped.queue, kept.queue])
                assert agent.remove_queue(router.address, dropped.rid)
                assert not agent.remove_queue(router.address, dropped.rid)
                await send_to(router.address, dropped, b"unwanted")
                await send_to(router.address, kept, b"wanted")
                message = await _next_message(agent)
                assert message.recipient_id == kept.rid and message.message.body == b"wanted"
                assert agent.state(dropped.rid) is None


async def _next_message(agent) -> ReceivedMessage:
    while True:
        event = await agent.next_event()
        if isinstance(event, ReceivedMessage):
            return event
