"""Many agents reconnecting to a restarted router at the same moment."""

from __future__ import annotations

import trio
from agent_helpers import EventLog, SecuredQueue, create_queues, restartable_router

from router.client import open_client
from router.client.agent import open_agent
from router.client.backoff import Backoff

FAST = Backoff(initial=0.01, maximum=0.5)


async def run_agent(
    address: str, queues: list[SecuredQueue], log: EventLog, stop: trio.Event
) -> None:
    async with open_agent(backoff=FAST) as agent, trio.open_nursery() as nursery:
        agent.add_queues(address, [q.queue for q in queues])
        nursery.start_soon(log.pump, agent, True)
        await stop.wait()
        nursery.cancel_scope.cancel()  # the agent itself closes its connection politely


async def agents_reconnect_together(tmp_path, n_agents: int, per_agent: int) -> None:
    async with restartable_router(tmp_path) as router:
        queues = await create_queues(router.address, n_agents * per_agent)
        shares = [queues[i * per_agent:(i + 1) * per_agent] for i in range(n_agents)]
        logs = [EventLog() for _ in shares]
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for share, log in zip(shares, logs, strict=True):
                nursery.start_soon(run_agent, router.address, share, log, stop)
            for share, log in zip(shares, logs, strict=True):
                await log.wait_all_up(q.rid for q in share)
            await router.restart()  # every agent loses its connection at once
            for share, log in zip(shares, logs, strict=True):
                await log.wait_all_up((q.rid for q in share), times=2)

            for share, log in zip(shares, logs, strict=True):
                assert all(log.history[q.rid] == ["UP", "DOWN", "UP"] for q in share)
            # Exactly one subscriber per queue: the connection of the agent that holds it.
            registry = router.info.router.subscriptions
            assert len(registry) == len(queues)
            owners = [{registry.subscriber_of(q.rid) for q in share} for share in shares]
            assert all(len(o) == 1 and None not in o for o in owners)
            assert len(set.union(*owners)) == n_agents
            assert router.info.router.statistics().connections == n_agents

            # And each agent receives what is sent to its own queues, nothing else.
            async with open_client(router.address) as sender:
                for q in queues:
                    await sender.send(q.queue.sender_id, q.rid, sender_seed=q.sender_seed)
            for share, log in zip(shares, logs, strict=True):
                await wait_messages(log, len(share))
                assert sorted(m.message.body for m in log.messages) == sorted(q.rid for q in share)
            stop.set()


async def wait_messages(log: EventLog, n: int) -> None:
    await log.progress.wait_until(lambda: len(log.messages) >= n)


async def test_two_hundred_agents_reconnecting_at_once_all_end_up_subscribed_one_per_queue(
    tmp_path,
):
    with trio.fail_after(300):
        await agents_reconnect_together(tmp_path, n_agents=200, per_agent=5)
