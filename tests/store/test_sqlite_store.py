"""What the SQLite backend promises beyond the shared contract: group commit, fsync
modes, a coherent cache, soft delete, bulk import and disk-full errors."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from store.interfaces import (
    Message,
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    ServiceQueues,
    StoreError,
    WriteResult,
)
from store.sqlite import schema as sqlite_schema
from store.sqlite.database import DB_FILE, SqliteDatabase, open_sqlite_database
from store.sqlite.messages import SqliteMessageStore
from store.sqlite.queues import open_queue_store


def new_id() -> bytes:
    return os.urandom(24)


def record() -> QueueRecord:
    return QueueRecord(new_id(), new_id(), os.urandom(44), os.urandom(32), None, True)


def msg(ts: int = 1, size: int = 10) -> Message:
    return Message(new_id(), ts, b"T", os.urandom(size))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / DB_FILE


async def test_concurrent_writes_share_transactions_and_all_commit(db_path):
    async with open_sqlite_database(db_path) as db:
        store = SqliteMessageStore(db)
        rid = new_id()
        sent = [msg(ts=i) for i in range(50)]
        results: dict[int, WriteResult] = {}

        async def write(i: int) -> None:
            results[i] = await store.write_message(rid, sent[i], 128)

        before = db.commits
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for i in range(len(sent)):
                    nursery.start_soon(write, i)
        assert db.commits - before < len(sent)
        assert list(results.values()).count(WriteResult.STORED) == 49
        assert {m.msg_id async for m in store.iter_messages(rid)} == {m.msg_id for m in sent}


async def test_a_write_returns_only_once_its_transaction_is_visible_to_another_connection(
    db_path,
):
    async with open_sqlite_database(db_path, fsync="always") as db:
        store = SqliteMessageStore(db)
        rid, m = new_id(), msg()
        await store.write_message(rid, m, 128)
        other = sqlite3.connect(db_path)
        try:
            rows = other.execute("SELECT msg_id FROM messages WHERE recipient_id = ?", (rid,))
            assert rows.fetchall() == [(m.msg_id,)]
        finally:
            other.close()


async def test_a_failing_op_does_not_fail_the_ops_committed_with_it(db_path):
    async with open_sqlite_database(db_path) as db:
        store = SqliteMessageStore(db)
        rid = new_id()
        errors: list[StoreError] = []

        def broken(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO no_such_table VALUES (1)")

        async def bad() -> None:
            try:
                await db.write(broken)
            except StoreError as exc:
                errors.append(exc)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.write_message, rid, msg(), 128)
                for _ in range(3):
                    nursery.start_soon(bad)
                    nursery.start_soon(store.write_message, rid, msg(), 128)
        assert len(errors) == 3 and all(e.error.tag == "STORE" for e in errors)
        assert await store.queue_size(rid) == 4


async def test_a_write_whose_caller_is_cancelled_still_commits(db_path):
    async with open_sqlite_database(db_path) as db:
        store = SqliteMessageStore(db)
        rid, m = new_id(), msg()
        with trio.CancelScope() as scope:
            scope.cancel()
            result = await store.write_message(rid, m, 128)
        assert result is WriteResult.STORED_INTO_EMPTY
        assert await store.peek_message(rid) == m


@pytest.mark.parametrize(("fsync", "level"), [("never", 0), ("batch", 2), ("always", 2)])
async def test_fsync_modes_set_the_synchronous_pragma(db_path, fsync, level):
    async with open_sqlite_database(db_path, fsync=fsync) as db:
        assert await db.read(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == level
        assert await db.read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0]) == "wal"


def test_an_unknown_fsync_mode_is_refused(db_path):
    with pytest.raises(ValueError, match="fsync"):
        SqliteDatabase(db_path, fsync="sometimes")


async def test_a_full_disk_becomes_a_store_error_and_the_store_keeps_working(db_path):
    async with open_sqlite_database(db_path) as db:
        store = SqliteMessageStore(db)
        rid = new_id()
        await store.write_message(rid, msg(), 10_000)
        pages = await db.read(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        await db.read(lambda c: c.execute(f"PRAGMA max_page_count={pages + 8}"))
        with pytest.raises(StoreError) as caught:
            for _ in range(100):
                await store.write_message(rid, msg(size=16_000), 10_000)
        assert caught.value.error.tag == "STORE"
        assert "full" in str(caught.value.error.arg)
        size = await store.queue_size(rid)
        assert await store.delete_queue_messages(rid) == size
        await db.read(lambda c: c.execute("PRAGMA max_page_count=1000000"))
        assert await store.write_message(rid, msg(), 10) is WriteResult.STORED_INTO_EMPTY


async def test_using_a_closed_database_is_a_store_error(db_path):
    async with open_sqlite_database(db_path) as db:
        store = SqliteMessageStore(db)
    with pytest.raises(StoreError):
        await store.peek_message(new_id())
    with pytest.raises(StoreError):
        await store.write_message(new_id(), msg(), 1)


async def test_concurrent_misses_for_one_queue_read_the_database_once(db_path):
    rec = record()
    async with open_sqlite_database(db_path) as db:
        await (await open_queue_store(db)).add_queue(rec)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        found = []

        async def lookup() -> None:
            found.append(await queues.get_queue(Party.SENDER, rec.sender_id))

        before = db.reads
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(lookup)
        assert found == [rec] * 5
        assert db.reads - before == 1
        assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec
        assert db.reads - before == 1


async def test_a_lookup_racing_a_delete_never_revives_the_queue(db_path):
    rec = record()
    async with open_sqlite_database(db_path) as db:
        await (await open_queue_store(db)).add_queue(rec)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(queues.get_queue, Party.SENDER, rec.sender_id)
                nursery.start_soon(queues.delete_queue, rec.recipient_id)
                nursery.start_soon(queues.get_queue, Party.RECIPIENT, rec.recipient_id)
        for party, eid in ((Party.SENDER, rec.sender_id), (Party.RECIPIENT, rec.recipient_id)):
            assert await queues.get_queue(party, eid) is None


async def test_a_deleted_queue_row_stays_until_compaction(db_path):
    rec = record()
    clock = [1_000_000.0]
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, deleted_ttl=100, clock=lambda: clock[0])
        await queues.add_queue(rec)
        await queues.delete_queue(rec.recipient_id)

        def rows(c: sqlite3.Connection) -> int:
            return c.execute("SELECT count(*) FROM queues").fetchone()[0]

        assert await db.read(rows) == 1
        assert await queues.compact() == 0
        clock[0] += 101
        assert await queues.compact() == 1
        assert await db.read(rows) == 0


async def test_bulk_import_inserts_queues_and_messages_in_one_transaction(db_path):
    recs = [record() for _ in range(300)]
    recs[0] = QueueRecord(
        new_id(), new_id(), b"k", b"d", b"s", False, notifier=NotifierCreds(new_id(), b"n", b"x")
    )
    msgs = [(recs[i % 3].recipient_id, msg(ts=i)) for i in range(30)]
    async with open_sqlite_database(db_path) as db:
        before = db.commits
        assert await db.bulk_import(recs, msgs) == (300, 30)
        assert db.commits - before == 1
    async with open_sqlite_database(db_path) as db:
        queues, messages = await open_queue_store(db), SqliteMessageStore(db)
        assert await queues.queue_count() == 300
        assert await queues.get_queue(Party.NOTIFIER, recs[0].notifier.notifier_id) == recs[0]
        for i in range(3):
            expected = [m for rid, m in msgs if rid == recs[i].recipient_id]
            assert [m async for m in messages.iter_messages(recs[i].recipient_id)] == expected


async def test_a_bulk_import_with_a_taken_id_inserts_nothing(db_path):
    taken = record()
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        await queues.add_queue(taken)
        with pytest.raises(StoreError):
            await db.bulk_import([record(), taken], [(taken.recipient_id, msg())])
        assert await queues.queue_count() == 1
        assert await SqliteMessageStore(db).queue_size(taken.recipient_id) == 0


async def test_iteration_pages_through_more_rows_than_one_read_returns(db_path):
    recs = [record() for _ in range(2500)]
    rid = new_id()
    msgs = [(rid, msg(ts=i)) for i in range(1001)]
    async with open_sqlite_database(db_path) as db:
        await db.bulk_import(recs, msgs)
        queues, messages = await open_queue_store(db), SqliteMessageStore(db)
        seen = [r.recipient_id async for r in queues.iter_queues()]
        assert sorted(seen) == sorted(r.recipient_id for r in recs)
        assert [m async for m in messages.iter_messages(rid)] == [m for _, m in msgs]


async def test_a_lookup_of_an_id_that_does_not_exist_never_reads_the_database(db_path):
    rec = record()
    async with open_sqlite_database(db_path) as db:
        await (await open_queue_store(db)).add_queue(rec)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)  # a fresh process: nothing cached yet
        reads = db.reads
        for party in Party:
            assert await queues.get_queue(party, new_id()) is None
        assert db.reads == reads
        assert await queues.get_queue(Party.SENDER, rec.sender_id) == rec
        assert db.reads == reads + 1


async def test_the_record_cache_is_bounded_and_evicted_records_load_again(db_path):
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=3)
        records = [record() for _ in range(10)]
        for rec in records:
            assert await queues.add_queue(rec) is None
        assert queues.cached_count() == 3
        for rec in records:
            assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec
            assert await queues.get_queue(Party.SENDER, rec.sender_id) == rec
            assert queues.cached_count() <= 3


async def test_the_most_recently_used_records_stay_cached(db_path):
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=2)
        hot, a, b = record(), record(), record()
        for rec in (hot, a):
            await queues.add_queue(rec)
        await queues.get_queue(Party.RECIPIENT, hot.recipient_id)  # hot is now the newest
        await queues.add_queue(b)  # evicts a, the least recently used
        reads = db.reads
        assert await queues.get_queue(Party.SENDER, hot.sender_id) == hot
        assert db.reads == reads
        assert await queues.get_queue(Party.SENDER, a.sender_id) == a
        assert db.reads == reads + 1


async def test_deleted_queues_and_replaced_notifiers_are_misses_again(db_path):
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=1)
        rec, other = record(), record()
        await queues.add_queue(rec)
        old = NotifierCreds(new_id(), os.urandom(44), os.urandom(32))
        assert await queues.add_notifier(rec.recipient_id, old) is None
        await queues.add_queue(other)  # evicts rec's record; its ids stay indexed
        new = NotifierCreds(new_id(), os.urandom(44), os.urandom(32))
        assert await queues.add_notifier(rec.recipient_id, new) is None
        reads = db.reads
        assert await queues.get_queue(Party.NOTIFIER, old.notifier_id) is None
        assert db.reads == reads
        assert (await queues.get_queue(Party.NOTIFIER, new.notifier_id)).notifier == new
        assert isinstance(await queues.delete_queue(rec.recipient_id), QueueRecord)
        reads = db.reads
        for party, entity_id in [
            (Party.RECIPIENT, rec.recipient_id), (Party.SENDER, rec.sender_id),
            (Party.NOTIFIER, new.notifier_id),
        ]:
            assert await queues.get_queue(party, entity_id) is None
        assert db.reads == reads


# --- short links (v15) -------------------------------------------------------------

V1_COLUMNS = (
    "recipient_id, sender_id, recipient_key, rcv_dh_secret, sender_key, snd_secure, status, "
    "notifier_id, notifier_key, rcv_ntf_dh_secret, rcv_service_id, ntf_service_id, updated_at"
)


def write_v1_database(path: Path, rec: QueueRecord) -> None:
    """A database as the router wrote it before short links (schema version 1)."""
    conn = sqlite3.connect(path)
    conn.executescript(sqlite_schema.SCHEMA)  # the version 1 tables, which version 2 extends
    conn.execute(
        f"INSERT INTO queues ({V1_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (rec.recipient_id, rec.sender_id, rec.recipient_key, rec.rcv_dh_secret, None, 1,
         "active", None, None, None, None, None, 7),
    )  # fmt: skip
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()


def link_of(n: int = 0) -> QueueLinkData:
    return QueueLinkData(new_id(), b"fixed" * n, b"user" * n)


async def test_a_database_from_before_links_is_upgraded_and_keeps_its_queues(db_path):
    old = replace(record(), updated_at=7)
    write_v1_database(db_path, old)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        assert await queues.get_queue(Party.SENDER, old.sender_id) == old
        link = link_of(3)
        assert await queues.set_link(old.recipient_id, link) is None
        linked = replace(record(), queue_mode=b"C", link_id=new_id())
        assert await queues.add_queue(linked, replace(link, link_id=linked.link_id)) is None
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA user_version").fetchone() == (sqlite_schema.SCHEMA_VERSION,)
    conn.close()
    async with open_sqlite_database(db_path) as db:  # a second open changes nothing
        queues = await open_queue_store(db)
        assert await queues.get_link(old.recipient_id) == link
        assert await queues.get_queue(Party.LINK, linked.link_id) == linked
        assert await queues.queue_count() == 2


async def test_a_newer_schema_than_this_router_knows_is_refused(db_path):
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version={sqlite_schema.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        async with open_sqlite_database(db_path):
            pass


async def test_a_link_is_read_only_when_asked_for_and_missing_ones_cost_no_read(db_path):
    link = link_of(2)
    rec = replace(record(), queue_mode=b"C", link_id=link.link_id)
    plain = record()
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        await queues.add_queue(rec, link)
        await queues.add_queue(plain)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=1)
        reads = db.reads
        assert await queues.get_queue(Party.LINK, new_id()) is None
        assert await queues.get_link(new_id()) is None
        assert db.reads == reads
        assert await queues.get_queue(Party.LINK, link.link_id) == rec  # loads the record
        assert db.reads == reads + 1
        assert await queues.get_link(rec.recipient_id) == link  # and then the link
        assert db.reads == reads + 2
        assert await queues.get_link(plain.recipient_id) is None  # the record says: no link
        assert db.reads == reads + 3  # (loading plain's record, evicting rec's)
        assert await queues.get_link(plain.recipient_id) is None
        assert db.reads == reads + 3


async def test_a_deleted_or_replaced_link_id_is_a_miss_again_even_when_evicted(db_path):
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=1)
        first, second = link_of(1), link_of(1)
        rec, other = replace(record(), link_id=first.link_id), record()
        await queues.add_queue(rec, first)
        await queues.add_queue(other)  # evicts rec's record; its link id stays indexed
        assert await queues.delete_link(rec.recipient_id) is None
        await queues.add_queue(record())
        reads = db.reads
        assert await queues.get_queue(Party.LINK, first.link_id) is None
        assert db.reads == reads
        assert await queues.set_link(other.recipient_id, second) is None
        assert isinstance(await queues.delete_queue(other.recipient_id), QueueRecord)
        reads = db.reads
        assert await queues.get_queue(Party.LINK, second.link_id) is None
        assert db.reads == reads


async def test_a_bulk_import_keeps_links_and_refuses_a_taken_link_id(db_path):
    link = link_of(4)
    rec = replace(record(), queue_mode=b"M", link_id=link.link_id)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        assert await queues.bulk_import([rec, record()], [], [(rec.recipient_id, link)]) == (2, 0)
        assert await queues.get_queue(Party.LINK, link.link_id) == rec
        assert await queues.get_link(rec.recipient_id) == link
        taken = replace(record(), link_id=link.link_id)
        with pytest.raises(StoreError):
            await queues.bulk_import([record(), taken], [], [(taken.recipient_id, link)])
        assert await queues.queue_count() == 2
        with pytest.raises(ValueError):  # a record naming a link that is not given
            await queues.bulk_import([replace(record(), link_id=new_id())])


async def test_an_older_database_gets_the_recipient_keys_column_and_keeps_its_queues(db_path):
    """Schema 3 adds `more_recipient_keys` (RKEY): an older database's queues have one
    key, and may be given more once it is upgraded."""
    old = replace(record(), updated_at=7)
    write_v1_database(db_path, old)
    keys = (b"k1" + new_id(), b"k2" + new_id(), b"k3" + new_id())
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        assert (await queues.get_queue(Party.RECIPIENT, old.recipient_id)).recipient_keys == (
            old.recipient_key,
        )
        assert await queues.set_recipient_keys(old.recipient_id, keys) is None
    conn = sqlite3.connect(db_path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(queues)")]
    conn.close()
    assert "more_recipient_keys" in columns
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        assert (await queues.get_queue(Party.SENDER, old.sender_id)).recipient_keys == keys


async def test_a_database_from_before_services_releases_its_old_associations(db_path):
    """Associations of schema 2 came from service keys no client can prove any more."""
    old = replace(record(), updated_at=7)
    write_v1_database(db_path, old)
    conn = sqlite3.connect(db_path)
    conn.executescript(f"BEGIN; {sqlite_schema.MIGRATIONS[2]} PRAGMA user_version=2; COMMIT;")
    conn.execute("UPDATE queues SET rcv_service_id = ?", (b"old service",))
    conn.commit()
    conn.close()
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)
        assert (await queues.get_queue(Party.RECIPIENT, old.recipient_id)).rcv_service_id is None
        assert await queues.service_summary(b"old service", Party.RECIPIENT) == ServiceQueues()


# --- a block's lookups (get_queues, peek_messages) -------------------------------------


async def test_a_blocks_lookups_read_the_database_once_and_fill_the_cache(db_path):
    records = [record() for _ in range(50)]
    async with open_sqlite_database(db_path) as db:
        await (await open_queue_store(db)).bulk_import(records)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db)  # a fresh process: nothing cached yet
        ids = [r.sender_id for r in records] + [new_id()]
        reads = db.reads
        assert await queues.get_queues(Party.SENDER, ids) == [*records, None]
        assert db.reads == reads + 1
        assert queues.cached_count() == len(records)
        for rec in records:
            assert await queues.get_queue(Party.RECIPIENT, rec.recipient_id) == rec
        assert await queues.get_queues(Party.SENDER, ids) == [*records, None]
        assert db.reads == reads + 1  # cached and unknown ids: no read at all


async def test_a_block_larger_than_the_cache_is_answered_in_one_read(db_path):
    records = [record() for _ in range(20)]
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=5)
        await queues.bulk_import(records)
        reads = db.reads
        ids = [r.recipient_id for r in records]
        assert await queues.get_queues(Party.RECIPIENT, ids) == records
        assert db.reads == reads + 1
        assert queues.cached_count() == 5


async def test_a_blocks_read_straddling_a_change_never_caches_the_older_row(
    db_path, monkeypatch
):
    """The row is read, then the queue is secured and its record evicted before the
    read's answer is taken in: the block and every later lookup see the sender key."""
    rec, other = record(), record()
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=1)
        await queues.bulk_import([rec, other])
        read_done, go_on = trio.Event(), trio.Event()
        plain_read = db.read

        async def held_read(op):
            result = await plain_read(op)
            if not read_done.is_set():
                read_done.set()
                await go_on.wait()
            return result

        monkeypatch.setattr(db, "read", held_read)
        key = os.urandom(44)
        found = []

        async def block() -> None:
            found.extend(await queues.get_queues(Party.SENDER, [rec.sender_id]))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(block)
                await read_done.wait()
                assert await queues.secure_queue(rec.recipient_id, key) is None
                await queues.get_queue(Party.RECIPIENT, other.recipient_id)  # evicts rec
                go_on.set()
        assert found[0].sender_key == key
        assert (await queues.get_queue(Party.SENDER, rec.sender_id)).sender_key == key


