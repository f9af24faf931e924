"""The database's disk fills up while clients send: PostgreSQL's data directory is on a
small tmpfs that a filler file fills. Commands caught by it are answered `ERR STORE` (or
`ERR INTERNAL`), never `OK` for a write that was not committed; once the filler is
removed the same router, never restarted, serves again; and every message answered OK,
before, during and after, is delivered (the history checker of crash_history.py).

A test run's shared PostgreSQL is not used: this one has a server of its own, whose
data directory is the tmpfs (mounted as root, as CI and the test machines run).
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import trio
from crash_history import History, Outcome, check
from postgres_server import PostgresServer, schema_for
from small_disk import fill, mounted_tmpfs

from router.client import MessageEvent, RecipientQueue, SMPError, open_client
from router.server import RouterConfig, serve_router

TMPFS_SIZE = "96m"  # a fresh cluster (about 40 MB) and room for its WAL to grow a little
BODY = os.urandom(15000)  # a large message: each needs pages of its own (TOAST)
SENDERS = 3


@pytest.fixture
def small_disk_server(tmp_path: Path) -> Iterator[PostgresServer]:
    """A PostgreSQL whose data directory is on a tmpfs of TMPFS_SIZE, stopped after."""
    server = PostgresServer()
    disk = server.dir / "disk"
    disk.mkdir()
    owner = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    try:
        with mounted_tmpfs(disk, TMPFS_SIZE, f"mode=0700,uid={owner}"):
            server.data = disk / "data"
            try:
                server.start()
                yield server
            finally:
                server.stop()  # the server, and what of its directory is not the tmpfs
    finally:
        shutil.rmtree(server.dir, ignore_errors=True)


def _switch_wal(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        conn.execute("SELECT pg_switch_wal()")


async def _sender(address: str, queues: list[RecipientQueue], history: History, number: int,
                  refusals: list[str], stop: trio.Event) -> None:
    seq = itertools.count()
    async with open_client(address) as client:
        while not stop.is_set():
            queue = queues[next(seq) % len(queues)]
            body = b"sender %d message %d " % (number, next(seq)) + BODY
            send = history.send_started(queue.recipient_id, body, 1)
            try:
                await client.send(queue.sender_id, send.body)
            except SMPError as e:
                assert e.error.tag in ("STORE", "INTERNAL"), e.error
                refusals.append(str(e.error))
                if "disk is full" in str(e.error):
                    # the statement failed, so its transaction did not commit: refused
                    history.send_answered(send, Outcome.ERROR)
                # else in doubt (the connection broke), unanswered in the history
                await trio.sleep(0.02)
            else:
                history.send_answered(send, Outcome.OK)


async def test_a_full_database_disk_refuses_writes_and_serves_again_once_freed(
    tmp_path, small_disk_server
):
    server, history = small_disk_server, History()
    config = RouterConfig(
        host="127.0.0.1", port=0, quota=100_000, store="postgres", data_dir=tmp_path / "data",
        store_options={"db_connection": server.url, "db_schema": schema_for(tmp_path),
                       "db_pool_size": 4},
    )
    disk = server.data.parent
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            info = await nursery.start(serve_router, config)
            async with open_client(info.address) as setup:
                queues = [await setup.create_queue() for _ in range(4)]
            refusals: list[str] = []
            stop = trio.Event()
            async with trio.open_nursery() as senders:
                for number in range(SENDERS):
                    senders.start_soon(_sender, info.address, queues, history, number, refusals,
                                       stop)
                while history.count(Outcome.OK) < 10:
                    await trio.sleep(0.02)
                # A fresh WAL segment first: PostgreSQL stops (a PANIC) when it cannot
                # make the next one, a crash of the database that test_postgres_restart.py
                # covers; here the database runs on, refusing what does not fit.
                await trio.to_thread.run_sync(_switch_wal, server.url)
                filler = await trio.to_thread.run_sync(fill, disk)
                while len(refusals) < 2 * SENDERS:  # each sender refused, a few times
                    await trio.sleep(0.02)
                ok_while_full = history.count(Outcome.OK)
                filler.unlink()
                # the same router, never restarted, takes messages again
                while history.count(Outcome.OK) < ok_while_full + 10:
                    await trio.sleep(0.02)
                stop.set()
            async with open_client(info.address) as client:
                for queue in queues:
                    while (event := await client.get(queue)) is not None:
                        assert isinstance(event, MessageEvent), event
                        history.delivered(queue.recipient_id, event.msg_id, event.body, 1)
                        await client.ack(queue, event.msg_id)
                        history.acked(queue.recipient_id, event.msg_id)
            nursery.cancel_scope.cancel()
    assert "STORE database or disk is full" in refusals, refusals
    violations = check(history)
    assert violations == [], violations[:10]
    print(f"{history.count(Outcome.OK)} sends answered OK, {len(refusals)} refused while "
          f"the disk was full ({sorted(set(refusals))})")
