"""The headline design: a client costs the same few tasks however many queues it has."""

from __future__ import annotations

import pytest
import trio
from e2e_helpers import create_queues, router_connection, send_many

from router.client import open_client
from router.server import SINGLE_TASK

# An idle connection is its receive loop; its delivery task runs only while it has work.
IDLE_CONNECTION_TASKS, BUSY_CONNECTION_TASKS = 1, 2


@pytest.mark.scale
async def test_a_client_with_1000_busy_queues_has_as_many_router_tasks_as_one_with_1_queue(
    router_factory, delivery, store_kind
):
    # A small pending list makes most pushes wait in the deliveries map.
    info = await router_factory(send_queue_size=4)
    with trio.fail_after(60):
        async with (
            open_client(info.address) as many,
            open_client(info.address) as one,
            open_client(info.address) as sender,
        ):
            queues = await create_queues(many, 1000, subscribe=True)
            [single] = await create_queues(one, 1, subscribe=True)
            many_conn, one_conn = router_connection(info, many), router_connection(info, one)
            counts = [(many_conn.task_count(), one_conn.task_count())]
            await send_many(sender, [(q.sender_id, b"now") for q in [*queues, single]])
            counts.append((many_conn.task_count(), one_conn.task_count()))
            received = {(await many.next_event()).recipient_id for _ in queues}
            assert received == {q.recipient_id for q in queues}
            assert (await one.next_event()).recipient_id == single.recipient_id
            counts.append((many_conn.task_count(), one_conn.task_count()))
            if delivery == SINGLE_TASK:
                assert counts[0] == (IDLE_CONNECTION_TASKS, IDLE_CONNECTION_TASKS)
                assert all(
                    IDLE_CONNECTION_TASKS <= n <= BUSY_CONNECTION_TASKS
                    for pair in counts for n in pair
                ), counts
                if store_kind == "memory":
                    # memory-store SENDs of one block run without a checkpoint, so the
                    # 4-batch outbox overflows and the single delivery task does the rest
                    assert info.router.statistics().messages_deferred > 0
            else:
                # the design it replaces: one more task per subscribed queue
                assert counts[0] == (IDLE_CONNECTION_TASKS + 1000, IDLE_CONNECTION_TASKS + 1)
                assert all(
                    IDLE_CONNECTION_TASKS + queues <= n <= BUSY_CONNECTION_TASKS + queues
                    for pair in counts for n, queues in zip(pair, (1000, 1), strict=True)
                ), counts
            assert info.router.statistics().pending_deliveries == 0


async def test_connection_tasks_end_with_the_connection(router):
    with trio.fail_after(10):
        async with open_client(router.address) as client:
            await create_queues(client, 10, subscribe=True)
            conn = router_connection(router, client)
            assert conn.task_count() >= IDLE_CONNECTION_TASKS
        await conn.wait_closed()
        assert conn.task_count() == 0 and router.router.connection_task_counts() == {}
        stats = router.router.statistics()
        assert stats.connections == 0 and stats.subscriptions == 0
