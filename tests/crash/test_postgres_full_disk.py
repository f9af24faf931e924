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
from collections.abc import Callable, Iterator
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


def _start_a_fresh_wal_segment(server: PostgresServer) -> None:
    """Switch PostgreSQL to a new WAL segment and have its file made now, before the
    filler takes the disk, so the writes while the disk is full have the segment's 16 MB
    (zero-filled when made: `wal_init_zero`) to log into.

    A segment's file is made only when the first record in it is flushed. Left to the
    senders (or to the WAL writer, which flushes their asynchronous commits and aborts),
    that raced the filler: under load the filler won, the process that then needed the
    segment stopped PostgreSQL (a PANIC, its documented answer to a WAL write that
    fails), and its crash recovery, which writes WAL too, failed on the full disk, so the
    postmaster shut down for good. That crash is test_postgres_restart.py's subject;
    here the database must run on, refusing only what does not fit.

    A checkpoint's record is flushed before CHECKPOINT returns, so the one after the
    switch makes the segment's file (a commit that wrote nothing else is flushed
    asynchronously: it would not).
    """
    walfile = "SELECT pg_walfile_name(pg_current_wal_flush_lsn())"
    with psycopg.connect(server.url, autocommit=True) as conn:
        before = conn.execute(walfile).fetchone()[0]
        conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
        after = conn.execute(walfile).fetchone()[0]
    segment = server.data / "pg_wal" / after
    assert after != before and segment.exists(), (
        f"PostgreSQL did not switch to a new WAL segment and make its file ({before} then "
        f"{after})"
    )


def _server_log(server: PostgresServer) -> str:
    return (server.dir / "log").read_text(errors="replace")


async def _wait_for(condition: Callable[[], bool], server: PostgresServer) -> None:
    """Until `condition` holds; a clear failure, with PostgreSQL's log, if the server
    stopped meanwhile (else the test would wait out its bound for a database that is
    gone)."""
    while not condition():
        if not (server.data / "postmaster.pid").exists():
            pytest.fail("PostgreSQL stopped; its log:\n" + _server_log(server)[-4000:])
        await trio.sleep(0.02)


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
                await _wait_for(lambda: history.count(Outcome.OK) >= 10, server)
                await trio.to_thread.run_sync(_start_a_fresh_wal_segment, server)
                filler = await trio.to_thread.run_sync(fill, disk)
                # each sender refused, a few times
                await _wait_for(lambda: len(refusals) >= 2 * SENDERS, server)
                ok_while_full = history.count(Outcome.OK)
                filler.unlink()
                # the same router, never restarted, takes messages again
                await _wait_for(lambda: history.count(Outcome.OK) >= ok_while_full + 10, server)
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
    panics = [line for line in _server_log(server).splitlines() if "PANIC" in line]
    assert panics == [], panics  # the database ran on: no crash, no recovery
    violations = check(history)
    assert violations == [], violations[:10]
    print(f"{history.count(Outcome.OK)} sends answered OK, {len(refusals)} refused while "
          f"the disk was full ({sorted(set(refusals))})")
