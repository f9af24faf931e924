"""The data path's hand-offs: a delivered message costs the router three task
steps (docs/architecture.md, "The data path"): the sender's receive loop reads
the SEND and leaves the MSG for the recipient, the recipient's delivery task
writes it, and the recipient's receive loop reads the ACK and answers it.

Counted with a trio instrument over a fixed, serial load (one message at a time,
so nothing is batched), on a real router on 127.0.0.1 with the memory store,
over WebSocket (ws://, where the router does the socket I/O itself). Only the
router's own tasks are counted, not the test's clients."""

from __future__ import annotations

from collections import Counter

import trio
from e2e_helpers import create_queues

from router.client import open_client
from router.server import SINGLE_TASK, RouterConfig, serve_router

WARM_UP = 20
MESSAGES = 200
STEPS_PER_MESSAGE = 3


class RouterTaskSteps(trio.abc.Instrument):
    """Steps taken by the router's tasks (named after the router's functions)."""

    def __init__(self) -> None:
        self.by_task: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith("router.server."):
            self.by_task[task.name] += 1

    @property
    def steps(self) -> int:
        return sum(self.by_task.values())


async def deliver(sender, recipient, queue, n: int) -> None:
    for i in range(n):
        await sender.send(queue.sender_id, b"message %d" % i)
        event = await recipient.next_event()
        await recipient.ack(queue, event.msg_id)


async def test_a_delivered_message_costs_the_router_three_task_steps(nursery):
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", delivery=SINGLE_TASK)
    info = await nursery.start(serve_router, config)
    with trio.fail_after(60):
        async with (
            open_client(info.url, info.key_hash) as recipient,
            open_client(info.url, info.key_hash) as sender,
        ):
            [queue] = await create_queues(recipient, 1, subscribe=True)
            await deliver(sender, recipient, queue, WARM_UP)
            counter = RouterTaskSteps()
            trio.lowlevel.add_instrument(counter)
            try:
                await deliver(sender, recipient, queue, MESSAGES)
            finally:
                trio.lowlevel.remove_instrument(counter)
    assert info.router.statistics().messages_delivered == WARM_UP + MESSAGES
    print(f"router task steps per delivered message: {counter.steps / MESSAGES:.2f}",
          dict(counter.by_task))
    assert counter.steps <= STEPS_PER_MESSAGE * MESSAGES, dict(counter.by_task)
