"""A shadow's task lingers between the parts of an active client rather than being
started for each, and still ends: once the shadow is idle, and at once when it ends
(docs/workers.md#hand-offs-in-blocks, "A shadow is served on demand"). Two workers in
one process (`workers/in_process.py`)."""

from __future__ import annotations

import trio

from router.client import MessageEvent, open_client
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers import handoff
from router.server.workers.in_process import workers_in_process

CONFIG = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)
ROUNDS = 40


class _ShadowTasks(trio.abc.Instrument):
    """Counts the tasks that serve shadows: started, and alive."""

    def __init__(self) -> None:
        self.started = self.alive = 0

    @staticmethod
    def _serves_a_shadow(task: trio.lowlevel.Task) -> bool:
        return task.name.endswith("ShadowTransport._serve_blocks")

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if self._serves_a_shadow(task):
            self.started += 1
            self.alive += 1

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        if self._serves_a_shadow(task):
            self.alive -= 1


async def test_an_active_client_s_parts_are_answered_by_one_task_per_shadow() -> None:
    """A sender and a recipient on the front, their queue in the other worker: each
    SEND and each ACK is a part handed to a shadow, answered by the shadow's one
    lingering task rather than by a task started per part (two per message before)."""
    tasks = _ShadowTasks()
    async with workers_in_process(CONFIG) as (owner, front):
        async with open_client(owner.address) as maker:
            queue = await maker.create_queue(snd_secure=False)
        assert Ownership(2, 0).owner_of(queue.recipient_id) == 0
        async with open_client(front.address) as sender, open_client(front.address) as recipient:
            await recipient.subscribe(queue)
            trio.lowlevel.add_instrument(tasks)
            try:
                with trio.fail_after(30):
                    for n in range(ROUNDS):
                        await sender.send(queue.sender_id, b"%d" % n)
                        event = await recipient.next_event()
                        assert isinstance(event, MessageEvent) and event.body == b"%d" % n
                        await recipient.ack(queue, event.msg_id)
            finally:
                trio.lowlevel.remove_instrument(tasks)
    # Two shadows (the sender's, the recipient's), each a task while active; a machine
    # slower than SHADOW_LINGER between two of a client's blocks starts one more.
    assert 0 < tasks.started < ROUNDS // 4, tasks.started


async def test_a_lingering_task_ends_with_its_shadow_and_once_idle(monkeypatch) -> None:
    """The front's client leaves while its shadow's task waits for a block: the
    shadow is taken apart and its task gone without waiting out SHADOW_LINGER. And a
    shadow left idle has no task once SHADOW_LINGER has passed."""
    tasks = _ShadowTasks()
    monkeypatch.setattr(handoff, "SHADOW_LINGER", 0.2)
    trio.lowlevel.add_instrument(tasks)
    try:
        async with workers_in_process(CONFIG) as (owner, front):
            async with open_client(owner.address) as maker:
                queues = [await maker.create_queue(snd_secure=False) for _ in range(2)]
            async with open_client(front.address) as idle:
                await idle.subscribe(queues[0])
                with trio.fail_after(30):
                    while tasks.alive:  # ends within two sweeps
                        await trio.sleep(0.05)
                assert owner.router.shadows == 1
                monkeypatch.setattr(handoff, "SHADOW_LINGER", 3600.0)
                async with open_client(front.address) as leaving:
                    await leaving.subscribe(queues[1])
                    assert tasks.alive == 1 and owner.router.shadows == 2
                with trio.fail_after(30):  # far less than SHADOW_LINGER
                    while owner.router.shadows > 1 or tasks.alive:
                        await trio.sleep(0.01)
    finally:
        trio.lowlevel.remove_instrument(tasks)
