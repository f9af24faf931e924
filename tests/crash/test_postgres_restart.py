"""The database crashes under load: PostgreSQL is restarted with `pg_ctl restart -m
immediate` (a crash: no checkpoint, no goodbye to its clients) while senders send and
a subscribed recipient receives and acknowledges, through a router on the postgres
store that keeps running. The router must answer the commands caught by the crash
with an error, never crash itself, serve again by itself once the database is back,
and lose nothing it answered OK (the history checker of crash_history.py, over the
whole run and a final drain).

A SEND answered `ERR STORE` while the database went away is in doubt, not refused:
its commit may have reached the disk before the connection broke (PostgreSQL's
answer to the commit was lost with it), so the history records it as unanswered.
"""

from __future__ import annotations

import itertools
import random

import pytest
import trio
from crash_history import History, Outcome, check
from postgres_server import router_store_settings, shared_server

from router.client import (
    ConnectionClosed,
    MessageEvent,
    RecipientQueue,
    SMPError,
    open_client,
)
from router.server import RouterConfig, serve_router

RESTARTS = 5  # the count: a restart costs a few seconds, the test about half a minute
STRESS_RESTARTS = 20


async def _sender(address: str, queues: list[RecipientQueue], history: History, number: int,
                  rng: random.Random, stop: trio.Event) -> None:
    seq = itertools.count()
    while not stop.is_set():
        try:
            async with open_client(address) as client:
                while not stop.is_set():
                    queue = rng.choice(queues)
                    body = b"sender %d message %d" % (number, next(seq))
                    send = history.send_started(queue.recipient_id, body, 1)
                    try:
                        await client.send(queue.sender_id, send.body)
                    except SMPError as e:
                        assert e.error.tag in ("STORE", "INTERNAL"), e.error
                        await trio.sleep(0.05)  # in doubt: stays unanswered in the history
                    else:
                        history.send_answered(send, Outcome.OK)
        except ConnectionClosed:
            await trio.sleep(0.1)  # the last send stays in doubt; connect again


async def _recipient(address: str, queues: list[RecipientQueue], history: History) -> None:
    """Subscribed to every queue, acknowledging what it gets; when the router drops the
    connection (a delivery that failed in the store), it connects and subscribes again,
    as a client would."""
    by_id = {q.recipient_id: q for q in queues}
    while True:
        try:
            async with open_client(address) as client:
                pending = list(queues)
                while pending:
                    errors = await client.subscribe_many(pending)
                    for error in errors:
                        assert error is None or error.tag in ("STORE", "INTERNAL"), error
                    pending = [q for q, error in zip(pending, errors, strict=True) if error]
                    if pending:
                        await trio.sleep(0.1)
                while True:
                    event = await client.next_event()
                    assert isinstance(event, MessageEvent), event
                    history.delivered(event.recipient_id, event.msg_id, event.body, 1)
                    try:
                        await client.ack(by_id[event.recipient_id], event.msg_id)
                    except SMPError as e:
                        assert e.error.tag in ("STORE", "INTERNAL", "NO_MSG"), e.error
                    else:
                        history.acked(event.recipient_id, event.msg_id)
        except ConnectionClosed:
            await trio.sleep(0.1)


async def _drain(address: str, queues: list[RecipientQueue], history: History) -> None:
    async with open_client(address) as client:
        for queue in queues:
            while (event := await client.get(queue)) is not None:
                assert isinstance(event, MessageEvent), event
                history.delivered(queue.recipient_id, event.msg_id, event.body, 2)
                await client.ack(queue, event.msg_id)
                history.acked(queue.recipient_id, event.msg_id)


async def restart_under_load(tmp_path, restarts: int) -> None:
    server, rng, history = shared_server(), random.Random(), History()
    config = RouterConfig(host="127.0.0.1", port=0, quota=100_000,
                          **router_store_settings("postgres", tmp_path / "data"))
    with trio.fail_after(60 + 30 * restarts):
        async with trio.open_nursery() as nursery:
            info = await nursery.start(serve_router, config)
            async with open_client(info.address) as setup:
                queues = [await setup.create_queue() for _ in range(4)]
            stop = trio.Event()
            answered: list[int] = []  # sends answered OK before each crash, and after the last
            async with trio.open_nursery() as clients:
                clients.start_soon(_recipient, info.address, queues, history)
                for number in range(3):
                    clients.start_soon(_sender, info.address, queues, history, number, rng, stop)
                for _ in range(restarts + 1):
                    # the router serves (again, by itself): new sends are answered OK
                    served = history.count(Outcome.OK)
                    while history.count(Outcome.OK) < served + 20:
                        await trio.sleep(0.05)
                    answered.append(history.count(Outcome.OK) - served)
                    if len(answered) <= restarts:
                        await trio.sleep(rng.uniform(0, 0.3))  # the random moment of the crash
                        await trio.to_thread.run_sync(server.restart)
                stop.set()
                await trio.sleep(0.5)
                clients.cancel_scope.cancel()
            await _drain(info.address, queues, history)
            nursery.cancel_scope.cancel()
    violations = check(history)
    summary = (f"{restarts} restarts, {history.count(Outcome.OK)} sends answered OK, "
               f"{history.count(Outcome.UNKNOWN)} in doubt, {len(history.deliveries)} deliveries")
    assert violations == [], f"{summary}; first violations: {violations[:10]}"
    print(f"{summary}; answered OK after each start of the database: {answered}")


async def test_five_database_crashes_under_load_lose_nothing_answered_ok(tmp_path):
    await restart_under_load(tmp_path, RESTARTS)


@pytest.mark.stress
async def test_twenty_database_crashes_under_load_lose_nothing_answered_ok(tmp_path):
    await restart_under_load(tmp_path, STRESS_RESTARTS)


async def test_the_client_connection_survives_a_database_crash(tmp_path):
    """One client across a crash: its commands fail while the database is away, then
    work again on the same connection."""
    config = RouterConfig(host="127.0.0.1", port=0,
                          **router_store_settings("postgres", tmp_path / "data"))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            info = await nursery.start(serve_router, config)
            try:
                async with open_client(info.address) as client:
                    queue = await client.create_queue()
                    await client.send(queue.sender_id, b"before")
                    await trio.to_thread.run_sync(shared_server().restart)
                    while True:
                        try:
                            await client.send(queue.sender_id, b"after")
                            break
                        except SMPError as e:
                            assert e.error.tag in ("STORE", "INTERNAL"), e.error
                            await trio.sleep(0.1)
                    bodies = []
                    while (event := await client.get(queue)) is not None:
                        bodies.append(event.body)
                        await client.ack(queue, event.msg_id)
                    assert bodies == [b"before", b"after"]
            except ConnectionClosed:
                pytest.fail("the router closed the client's connection over a database crash")
            nursery.cancel_scope.cancel()
