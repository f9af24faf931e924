"""`smp-pipeline compact` against the router's own store log and its own compaction.

The logs here are written by `store.journal.storelog.StoreLogQueueStore` (the router's
queue store) doing creates, secures, notifier changes, service changes,
suspensions and deletes; the reference result is `store.journal.storelog.compact_records`.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import trio

from pipeline.compact_job import CorruptLogError, run_compact, shard_of_id
from pipeline.synth import write_synthetic_log
from store.interfaces import NotifierCreds, Party, QueueRecord
from store.journal.storelog import StoreLogQueueStore, compact_records

pytestmark = pytest.mark.spark

ED = bytes.fromhex("302a300506032b6570032100")


def record(n: int, *, notifier: bool = False) -> QueueRecord:
    rid = n.to_bytes(4, "big") + os.urandom(20)
    return QueueRecord(
        recipient_id=rid,
        sender_id=os.urandom(24),
        recipient_key=ED + os.urandom(32),
        rcv_dh_secret=os.urandom(32),
        sender_key=None,
        snd_secure=n % 2 == 0,
        notifier=creds() if notifier else None,
        updated_at=1714521600 + n,
    )


def creds() -> NotifierCreds:
    return NotifierCreds(os.urandom(24), ED + os.urandom(32), os.urandom(32))


async def write_router_log(path: Path, queues: int = 60) -> None:
    """Churn through the router's queue store; the raw log stays as it wrote it."""
    store = await StoreLogQueueStore.open(path, fsync="never")
    records = [record(n, notifier=n % 5 == 0) for n in range(queues)]
    for rec in records:
        assert await store.add_queue(rec) is None
    svc = os.urandom(24)
    for n, rec in enumerate(records):
        rid = rec.recipient_id
        if n % 2:
            await store.secure_queue(rid, ED + os.urandom(32))
        if n % 3 == 0:
            await store.add_notifier(rid, creds())
        if n % 9 == 0:
            await store.delete_notifier(rid)
        if n % 4 == 0:
            await store.set_service(rid, Party.RECIPIENT, svc)
        if n % 6 == 0:
            await store.set_service(rid, Party.NOTIFIER, svc)
        if n % 8 == 0:
            await store.set_service(rid, Party.RECIPIENT, None)
        if n % 7 == 0:
            await store.suspend_queue(rid)
        if n % 10 == 3:
            await store.delete_queue(rid)
    again = record(1000)  # a queue deleted and a new one created after it
    await store.add_queue(again)
    await store.delete_queue(again.recipient_id)
    await store.add_queue(record(1001))
    await store.close()


@pytest.fixture(scope="module")
def router_logs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("store")
    paths = [root / "a" / "queues.log", root / "b" / "queues.log"]
    for path in paths:
        trio.run(write_router_log, path)
    return paths


def lines_of(*paths: Path) -> list[str]:
    return [line for p in paths for line in p.read_text().splitlines()]


def test_the_router_log_under_test_has_every_kind_of_record(router_logs):
    kinds = {line.split(" ")[1] for line in lines_of(router_logs[0])}
    assert kinds == {
        "create",
        "secure",
        "add_notifier",
        "delete_notifier",
        "set_service",
        "suspend",
        "delete",
    }


def test_spark_compaction_equals_the_routers_own(spark, router_logs, tmp_path):
    out = tmp_path / "queues.log"
    queues = run_compact(spark, [str(router_logs[0])], str(out))
    expected = compact_records(lines_of(router_logs[0]))
    assert out.read_text().splitlines() == expected
    assert queues == len(expected)


def test_several_logs_are_replayed_in_the_order_given(spark, router_logs, tmp_path):
    out = tmp_path / "queues.log"
    run_compact(spark, [str(p) for p in router_logs], str(out))
    assert out.read_text().splitlines() == compact_records(lines_of(*router_logs))


def test_a_compacted_log_compacts_to_itself(spark, router_logs, tmp_path):
    once, twice = tmp_path / "once.log", tmp_path / "twice.log"
    run_compact(spark, [str(router_logs[0])], str(once))
    run_compact(spark, [str(once)], str(twice))
    assert twice.read_bytes() == once.read_bytes()


def test_shards_split_queues_by_recipient_id_hash(spark, router_logs, tmp_path):
    out = tmp_path / "shards"
    run_compact(spark, [str(p) for p in router_logs], str(out), shards=3)
    everything = []
    for shard in range(3):
        lines = (out / f"shard-{shard}.log").read_text().splitlines()
        assert lines == sorted(lines)
        for line in lines:
            rid = line.split(" rid=")[1].split(" ")[0]
            assert shard_of_id(base64.urlsafe_b64decode(rid), 3) == shard
        everything += lines
    assert sorted(everything) == compact_records(lines_of(*router_logs))


def test_a_torn_last_line_is_dropped_as_the_router_drops_it(spark, router_logs, tmp_path):
    log = tmp_path / "queues.log"
    text = router_logs[0].read_text()
    log.write_text(text + text.splitlines(keepends=True)[-1][:30])
    out = tmp_path / "out.log"
    run_compact(spark, [str(log)], str(out))
    assert out.read_text().splitlines() == compact_records(text.splitlines())


def test_a_whole_last_line_without_its_newline_is_dropped_too(spark, router_logs, tmp_path):
    log = tmp_path / "queues.log"
    lines = router_logs[0].read_text().splitlines(keepends=True)
    log.write_text("".join(lines)[:-1])  # the last change lacks only its LF
    out = tmp_path / "out.log"
    run_compact(spark, [str(log)], str(out))
    assert out.read_text().splitlines() == compact_records(lines[:-1])


def test_a_damaged_line_inside_the_log_stops_the_job(spark, router_logs, tmp_path):
    log = tmp_path / "queues.log"
    lines = router_logs[0].read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace("rid=", "rid=A", 1)  # the checksum no longer holds
    log.write_text("".join(lines))
    with pytest.raises(CorruptLogError):
        run_compact(spark, [str(log)], str(tmp_path / "out.log"))


def test_a_synthetic_log_with_heavy_churn_compacts_like_the_router(spark, tmp_path):
    log = tmp_path / "synthetic.log"
    write_synthetic_log(log, 30_000, seed=7)
    out = tmp_path / "out.log"
    run_compact(spark, [str(log)], str(out), partitions=3)
    assert out.read_text().splitlines() == compact_records(lines_of(log))


def test_the_output_holds_only_create_lines_and_no_staging_files(spark, router_logs, tmp_path):
    out = tmp_path / "queues.log"
    run_compact(spark, [str(router_logs[0])], str(out))
    assert [p.name for p in tmp_path.iterdir()] == ["queues.log"]  # no staging, no .crc
    assert all(line.split(" ")[1] == "create" for line in out.read_text().splitlines())
