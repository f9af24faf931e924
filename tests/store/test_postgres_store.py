"""What the PostgreSQL backend promises beyond the shared contract: batch reads in one
query, services' kept counts and ids hashes, RKEY's keys, writes correct under
concurrency, its schema's versions and lock, soft delete, bulk import by COPY, and
errors when the database goes away."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from functools import reduce

import psycopg
import pytest
import trio
from postgres_server import PostgresServer, schema_for, shared_server

import store.postgres.database
from router.protocol.types import AUTH
from store import migrate_store, open_stores, read_store_kind
from store.interfaces import (
    EMPTY_IDS_HASH,
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    ServiceQueues,
    ServiceRecord,
    StoreError,
    WriteResult,
)
from store.postgres.database import (
    DatabaseUnavailable,
    PostgresDatabase,
    SchemaLocked,
    SchemaTooNew,
)
from store.postgres.messages import PostgresMessageStore
from store.postgres.queues import PostgresQueueStore, open_queue_store
from store.postgres.schema import SCHEMA_VERSION


def new_id() -> bytes:
    return os.urandom(24)


def record(**changes) -> QueueRecord:
    rec = QueueRecord(new_id(), new_id(), os.urandom(44), os.urandom(32), None, True)
    return replace(rec, **changes)


def msg(ts: int = 1, size: int = 10) -> Message:
    return Message(new_id(), ts, b"T", os.urandom(size))


def ids_hash(ids) -> bytes:
    digests = [hashlib.md5(i).digest() for i in ids]
    return reduce(lambda a, b: bytes(x ^ y for x, y in zip(a, b, strict=True)), digests,
                  EMPTY_IDS_HASH)


@pytest.fixture
def schema(tmp_path) -> str:
    return schema_for(tmp_path)


@pytest.fixture
async def db(schema) -> AsyncIterator[PostgresDatabase]:
    database = PostgresDatabase(shared_server().url, schema=schema, pool_size=4)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def queues(db) -> PostgresQueueStore:
    return await open_queue_store(db)


@pytest.fixture
def messages(db) -> PostgresMessageStore:
    return PostgresMessageStore(db)


# --- batch reads --------------------------------------------------------------------


async def test_a_block_of_lookups_is_one_query_in_the_order_given(db, queues):
    recs = [record(notifier=NotifierCreds(new_id(), os.urandom(44), os.urandom(32)))
            for _ in range(5)]
    for rec in recs:
        assert await queues.add_queue(rec) is None
    missing = new_id()
    for party, key in (
        (Party.RECIPIENT, lambda r: r.recipient_id),
        (Party.SENDER, lambda r: r.sender_id),
        (Party.NOTIFIER, lambda r: r.notifier.notifier_id),
    ):
        asked = [key(recs[3]), missing, key(recs[0]), key(recs[3])]
        before = db.calls
        assert await queues.get_queues(party, asked) == [recs[3], None, recs[0], recs[3]]
        assert db.calls - before == 1


async def test_a_block_of_peeks_is_one_query_giving_each_queues_oldest_message(db, messages):
    rids = [new_id() for _ in range(4)]
    firsts = {}
    for i, rid in enumerate(rids[:3]):
        for j in range(i + 1):
            m = msg(ts=j)
            firsts.setdefault(rid, m)
            await messages.write_message(rid, m, 128)
    before = db.calls
    heads = await messages.peek_messages([rids[2], rids[3], rids[0], rids[1]])
    assert db.calls - before == 1
    assert heads == [firsts[rids[2]], None, firsts[rids[0]], firsts[rids[1]]]


# --- services -------------------------------------------------------------------------


def service(role: bytes = b"M", cert: bytes | None = None) -> ServiceRecord:
    cert = cert or os.urandom(300)
    return ServiceRecord(new_id(), role, cert, hashlib.sha256(cert).digest(), 1_700_000_000)


async def test_a_run_of_writes_is_one_statement_answering_as_the_writes_one_by_one(
    db, messages
):
    """Writes of one queue keep their order, the QUOTA marker comes where one by one
    it would; the results are in the order given."""
    full, other = new_id(), new_id()
    writes = [(full, msg(ts=i)) for i in range(4)] + [(other, msg(ts=9)), (full, msg(ts=5))]
    before = db.calls
    results = await messages.write_messages(writes, 3)
    assert db.calls - before == 1
    assert results == [WriteResult.STORED_INTO_EMPTY, WriteResult.STORED, WriteResult.STORED,
                       WriteResult.QUOTA_EXCEEDED, WriteResult.STORED_INTO_EMPTY,
                       WriteResult.QUOTA_EXCEEDED]
    stored = [m async for m in messages.iter_messages(full)]
    assert [m.msg_id for m in stored[:3]] == [m.msg_id for _, m in writes[:3]]
    assert stored[3].quota and len(stored) == 4
    assert await messages.queue_size(other) == 1
    assert await messages.write_messages([], 3) == []


async def test_a_run_of_acks_is_one_statement_answering_as_the_acks_one_by_one(db, messages):
    rids = [new_id() for _ in range(3)]
    sent = {rid: [msg(), msg()] for rid in rids}
    for rid in rids:
        for m in sent[rid]:
            await messages.write_message(rid, m, 10)
    deletes = [(rids[0], sent[rids[0]][0].msg_id),  # the head: deleted, the next is the head
               (rids[1], sent[rids[1]][1].msg_id),  # not the head: nothing deleted
               (new_id(), new_id())]  # no such queue
    before = db.calls
    results = await messages.delete_messages(deletes)
    assert db.calls - before == 1
    assert results == [(True, sent[rids[0]][1]), (False, sent[rids[1]][0]), (False, None)]
    assert [await messages.queue_size(rid) for rid in rids] == [1, 2, 2]


async def test_a_service_is_stored_once_per_role_and_certificate(queues):
    first = service()
    assert await queues.add_service(first) == first
    again = ServiceRecord(new_id(), b"M", first.cert, first.cert_hash, 1_800_000_000)
    assert await queues.add_service(again) == first
    other_role = ServiceRecord(new_id(), b"N", first.cert, first.cert_hash, 1_800_000_000)
    assert await queues.add_service(other_role) == other_role


async def test_a_services_queue_count_and_ids_hash_follow_every_change(queues):
    svc = (await queues.add_service(service())).service_id
    recs = [record() for _ in range(6)]
    for rec in recs:
        await queues.add_queue(rec)
    rids = [r.recipient_id for r in recs]
    assert await queues.service_summary(svc, Party.RECIPIENT) == ServiceQueues()

    results = await queues.set_queues_service([*rids[:4], new_id()], Party.RECIPIENT, svc)
    assert results == [None, None, None, None, AUTH]
    summary = await queues.service_summary(svc, Party.RECIPIENT)
    assert summary == ServiceQueues(4, ids_hash(rids[:4]))
    assert await queues.service_queue_page(svc, Party.RECIPIENT, None, 10) == sorted(rids[:4])

    await queues.set_service(rids[0], Party.RECIPIENT, None)  # released
    await queues.delete_queue(rids[1])  # deleted
    await queues.set_service(rids[5], Party.RECIPIENT, svc)  # one more
    live = [rids[2], rids[3], rids[5]]
    assert await queues.service_summary(svc, Party.RECIPIENT) == ServiceQueues(3, ids_hash(live))
    # the same association again changes nothing
    await queues.set_queues_service(live, Party.RECIPIENT, svc)
    assert await queues.service_summary(svc, Party.RECIPIENT) == ServiceQueues(3, ids_hash(live))


async def test_a_notifier_service_counts_notifier_ids_and_drops_a_replaced_notifier(queues):
    svc = (await queues.add_service(service(b"N"))).service_id
    recs = [record(notifier=NotifierCreds(new_id(), os.urandom(44), os.urandom(32)))
            for _ in range(3)]
    for rec in recs:
        await queues.add_queue(rec)
    assert await queues.set_service(recs[0].recipient_id, Party.NOTIFIER, svc) is None
    assert await queues.set_service(recs[1].recipient_id, Party.NOTIFIER, svc) is None
    nids = [r.notifier.notifier_id for r in recs]
    assert await queues.service_summary(svc, Party.NOTIFIER) == ServiceQueues(2, ids_hash(nids[:2]))
    assert await queues.service_summary(svc, Party.RECIPIENT) == ServiceQueues()
    # a new notifier starts without a service; a removed one leaves it
    await queues.add_notifier(recs[0].recipient_id,
                              NotifierCreds(new_id(), os.urandom(44), os.urandom(32)))
    await queues.delete_notifier(recs[1].recipient_id)
    assert await queues.service_summary(svc, Party.NOTIFIER) == ServiceQueues()
    bare = record()
    await queues.add_queue(bare)
    assert await queues.set_service(bare.recipient_id, Party.NOTIFIER, svc) == AUTH


# --- RKEY ------------------------------------------------------------------------------


async def test_recipient_keys_are_replaced_and_survive_reopening(schema, db, queues):
    rec = record()
    await queues.add_queue(rec)
    keys = (os.urandom(44), os.urandom(44), os.urandom(44))
    assert await queues.set_recipient_keys(rec.recipient_id, keys) is None
    assert await queues.set_recipient_keys(new_id(), keys) == AUTH
    await db.close()
    async with _database(schema) as again:
        found = await PostgresQueueStore(again).get_queue(Party.SENDER, rec.sender_id)
    assert found is not None and found.recipient_keys == keys
    assert found.recipient_key == keys[0] and found.more_recipient_keys == keys[1:]


# --- concurrency -------------------------------------------------------------------------


async def test_concurrent_writes_to_one_queue_stop_at_the_quota_with_one_marker(messages):
    rid = new_id()
    results: list[WriteResult] = []

    async def write(i: int) -> None:
        results.append(await messages.write_message(rid, msg(ts=i), 10))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(write, i)
    stored = [m async for m in messages.iter_messages(rid)]
    assert len(stored) == 11 and [m.quota for m in stored] == [False] * 10 + [True]
    assert results.count(WriteResult.STORED_INTO_EMPTY) == 1
    assert results.count(WriteResult.STORED) == 9
    assert results.count(WriteResult.QUOTA_EXCEEDED) == 30
    assert await messages.queue_size(rid) == 11


async def test_concurrent_acks_of_one_message_delete_it_once(messages):
    rid = new_id()
    first, second = msg(ts=1), msg(ts=2)
    await messages.write_message(rid, first, 128)
    await messages.write_message(rid, second, 128)
    answers = []

    async def ack() -> None:
        answers.append(await messages.delete_message(rid, first.msg_id))

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(ack)
    assert sorted(deleted for deleted, _ in answers) == [False] * 7 + [True]
    assert all(head == second for _, head in answers)
    assert await messages.queue_size(rid) == 1


async def test_a_queue_at_its_quota_takes_messages_again_once_emptied(messages):
    rid = new_id()
    sent = [msg(ts=i) for i in range(3)]
    for m in sent:
        await messages.write_message(rid, m, 2)
    marker = await messages.peek_messages([rid])
    assert marker[0] == sent[0]
    for m in sent[:2]:
        assert (await messages.delete_message(rid, m.msg_id))[0]
    head = await messages.peek_message(rid)
    assert head is not None and head.quota
    assert await messages.write_message(rid, msg(), 2) == WriteResult.QUOTA_EXCEEDED
    assert await messages.delete_message(rid, head.msg_id) == (True, None)
    assert await messages.write_message(rid, msg(), 2) == WriteResult.STORED_INTO_EMPTY


# --- schema, lock, soft delete, bulk import ------------------------------------------------


async def test_a_schema_newer_than_this_router_is_refused(schema, db):
    await db.run(lambda conn: conn.execute(
        "INSERT INTO schema_migrations (version, name) VALUES (%s, 'from the future')",
        (SCHEMA_VERSION + 1,)))
    await db.close()
    later = PostgresDatabase(shared_server().url, schema=schema)
    with pytest.raises(SchemaTooNew, match=f"version {SCHEMA_VERSION + 1}, newer"):
        await later.open()


async def test_a_second_store_on_one_schema_is_refused_until_the_first_closes(schema, db):
    second = PostgresDatabase(shared_server().url, schema=schema)
    with pytest.raises(SchemaLocked, match=f"another router uses schema {schema}"):
        await second.open()
    await db.close()
    await second.open()
    await second.close()


async def test_the_workers_of_one_router_share_a_schema_and_another_router_is_refused(schema):
    """docs/workers.md#stores: worker I holds lock I; a fresh schema migrated by two
    workers at once is migrated once."""
    workers = [PostgresDatabase(shared_server().url, schema=schema, lock_index=i)
               for i in range(2)]
    async with trio.open_nursery() as nursery:
        for worker in workers:
            nursery.start_soon(worker.open)
    try:
        versions = await workers[1].run(lambda conn: conn.execute(
            "SELECT count(*) FROM schema_migrations").fetchone()[0])
        assert versions == SCHEMA_VERSION
        for other_router in (PostgresDatabase(shared_server().url, schema=schema),
                             PostgresDatabase(shared_server().url, schema=schema, lock_index=1)):
            with pytest.raises(SchemaLocked, match=f"another router uses schema {schema}"):
                await other_router.open()
    finally:
        for worker in workers:
            await worker.close()


async def test_an_unreachable_database_is_one_clear_error():
    with socket_closed_port() as port:
        db = PostgresDatabase(f"postgresql://smp:secret@127.0.0.1:{port}/smp", schema="x")
        with pytest.raises(DatabaseUnavailable) as raised:
            await db.open()
    text = str(raised.value)
    assert "cannot reach the database" in text and "\n" not in text
    assert "secret" not in text


def socket_closed_port():
    import contextlib
    import socket

    @contextlib.contextmanager
    def port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            yield s.getsockname()[1]  # bound, not listening: connections are refused

    return port()


async def test_a_deleted_queue_row_stays_until_compaction_and_the_count_is_kept(db, queues):
    recs = [record() for _ in range(3)]
    for rec in recs:
        await queues.add_queue(rec)
    assert await queues.queue_count() == 3
    deleted = await queues.delete_queue(recs[0].recipient_id)
    assert deleted == recs[0]
    assert await queues.delete_queue(recs[0].recipient_id) == AUTH
    assert await queues.queue_count() == 2

    def rows(conn):
        return conn.execute("SELECT count(*) FROM msg_queues").fetchone()[0]

    assert await db.run(rows) == 3
    assert await queues.compact(deleted_before=0) == 0  # younger than the cutoff
    assert await queues.compact(deleted_before=2**62) == 1
    assert await db.run(rows) == 2
    reopened = await open_queue_store(db)
    assert await reopened.queue_count() == 2


async def test_bulk_import_copies_queues_links_and_messages_with_their_counts(queues, messages):
    link = QueueLinkData(new_id(), b"fixed\x00\\\n'", b"user\t\"data")
    linked = record(link_id=link.link_id, queue_mode=b"C", snd_secure=False)
    plain = record(notifier=NotifierCreds(new_id(), os.urandom(44), os.urandom(32)))
    full = [msg(ts=1), Message(new_id(), 2, b"", b"", True)]
    counts = await queues.bulk_import(
        [linked, plain], [(plain.recipient_id, m) for m in full],
        [(linked.recipient_id, link)],
    )
    assert counts == (2, 2)
    assert await queues.get_queue(Party.LINK, link.link_id) == linked
    assert await queues.get_link(linked.recipient_id) == link
    assert await queues.queue_count() == 2
    assert await messages.queue_size(plain.recipient_id) == 2
    assert await messages.write_message(plain.recipient_id, msg(), 128) == (
        WriteResult.QUOTA_EXCEEDED)  # the imported marker still refuses writes
    with pytest.raises(StoreError):
        await queues.bulk_import([plain])  # a taken id fails it all
    assert await queues.queue_count() == 2


# --- the database going away ------------------------------------------------------------------


async def test_while_the_database_is_down_calls_fail_with_a_store_error_then_work_again(tmp_path):
    server = shared_server()
    schema = schema_for(tmp_path)
    async with open_stores("postgres", tmp_path / "data", db_connection=server.url,
                           db_schema=schema, db_pool_size=2) as stores:
        rec = record()
        assert await stores.queues.add_queue(rec) is None
        await trio.to_thread.run_sync(server.restart)
        # the pool's connections died with the server: each failing call is an
        # ERR STORE, never a crash, and the pool reconnects by itself
        answers = []
        with trio.fail_after(60):
            while True:
                try:
                    answers.append(await stores.messages.write_message(
                        rec.recipient_id, msg(), 128))
                    break
                except StoreError as e:
                    assert e.error.tag in ("STORE", "INTERNAL"), e.error
                    await trio.sleep(0.1)
        assert answers == [WriteResult.STORED_INTO_EMPTY]
        assert await stores.queues.get_queue(Party.SENDER, rec.sender_id) == rec
        # the schema's lock is held again: a second router is refused
        with trio.fail_after(30):
            while not await _locked(server.url, schema):
                await trio.sleep(0.5)


async def test_after_an_outage_longer_than_the_reconnect_window_the_first_call_is_served(
    tmp_path, monkeypatch
):
    """The pool stops retrying after RECONNECT_WINDOW and the next call tries at once,
    so the first call after a long outage gets a connection (psycopg_pool's own window,
    five minutes, left its pauses between retries as long as the outage so far)."""
    monkeypatch.setattr(store.postgres.database, "RECONNECT_WINDOW", 0.5)
    monkeypatch.setattr(store.postgres.database, "POOL_TIMEOUT", 2.0)
    server = PostgresServer()  # its own: this test stops it
    try:
        server.start()
        async with open_stores("postgres", tmp_path / "data", db_connection=server.url,
                               db_schema=schema_for(tmp_path), db_pool_size=2) as stores:
            rec = record()
            assert await stores.queues.add_queue(rec) is None
            await trio.to_thread.run_sync(server.halt)
            with trio.fail_after(60):
                with pytest.raises(StoreError):  # the call that starts the retries
                    await stores.queues.get_queue(Party.SENDER, rec.sender_id)
                while stores.queues.db.reconnects_given_up == 0:
                    await trio.sleep(0.1)
            await trio.to_thread.run_sync(server.start)
            assert await stores.queues.get_queue(Party.SENDER, rec.sender_id) == rec
    finally:
        server.stop()


async def _locked(url: str, schema: str) -> bool:
    other = PostgresDatabase(url, schema=schema)
    try:
        await other.open()
    except SchemaLocked:
        return True
    except (DatabaseUnavailable, psycopg.Error):
        return False
    await other.close()
    return False


def _database(schema: str):
    import contextlib

    @contextlib.asynccontextmanager
    async def opened():
        database = PostgresDatabase(shared_server().url, schema=schema, pool_size=2)
        await database.open()
        try:
            yield database
        finally:
            await database.close()

    return opened()


# --- migration ------------------------------------------------------------------------------


async def test_migration_journal_postgres_sqlite_postgres_keeps_every_queue_link_service_message(
    tmp_path,
):
    from test_store_factory import (
        add_links,
        add_services,
        all_links,
        all_records,
        all_services,
        contents,
        fill,
    )

    data = tmp_path / "data"
    url = shared_server().url
    first, second = schema_for(tmp_path / "first"), schema_for(tmp_path / "second")
    async with open_stores("journal", data) as stores:
        expected = await fill(stores, n_queues=6)
        links = await add_links(stores)
        services = await add_services(stores)
        records = await all_records(stores)
    n_messages = sum(map(len, expected.values()))

    async def holds_everything(kind: str, **settings) -> None:
        async with open_stores(kind, data, **settings) as stores:
            assert await all_records(stores) == records, kind
            assert await all_links(stores) == links, kind
            assert await all_services(stores) == services, kind
            for rid, link in links.items():
                found = await stores.queues.get_queue(Party.LINK, link.link_id)
                assert found is not None and found.recipient_id == rid, kind
            held = await contents(stores)
            assert {rid: held[rid] for rid in expected} == expected, kind
            assert sum(map(len, held.values())) == n_messages, kind
            # the queue past its quota still refuses writes until it is emptied
            full = list(expected)[-1]
            assert await stores.messages.write_message(full, msg(), 100) is (
                WriteResult.QUOTA_EXCEEDED)

    to_first = {"db_connection": url, "db_schema": first}
    assert await migrate_store(data, "postgres", **to_first) == (len(records), n_messages)
    await holds_everything("postgres", **to_first)
    # the refused write above added nothing: the counts are the same on the way out
    assert await migrate_store(data, "sqlite", source_settings=to_first) == (
        len(records), n_messages)
    await holds_everything("sqlite")
    with pytest.raises(ValueError, match="already holds"):
        await migrate_store(data, "postgres", **to_first)  # the old schema is the backup
    assert read_store_kind(data) == "sqlite"
    to_second = {"db_connection": url, "db_schema": second}
    assert await migrate_store(data, "postgres", **to_second) == (len(records), n_messages)
    await holds_everything("postgres", **to_second)
    backups = {p.name.split(".old-")[0] for p in data.glob("*-store.old-*") if p.is_dir()}
    assert {"sqlite-store", "journal-store"} <= backups
