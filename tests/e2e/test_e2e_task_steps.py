"""The data path's hand-offs: a delivered message costs the router two task
steps (docs/architecture.md, "The data path"): the sender's receive loop reads
the SEND and writes the MSG to the idle recipient's socket, and the recipient's
receive loop reads the ACK and answers it; no delivery task runs.

Counted with a trio instrument over a fixed, serial load (one message at a time,
so nothing is batched), on a real router on 127.0.0.1 with the memory store,
over WebSocket (ws://) and over native TLS (smp://), where the router does the
socket I/O itself. Only the tasks serving the two connections are counted, not
the router's timers nor the test's clients."""

from __future__ import annotations

from collections import Counter

import pytest
import trio
from e2e_helpers import create_queues, router_connection
from worker_count import serve_router_under_test

from router.client import open_client
from router.server import SINGLE_TASK, RouterConfig
from router.server.core.connection import Connection

WARM_UP = 20
MESSAGES = 200
STEPS_PER_MESSAGE = 2


class ConnectionTaskSteps(trio.abc.Instrument):
    """Steps taken by the tasks serving the given connections: the task that runs
    each one (its receive loop) and its helper tasks (the delivery task). The
    router's timers and the test's clients are not counted."""

    def __init__(self, connections: list[Connection]) -> None:
        self._connections = connections
        self._receivers = set()
        for conn in connections:
            assert conn.task_count() == 1  # idle: only its receive loop
            self._receivers.add(conn.receiving_task)
        self.by_task: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task in self._receivers or self._is_helper(task):
            self.by_task[task.name] += 1

    def _is_helper(self, task: trio.lowlevel.Task) -> bool:
        """A helper task of one of the connections (run in the router's nursery), from
        its very first step: before that step it has not yet registered itself."""
        frame = getattr(task.coro, "cr_frame", None)
        return (frame is not None and frame.f_code is Connection._helper.__code__
                and any(frame.f_locals.get("self") is conn for conn in self._connections))

    @property
    def steps(self) -> int:
        return sum(self.by_task.values())


async def deliver(sender, recipient, queue, n: int) -> None:
    for i in range(n):
        await sender.send(queue.sender_id, b"message %d" % i)
        event = await recipient.next_event()
        await recipient.ack(queue, event.msg_id)


@pytest.mark.one_process("the task steps of one process: a hand-off adds the channel's")
@pytest.mark.parametrize("transport", ["ws", "smp"])
async def test_a_delivered_message_costs_the_router_two_task_steps(nursery, transport):
    config = RouterConfig(host="127.0.0.1", port=0, store="memory", delivery=SINGLE_TASK)
    info = await nursery.start(serve_router_under_test, config)
    # ws:// (WebSocket) or smp:// (native TLS, docs/protocol.md#native-tls) on the one port
    url = info.url if transport == "ws" else info.address
    assert url.startswith(f"{transport}://")
    with trio.fail_after(60):
        async with (
            open_client(url, info.key_hash) as recipient,
            open_client(url, info.key_hash) as sender,
        ):
            [queue] = await create_queues(recipient, 1, subscribe=True)
            await deliver(sender, recipient, queue, WARM_UP)
            counter = ConnectionTaskSteps(
                [router_connection(info, recipient), router_connection(info, sender)]
            )
            trio.lowlevel.add_instrument(counter)
            try:
                await deliver(sender, recipient, queue, MESSAGES)
            finally:
                trio.lowlevel.remove_instrument(counter)
    assert info.router.statistics().messages_delivered == WARM_UP + MESSAGES
    print(f"router task steps per delivered message over {transport}://: "
          f"{counter.steps / MESSAGES:.2f}",
          dict(counter.by_task))
    assert counter.steps <= STEPS_PER_MESSAGE * MESSAGES, dict(counter.by_task)