async def test_the_heads_of_a_block_are_one_read(db_path):
    async with open_sqlite_database(db_path) as db:
        store = SqliteMessageStore(db)
        ids = [new_id() for _ in range(30)]
        heads = {rid: msg(ts=i) for i, rid in enumerate(ids[::2])}
        for rid, m in heads.items():
            await store.write_message(rid, m, 10)
            await store.write_message(rid, msg(), 10)
        reads = db.reads
        assert await store.peek_messages(ids) == [heads.get(rid) for rid in ids]
        assert db.reads == reads + 1


def full_record() -> QueueRecord:
    """A record with every optional part set, and the non-default status and mode."""
    return QueueRecord(
        new_id(), new_id(), os.urandom(44), os.urandom(32), os.urandom(44), False,
        status=QueueStatus.OFF, notifier=NotifierCreds(new_id(), os.urandom(44), os.urandom(32)),
        rcv_service_id=new_id(), ntf_service_id=new_id(), updated_at=1_700_000_000,
        queue_mode=b"C", link_id=new_id(), more_recipient_keys=(os.urandom(44), os.urandom(44)),
    )


@pytest.mark.parametrize("make", [record, full_record])
def test_a_row_becomes_the_record_it_was_made_of(make):
    rec = make()
    back = sqlite_schema.record_from_row(sqlite_schema.queue_row(rec))
    assert back == rec
    assert hash(back) == hash(rec)
    with pytest.raises(AttributeError):
        back.sender_key = b"x"  # still frozen


async def test_records_a_block_reads_past_the_cache_are_found_by_every_id(db_path):
    """A block of more queues than the cache holds: each record is read whole, and every
    id of each queue, evicted or not, finds it again later."""
    records = [full_record() for _ in range(12)]
    links = [(r.recipient_id, QueueLinkData(r.link_id, b"fixed", b"user")) for r in records]
    async with open_sqlite_database(db_path) as db:
        await (await open_queue_store(db)).bulk_import(records, links=links)
    async with open_sqlite_database(db_path) as db:
        queues = await open_queue_store(db, cache_size=4)  # a fresh process, a small cache
        ids = [r.recipient_id for r in records]
        assert await queues.get_queues(Party.RECIPIENT, ids) == records
        assert queues.cached_count() == 4
        for rec in records:
            assert await queues.get_queue(Party.SENDER, rec.sender_id) == rec
            assert await queues.get_queue(Party.NOTIFIER, rec.notifier.notifier_id) == rec
            assert await queues.get_queue(Party.LINK, rec.link_id) == rec
        assert await queues.get_queues(Party.SENDER, [r.sender_id for r in records]) == records
