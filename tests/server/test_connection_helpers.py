"""A connection's helper tasks (core/connection.py): they run in a nursery shared by
the connections, end with their connection, and an error in one ends its own
connection only. Router end of `memory_block_pair`, no socket."""

from __future__ import annotations

import threading

import trio

from router.server.core.connection import Connection
from router.server.edge.handshake import Handshake
from router.server.edge.transports import memory_block_pair


class QuietHandler:
    """Answers nothing; its delivery work is `delivery`, if set."""

    def __init__(self, delivery=None) -> None:
        self.delivery = delivery

    async def process_block(self, client: object, block: bytes) -> list[bytes]:
        return []

    async def delivery_loop(self, client: object) -> None:
        if self.delivery is not None:
            await self.delivery()

    def answered(self, client: object) -> None:
        pass


def new_connection(conn_id: int):
    client, served = memory_block_pair()
    handshake = Handshake(10, bytes([conn_id]) * 32, None)
    return client, Connection(conn_id, served, handshake, 4)


async def test_an_error_in_a_helper_ends_its_connection_not_the_others():
    async def fail() -> None:
        raise RuntimeError("a bug in delivery")

    _client, failing = new_connection(1)
    _other_client, other = new_connection(2)
    async with trio.open_nursery() as helpers:
        helpers.start_soon(_serve, other, helpers)
        with trio.fail_after(5), trio.CancelScope() as scope:
            helpers.start_soon(_wake_soon, failing)
            await failing.run(QuietHandler(fail), None, scope, helpers)
        assert scope.cancelled_caught
        assert failing.close_reason == "internal error"
        assert failing.task_count() == 0
        await trio.testing.wait_all_tasks_blocked()
        assert other.task_count() == 1  # still serving
        other.close_now("test over")
    assert other.task_count() == 0


async def test_a_connection_that_ends_cancels_its_helpers_and_waits_for_them():
    ended: list[str] = []

    async def forever() -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(0.05)  # still running when the receive loop ends
            ended.append("helper")

    client, conn = new_connection(3)
    async with trio.open_nursery() as helpers:
        with trio.fail_after(5), trio.CancelScope() as scope:
            helpers.start_soon(_spawn_then_leave, conn, client, forever)
            await conn.run(QuietHandler(), None, scope, helpers)
        assert ended == ["helper"]  # gone before run() returned
        assert conn.task_count() == 0
        assert not scope.cancelled_caught  # the client left: nothing was cancelled


def test_a_helper_the_stopped_router_cannot_start_ends_its_connection():
    """At the router's stop its nursery ends before the connections do; a connection
    that then wants its delivery task ends instead of waiting for a task that never
    runs (which kept `smp-router serve` from exiting on SIGTERM). Run in a thread of
    its own, so that a wait for ever fails this test instead of hanging it."""

    async def scenario() -> tuple[str | None, int]:
        async with trio.open_nursery() as stopped:
            pass  # ended: it takes no new task, as the router's at its stop
        _client, conn = new_connection(4)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_wake_soon, conn)
            with trio.CancelScope() as scope:
                await conn.run(QuietHandler(), None, scope, stopped)
        return conn.close_reason, conn.task_count()

    outcome: list[tuple[str | None, int]] = []
    thread = threading.Thread(target=lambda: outcome.append(trio.run(scenario)), daemon=True)
    thread.start()
    thread.join(10)
    assert outcome == [("the router is stopping", 0)]


async def _serve(conn: Connection, helpers: trio.Nursery) -> None:
    with trio.CancelScope() as scope:
        await conn.run(QuietHandler(), None, scope, helpers)


async def _wake_soon(conn: Connection) -> None:
    await trio.testing.wait_all_tasks_blocked()
    conn.wake_delivery()


async def _spawn_then_leave(conn: Connection, client, fn) -> None:
    await trio.testing.wait_all_tasks_blocked()
    conn.spawn(fn)
    await trio.testing.wait_all_tasks_blocked()
    assert conn.task_count() == 2
    await client.aclose()
