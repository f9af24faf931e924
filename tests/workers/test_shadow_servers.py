"""The worker's tasks that answer its shadows' parts (`handoff._ShadowServers`): a few
for the worker, reused from part to part, not a task started for each part; a
shadow whose part waits holds up no other shadow; one task at a time per shadow."""

from __future__ import annotations

from types import SimpleNamespace

import trio
import trio.testing

from router.client import open_client
from router.server import RouterConfig
from router.server.core.ownership import Ownership
from router.server.workers.handoff import _ShadowServers
from router.server.workers.in_process import workers_in_process

CONFIG = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)
PARTS = 60


class _TasksSpawned(trio.abc.Instrument):
    def __init__(self) -> None:
        self.count = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


async def test_parts_for_another_worker_are_answered_without_a_task_each() -> None:
    """Sequential commands of a client for queues of the other worker: each is a part
    to its shadow there, answered by the worker's serving tasks, not a task started
    per part (a task per part was ~8 us of each, bench/RESULTS.md)."""
    async with (
        workers_in_process(CONFIG) as (owner, front),
        open_client(owner.address) as maker,
        open_client(front.address) as client,
    ):
        queue = await maker.create_queue(snd_secure=False)
        assert Ownership(2, 0).owner_of(queue.sender_id) == 0
        await client.send(queue.sender_id, b"the shadow made")
        spawned = _TasksSpawned()
        trio.lowlevel.add_instrument(spawned)
        try:
            for n in range(PARTS):
                await client.send(queue.sender_id, b"%d" % n)
        finally:
            trio.lowlevel.remove_instrument(spawned)
        assert len(await maker.info(queue)) > 0
        # A few for the worker at most (a task was started for every part before).
        assert spawned.count < PARTS // 6, spawned.count


class _Shadow:
    """What `_ShadowServers` uses of a `ShadowTransport`: its `_serve_blocks`, and
    `release_answered` when that waits."""

    def __init__(self, name: str, log: list[str], gate: trio.Event | None = None) -> None:
        self.name, self._log, self._gate = name, log, gate
        self._ending = self.ended_by_front = False
        self.serving = 0

    async def _serve_blocks(self) -> None:
        self.serving += 1
        assert self.serving == 1, "one task at a time per shadow"
        self._log.append(f"{self.name} starts")
        if self._gate is not None:
            await self._gate.wait()
        self._log.append(f"{self.name} done")
        self.serving -= 1

    def release_answered(self) -> None:
        self._log.append(f"{self.name} waits")


async def test_a_shadow_that_waits_holds_up_no_other_and_the_tasks_fall_back() -> None:
    async with trio.open_nursery() as nursery:
        servers = _ShadowServers(SimpleNamespace(_nursery=nursery))  # type: ignore[arg-type]
        log: list[str] = []
        gate = trio.Event()
        waiting = _Shadow("waiting", log, gate)
        others = [_Shadow(f"other{n}", log) for n in range(3)]
        # Queued together (one read of the link): one task is called for them all.
        servers.queue(waiting)
        for shadow in others:
            servers.queue(shadow)
        await trio.testing.wait_all_tasks_blocked()
        assert log[0] == "waiting starts"
        assert [f"other{n} done" for n in range(3)] == [
            line for line in log if line.startswith("other") and line.endswith("done")]
        assert "waiting done" not in log
        assert "waiting waits" in log  # told, to send what it answered before waiting
        assert servers.tasks == 2  # one more, when the first one's shadow waited
        # Many shadows waiting at once: a task each, then back to a few idle ones.
        gates = [trio.Event() for _ in range(12)]
        for n, each in enumerate(gates):
            servers.queue(_Shadow(f"w{n}", log, each))
        await trio.testing.wait_all_tasks_blocked()
        assert servers.tasks >= 13
        gate.set()
        for each in gates:
            each.set()
        await trio.testing.wait_all_tasks_blocked()
        assert log.count("waiting done") == 1 and log[-1].endswith("done")
        assert servers.tasks == _ShadowServers.IDLE_KEPT
        # Idle tasks are reused: no task started for the next shadows.
        before = servers.tasks
        for n in range(3):
            servers.queue(_Shadow(f"again{n}", log))
            await trio.testing.wait_all_tasks_blocked()
        assert servers.tasks == before and log[-1] == "again2 done"
        nursery.cancel_scope.cancel()
