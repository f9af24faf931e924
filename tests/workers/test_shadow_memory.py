"""What a client whose queues spread over two workers costs beyond one worker's: its
shadow in the queue's worker and its front's bookkeeping
(docs/workers.md#costs-and-a-projection-to-16-cores). Two workers in one process
(`workers/in_process.py`), live Python bytes (tracemalloc)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager

import trio

from router.client import open_client
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.core.tasks import run_task_count
from router.server.workers.in_process import workers_in_process

CONFIG = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)
CLIENTS = 40
# Measured ~1.7 KB here (40 clients: the links' own buffers are a larger share; ~1.1-1.3
# KB at 400 in `python -m bench workers_shadow`, bench/RESULTS.md); 1.8 KB before a
# connection's pending list was made on use and a shadow's flags were bits of one slot;
# a shadow with a task of its own and the front's semaphores and dicts was ~7 KB. Some
# room: tracemalloc of a whole process, clients included, moves by a few bytes.
BUDGET = 2_200


@contextmanager
def _traced() -> Iterator[None]:
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(1)
    try:
        yield
    finally:
        if started:
            tracemalloc.stop()


async def _settled() -> int:
    """Live bytes once the work of the last commands is done."""
    await trio.sleep(0.2)
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_a_shadow_and_its_front_stay_within_their_bytes_and_keep_no_task() -> None:
    with _traced():
        async with workers_in_process(CONFIG) as (owner, front), AsyncExitStack() as stack:
            maker_owner = await stack.enter_async_context(open_client(owner.address))
            maker_front = await stack.enter_async_context(open_client(front.address))
            theirs = [await maker_owner.create_queue(snd_secure=False) for _ in range(CLIENTS)]
            mine = [await maker_front.create_queue(snd_secure=False)
                    for _ in range(2 * CLIENTS)]
            assert {Ownership(2, 0).owner_of(q.recipient_id) for q in theirs} == {0}
            assert {Ownership(2, 1).owner_of(q.recipient_id) for q in mine} == {1}
            clients = [await stack.enter_async_context(open_client(front.address))
                       for _ in range(CLIENTS)]
            # A subscription of the front's own first (each client's own structures made),
            # then one more of its own, then one of the other worker's: a shadow made.
            for client, queue in zip(clients, mine[:CLIENTS], strict=True):
                await client.subscribe(queue)
            warm = await _settled()
            for client, queue in zip(clients, mine[CLIENTS:], strict=True):
                await client.subscribe(queue)
            own = await _settled()
            tasks = run_task_count()
            for client, queue in zip(clients, theirs, strict=True):
                await client.subscribe(queue)
            spread = await _settled()
            assert owner.router.shadows == CLIENTS
            assert len(owner.router.subscriptions) == CLIENTS
            # An idle shadow is memory, no task (a few tasks more: the link between them).
            assert run_task_count() - tasks < CLIENTS // 4
            bookkeeping = ((spread - own) - (own - warm)) / CLIENTS
            assert 0 < bookkeeping < BUDGET, f"{bookkeeping:.0f} B per client and other worker"
