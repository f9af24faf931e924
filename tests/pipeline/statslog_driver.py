"""Driving the stats log as a router would, without a router.

`CountingRouter` stands for what the log reads of a router: its counters and two
gauges. `jump_to` moves trio's MockClock (no autojump: the log writes on a worker
thread, which the autojump clock would take for idleness) once every task is
waiting and every worker thread has finished, so the log sees each boundary.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
import trio.testing

from router.server.core.counters import Counters, RouterStatistics


class CountingRouter:
    def __init__(self) -> None:
        self.counters = Counters()
        self.subscriptions = 0
        self.clients = 0

    def statistics(self) -> RouterStatistics:
        return self.counters.snapshot(
            connections=self.clients, subscriptions=self.subscriptions, pending_deliveries=0
        )


async def jump_to(clock: trio.testing.MockClock, wall: Callable[[], float], when: float) -> None:
    """Let the log finish what it is doing, then set the wall clock to `when`."""
    await trio.testing.wait_all_threads_completed()
    await trio.testing.wait_all_tasks_blocked()
    clock.jump(max(0.0, when - wall()))
    await trio.testing.wait_all_tasks_blocked()
