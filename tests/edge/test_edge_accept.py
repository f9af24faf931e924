"""The accept loop takes every connection waiting in the backlog when it wakes up,
not one per pass of the scheduler: on a router busy with thousands of connections a
pass is long, and a reconnecting crowd would wait in the kernel, retrying."""

from __future__ import annotations

import socket

import trio
from edge_helpers import listener, running_router

WAITING = 20


class _SchedulerPasses(trio.abc.Instrument):
    """The pass of the scheduler in which each connection's task was started."""

    def __init__(self) -> None:
        self.passes = 0
        self.started_in: list[int] = []

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("._serve_socket"):
            self.started_in.append(self.passes)


async def test_every_connection_waiting_in_the_backlog_is_taken_in_one_wake_up():
    async with running_router() as info:
        edge = listener(info)
        # Connected without a checkpoint: the router's loop has not run since, so
        # every one of them waits in the listening socket's backlog.
        clients = [socket.create_connection(("127.0.0.1", edge.port)) for _ in range(WAITING)]
        passes = _SchedulerPasses()
        trio.lowlevel.add_instrument(passes)
        try:
            with trio.fail_after(10):
                while edge.open_connections < WAITING:
                    await trio.sleep(0.01)
        finally:
            trio.lowlevel.remove_instrument(passes)
            for client in clients:
                client.close()
        assert len(passes.started_in) == WAITING
        assert len(set(passes.started_in)) == 1, passes.started_in
