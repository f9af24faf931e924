"""On PostgreSQL a block's run of SENDs, or of ACKs, costs one database round trip
(dispatch.py, `Commands.send_run`, `ack_run`): counted here through a wrapper of the
connections the store's calls get, where a statement can also be made to fail.
The answers are those of the commands one by one, in their order; a failure
answers ERR STORE to exactly the commands whose transaction did not commit, and
those only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import trio
from postgres_server import router_store_settings
from smp_session import Queue, Session, connect

from router.protocol.block import BatchPacker
from router.protocol.types import (
    ACK,
    AUTH,
    ERR,
    MSG,
    OK,
    PING,
    PONG,
    QUOTA,
    SEND,
    SUB,
    store_error,
)
from router.server import Router, RouterConfig, open_router
from store.interfaces import MessageRuns
from store.memory.stores import MemoryMessageStore
from store.postgres.messages import PostgresMessageStore

BLOCK = 100  # commands per block, as the issue counts them
UNAVAILABLE = ERR(store_error("database unavailable"))


class RoundTrips:
    """Counts the statements (and a transaction's BEGIN and COMMIT) the stores' calls
    send; the `fail_at`th statement that writes messages (a SEND's or an ACK's) raises
    as a lost connection does, unsent."""

    def __init__(self, router: Router, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.writes = 0
        self.fail_at: int | None = None
        databases = {id(store.db): store.db for store in (router.queues, router.messages)}
        for db in databases.values():
            monkeypatch.setattr(db, "run", self._counting(db.run))

    def _counting(self, run: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(op: Callable[[Any], Any], *, transaction: bool = False) -> Any:
            if transaction:
                self.count += 2
            return await run(lambda conn: op(_Counted(conn, self)), transaction=transaction)

        return counted


class _Counted:
    def __init__(self, conn: psycopg.Connection, trips: RoundTrips) -> None:
        self._conn, self._trips = conn, trips

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        trips = self._trips
        trips.count += 1
        if any(name in str(query) for name in ("write_message", "delete_head")):
            trips.writes += 1
            if trips.writes == trips.fail_at:
                raise psycopg.OperationalError("the connection to the database was lost (test)")
        return self._conn.execute(query, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def _hold(config: RouterConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with open_router(config) as router:
        task_status.started(router)
        await trio.sleep_forever()


@pytest.fixture
async def router(nursery: trio.Nursery, tmp_path) -> Router:
    config = RouterConfig(quota=3, **router_store_settings("postgres", tmp_path / "router"))
    return await nursery.start(_hold, config)


def _block(session: Session, requests: list[tuple[bytes, object, bytes | None]]) -> bytes:
    packer = BatchPacker()
    for request in requests:
        assert packer.add(session.transmission(*request)), "one block holds them all"
    return packer.take_block()


async def _answers(session: Session, count: int) -> list[object]:
    """The responses of the next `count` transmissions with a corrId, in order."""
    answers: list[object] = []
    while len(answers) < count:
        for reply in await session.receive():
            if reply.corr_id:
                answers.append(reply.response)
    return answers


def _sends(queues: list[Queue], body: bytes = b"x") -> list[tuple[bytes, object, None]]:
    return [(q.sender_id, SEND(b"F", body), None) for q in queues]


async def _stored(router: Router, queues: list[Queue]) -> list[int]:
    return [await router.messages.queue_size(q.recipient_id) for q in queues]


async def test_a_block_of_sends_is_one_round_trip_after_its_lookups(router, monkeypatch):
    """Its queues' records are read in one round trip (pass 1, dispatch.py), its
    messages written in one."""
    with trio.fail_after(60):
        async with connect(router) as session:
            queues = await session.create_queues(BLOCK)
            trips = RoundTrips(router, monkeypatch)
            await session.send_block(_block(session, _sends(queues)))
            assert await _answers(session, BLOCK) == [OK()] * BLOCK
            sends = trips.count
        assert sends == 2, sends  # the records of its sender ids, then its writes
        assert await _stored(router, queues) == [1] * BLOCK


async def _delivered(session, sender, queues) -> dict[bytes, bytes]:
    """One message sent to each of `queues` and subscribed: recipient id -> its MSG's id."""
    await sender.commands(_sends(queues))
    await session.commands([(q.recipient_id, SUB(), q.rcv_seed) for q in queues])
    delivered = {}
    for _ in queues:
        event = await session.next_event()
        assert isinstance(event.response, MSG)
        delivered[event.entity_id] = event.response.msg_id
    return delivered


async def test_a_block_of_acks_is_one_round_trip_after_its_lookups(router, monkeypatch):
    with trio.fail_after(60):
        async with connect(router) as session, connect(router) as sender:
            queues = await session.create_queues(BLOCK)
            delivered = await _delivered(session, sender, queues)
            trips = RoundTrips(router, monkeypatch)
            await session.send_block(_block(session, [
                (q.recipient_id, ACK(delivered[q.recipient_id]), q.rcv_seed) for q in queues]))
            assert await _answers(session, BLOCK) == [OK()] * BLOCK
            acks = trips.count
        assert acks == 2, acks  # the records of its queues, then its deletes
        assert await _stored(router, queues) == [0] * BLOCK


async def test_a_run_answers_as_the_commands_one_by_one(router, monkeypatch):
    """SENDs to one queue past its quota (3), to a queue that does not exist, and
    around a PING: the same answers, and the same messages stored, with the runs and
    with every SEND alone."""
    with trio.fail_after(60):
        answers = []
        async with connect(router) as session:
            for runs in (True, False):
                if not runs:
                    monkeypatch.setattr(router.dispatcher, "_store_runs", {})
                one, two = await session.create_queues(2)
                requests = [*_sends([one] * 5), (b"", PING(), None), *_sends([two, one]),
                            (b"\x01" * 24, SEND(b"F", b"x"), None), *_sends([two])]
                await session.send_block(_block(session, requests))
                answers.append(await _answers(session, len(requests)))
                assert await _stored(router, [one, two]) == [4, 2]  # 3 and the QUOTA marker
        assert answers[0] == answers[1]
        # A queue that does not exist fails verification: its AUTH comes first (pass 1).
        assert answers[0] == [ERR(AUTH), OK(), OK(), OK(), ERR(QUOTA), ERR(QUOTA), PONG(),
                              OK(), ERR(QUOTA), OK()]


async def test_a_failure_mid_block_fails_exactly_the_uncommitted_sends(router, monkeypatch):
    with trio.fail_after(60):
        async with connect(router) as session:
            queues = await session.create_queues(BLOCK)
            await session.commands(_sends(queues))
            half = BLOCK // 2
            trips = RoundTrips(router, monkeypatch)
            trips.fail_at = 2  # the second run's statement: the first one committed
            requests = [*_sends(queues[:half]), (b"", PING(), None), *_sends(queues[half:])]
            await session.send_block(_block(session, requests))
            assert await _answers(session, len(requests)) == (
                [OK()] * half + [PONG()] + [UNAVAILABLE] * (BLOCK - half))
        assert await _stored(router, queues) == [2] * half + [1] * (BLOCK - half)


async def test_a_failure_mid_block_fails_exactly_the_uncommitted_acks(router, monkeypatch):
    """The ACKs that failed leave their messages in flight: ACKed again, they go."""
    with trio.fail_after(60):
        async with connect(router) as session, connect(router) as sender:
            queues = await session.create_queues(BLOCK)
            delivered = await _delivered(session, sender, queues)
            acks = [(q.recipient_id, ACK(delivered[q.recipient_id]), q.rcv_seed)
                    for q in queues]
            half = BLOCK // 2
            trips = RoundTrips(router, monkeypatch)
            trips.fail_at = 2
            await session.send_block(_block(session, [*acks[:half], (b"", PING(), None),
                                                      *acks[half:]]))
            assert await _answers(session, BLOCK + 1) == (
                [OK()] * half + [PONG()] + [UNAVAILABLE] * (BLOCK - half))
            assert await _stored(router, queues) == [0] * half + [1] * (BLOCK - half)
            await session.send_block(_block(session, acks[half:]))
            assert await _answers(session, BLOCK - half) == [OK()] * (BLOCK - half)
        assert await _stored(router, queues) == [0] * BLOCK


def test_only_the_postgres_store_writes_runs():
    """The router gives the dispatcher runs of SENDs and ACKs for a store that writes
    a run in one call (router.py); the others' commands each write alone."""
    assert isinstance(object.__new__(PostgresMessageStore), MessageRuns)
    assert not isinstance(MemoryMessageStore(), MessageRuns)
