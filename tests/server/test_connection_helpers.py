"""A connection's helper tasks (core/connection.py): they run in a nursery shared by
the connections, end with their connection, and an error in one ends its own
connection only. Router end of `memory_block_pair`, no socket."""

from __future__ import annotations

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
