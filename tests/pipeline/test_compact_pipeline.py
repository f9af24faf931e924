"""`smp-pipeline compact` against the router's own store log and its own compaction.

The logs here are written by `store.journal.storelog.StoreLogQueueStore` (the router's
queue store) doing creates (some with a short link), secures, notifier changes,
services and their associations, link changes, recipient keys, suspensions and
deletes; the reference result is `store.journal.storelog.compact_records`, and the
compacted log, opened by the store, holds what the original holds.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from pathlib import Path

import pytest
import trio

from pipeline.compact_job import CorruptLogError, run_compact, shard_of_id
from pipeline.synth import write_synthetic_log
from store.interfaces import NotifierCreds, Party, QueueLinkData, QueueRecord, ServiceRecord
from store.journal.storelog import StoreLogQueueStore, compact_records

pytestmark = pytest.mark.spark

ED = bytes.fromhex("302a300506032b6570032100")


def record(n: int, *, notifier: bool = False, link: QueueLinkData | None = None) -> QueueRecord:
    rid = n.to_bytes(4, "big") + os.urandom(20)
    mode = None if n % 3 == 2 else b"M" if n % 2 == 0 else b"C"
    return QueueRecord(
        recipient_id=rid,
        sender_id=os.urandom(24),
        recipient_key=ED + os.urandom(32),
        rcv_dh_secret=os.urandom(32),
        sender_key=None,
        snd_secure=n % 2 == 0,
        notifier=creds() if notifier else None,
        updated_at=1714521600 + n,
        queue_mode=mode,
        link_id=None if link is None else link.link_id,
    )


def link_data(size: int = 120) -> QueueLinkData:
    return QueueLinkData(os.urandom(24), os.urandom(size), os.urandom(size // 3))


def creds() -> NotifierCreds:
    return NotifierCreds(os.urandom(24), ED + os.urandom(32), os.urandom(32))


def service(role: bytes, created_at: int) -> ServiceRecord:
    cert = os.urandom(300)  # the store keeps a certificate's DER as it is given
    return ServiceRecord(os.urandom(24), role, cert, hashlib.sha256(cert).digest(), created_at)


SERVICES = {}  # log path -> the services its store was given


async def write_router_log(path: Path, queues: int = 60) -> None:
    """Churn through the router's queue store; the raw log stays as it wrote it."""
    store = await StoreLogQueueStore.open(path, fsync="never")
    services = [service(b"M", 1714521000), service(b"N", 1714521001), service(b"P", 1714521002)]
    for s in services:
        assert await store.add_service(s) == s
    SERVICES[path] = services
    links = {n: link_data() for n in range(queues) if n % 4 == 1}
    records = [record(n, notifier=n % 5 == 0, link=links.get(n)) for n in range(queues)]
    for n, rec in enumerate(records):
        assert await store.add_queue(rec, links.get(n)) is None
    svc, ntf_svc = services[0].service_id, services[1].service_id
    # a block of SUBs signed by a service: one line per queue, the block in one write
    block = [r.recipient_id for n, r in enumerate(records) if n % 4 == 3]
    assert await store.set_queues_service(block, Party.RECIPIENT, svc) == [None] * len(block)
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
            await store.set_service(rid, Party.NOTIFIER, ntf_svc)
        if n % 8 == 0:
            await store.set_service(rid, Party.RECIPIENT, None)
        if n % 4 == 2:  # a link given later, its user data replaced
            link = link_data()
            assert await store.set_link(rid, link) is None
            again = QueueLinkData(link.link_id, link.fixed_data, b"u")
            assert await store.set_link(rid, again) is None
        if n % 8 == 1:
            assert await store.delete_link(rid) is None
        if n % 16 == 1:  # a new link after the old one was deleted
            assert await store.set_link(rid, link_data(0)) is None
        if n % 5 == 2:  # RKEY: two keys, then on some queues back to one
            keys = (ED + os.urandom(32), ED + os.urandom(32))
            assert await store.set_recipient_keys(rid, keys) is None
            if n % 10 == 7:
                assert await store.set_recipient_keys(rid, keys[1:]) is None
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
        "add_service",
        "create",
        "secure",
        "add_notifier",
        "delete_notifier",
        "set_service",
        "set_link",
        "delete_link",
        "set_recipient_keys",
        "suspend",
        "delete",
    }


def test_the_router_log_under_test_has_queues_with_and_without_links(router_logs):
    compacted = compact_records(lines_of(router_logs[0]))
    with_link = [line for line in compacted if " lid=" in line]
    assert 0 < len(with_link) < len(compacted)
    assert any(" lfix= lusr=" in line for line in with_link)  # empty parts are written too


def test_spark_compaction_equals_the_routers_own(spark, router_logs, tmp_path):
    out = tmp_path / "queues.log"
    queues = run_compact(spark, [str(router_logs[0])], str(out))
    expected = compact_records(lines_of(router_logs[0]))
    assert out.read_text().splitlines() == expected
    assert queues == sum(" create " in line for line in expected)
    assert sum(" add_service " in line for line in expected) == 3


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
    expected = compact_records(lines_of(*router_logs))
    services = [line for line in expected if " add_service " in line]
    queues = []
    for shard in range(3):
        lines = (out / f"shard-{shard}.log").read_text().splitlines()
        assert lines == sorted(lines)
        # every shard knows every service: its queues name them by id
        assert [line for line in lines if " add_service " in line] == services
        for line in lines:
            if " create " in line:
                rid = line.split(" rid=")[1].split(" ")[0]
                assert shard_of_id(base64.urlsafe_b64decode(rid), 3) == shard
                queues.append(line)
    assert sorted(queues + services) == expected


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


def test_the_output_holds_only_snapshot_lines_and_no_staging_files(spark, router_logs, tmp_path):
    out = tmp_path / "queues.log"
    run_compact(spark, [str(router_logs[0])], str(out))
    assert [p.name for p in tmp_path.iterdir()] == ["queues.log"]  # no staging, no .crc
    kinds = {line.split(" ")[1] for line in out.read_text().splitlines()}
    assert kinds == {"create", "add_service"}


async def _store_contents(path: Path, services: list[ServiceRecord]) -> dict[str, object]:
    """Everything the router's queue store holds after opening the log at `path`: each
    queue with its link, each service (found by its certificate) and, per service and
    side, the count, ids hash and the ids of its associations, as the store pages them."""
    store = await StoreLogQueueStore.open(path, fsync="never", backups=0)
    try:
        queues = {}
        async for rec in store.iter_queues():
            queues[rec.recipient_id] = (rec, await store.get_link(rec.recipient_id))
        found, figures = [], {}
        for s in services:
            stored = await store.add_service(s)  # the stored one, when there is one
            found.append(stored)
            for party in (Party.RECIPIENT, Party.NOTIFIER):
                summary = await store.service_summary(s.service_id, party)
                members, after = [], None
                while page := await store.service_queue_page(s.service_id, party, after, 64):
                    members += page
                    after = page[-1]
                figures[(s.service_id, party)] = (summary, members)
        return {"queues": queues, "services": found, "associations": figures}
    finally:
        await store.close()


def test_a_compacted_log_opens_to_the_same_queues_services_and_associations(
    spark, router_logs, tmp_path
):
    original, compacted = tmp_path / "original" / "queues.log", tmp_path / "compacted.log"
    original.parent.mkdir()
    original.write_bytes(router_logs[0].read_bytes())
    run_compact(spark, [str(router_logs[0])], str(compacted))
    reopened = tmp_path / "reopened" / "queues.log"
    reopened.parent.mkdir()
    reopened.write_bytes(compacted.read_bytes())
    services = SERVICES[router_logs[0]]
    before = trio.run(_store_contents, original, services)
    after = trio.run(_store_contents, reopened, services)
    assert after["services"] == services  # each found by its certificate, none made anew
    assert after == before
    associated = [summary.count for summary, _ in before["associations"].values()]
    assert sum(associated) > 0 and len(before["queues"]) > 40
    # the store took the compacted log as its own snapshot: it did not rewrite it
    assert reopened.read_bytes() == compacted.read_bytes()


def _line(payload: str) -> str:
    return f"{zlib.crc32(payload.encode()):08x} {payload}"


def test_link_records_fold_as_the_router_folds_them(spark, tmp_path):
    """Replays no store writes: a link set on a queue that is gone, a `create` that
    replaces a queue with a link by one without, a link deleted and set again."""
    q = "create ts=1 rid={rid} sid={sid} rkey=aw== rdh= secure=0 status=active"
    lines = [
        _line(q.format(rid="AQ==", sid="Ag==") + " mode=C lid=bGlk lfix=Zml4 lusr=dXNy"),
        _line(q.format(rid="Aw==", sid="BA==") + " mode=M"),
        _line("set_link ts=2 rid=BQ== lid=bm9uZQ== lfix= lusr="),  # no such queue
        _line("delete_link ts=3 rid=AQ=="),
        _line("set_link ts=4 rid=AQ== lid=bmV3 lfix=Zg== lusr="),
        _line("set_link ts=5 rid=Aw== lid=bTI= lfix=Zg== lusr=dQ=="),
        _line(q.format(rid="Aw==", sid="BA==").replace("ts=1", "ts=6")),  # replaces the queue
        _line("delete_link ts=7 rid=BQ=="),
    ]
    log = tmp_path / "queues.log"
    log.write_text("".join(line + "\n" for line in lines))
    out = tmp_path / "out.log"
    run_compact(spark, [str(log)], str(out))
    expected = compact_records(lines)
    assert out.read_text().splitlines() == expected
    assert [line.split(" ", 1)[1] for line in expected] == sorted(
        [
            q.format(rid="AQ==", sid="Ag==").replace("ts=1", "ts=4")
            + " mode=C lid=bmV3 lfix=Zg== lusr=",
            q.format(rid="Aw==", sid="BA==").replace("ts=1", "ts=6"),
        ],
        key=lambda payload: _line(payload),
    )


def test_recipient_key_records_fold_as_the_router_folds_them(spark, tmp_path):
    """A queue created with more keys, keys replaced, back to one, and replaced again
    after a `create` that replaces the queue (docs/store-log.md)."""
    q = "create ts=1 rid={rid} sid={sid} rkey=aw== rdh= secure=0 status=active mode=C"
    lines = [
        _line(q.format(rid="AQ==", sid="Ag==") + " rkeys=bA==,bQ=="),
        _line(q.format(rid="Aw==", sid="BA==")),
        _line("set_recipient_keys ts=2 rid=AQ== rkey=bg=="),
        _line("set_recipient_keys ts=3 rid=Aw== rkey=bw== rkeys=cA=="),
        _line("set_recipient_keys ts=4 rid=BQ== rkey=bw== rkeys=cA=="),  # no such queue
        _line(q.format(rid="AQ==", sid="Ag==").replace("ts=1", "ts=5") + " rkeys=cQ=="),
    ]
    log = tmp_path / "queues.log"
    log.write_text("".join(line + "\n" for line in lines))
    out = tmp_path / "out.log"
    run_compact(spark, [str(log)], str(out))
    expected = compact_records(lines)
    assert out.read_text().splitlines() == expected
    assert sorted(line.split(" ", 1)[1] for line in expected) == sorted(
        [
            q.format(rid="AQ==", sid="Ag==").replace("ts=1", "ts=5") + " rkeys=cQ==",
            q.format(rid="Aw==", sid="BA==").replace("ts=1 ", "ts=3 ").replace(
                "rkey=aw==", "rkey=bw=="
            ) + " rkeys=cA==",
        ]
    )


@pytest.mark.parametrize(
    "bad",
    [
        "set_recipient_keys ts=1 rid=AQ== rkeys=cA==",
        "set_recipient_keys ts=1 rid=AQ== rkey=bw== rkeys=cA=,cA==",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=0 status=active mode=X",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=0 status=active lid=AA== lfix=",
        "set_link ts=1 rid=AQ== lid=AA== lusr=",
        "delete_link ts=1 rid=AQ== lid=AA==",
        "add_service ts=1 svc=AQ== role=X cert=AA== chash=AA==",
        "add_service ts=1 svc=AQ== role=M cert=AA==",
        "add_service ts=1 rid=AQ== svc=AQ== role=M cert=AA== chash=AA==",
    ],
)
def test_a_link_record_the_router_refuses_stops_the_job(spark, tmp_path, bad):
    with pytest.raises(ValueError):
        compact_records([_line(bad)])
    log = tmp_path / "queues.log"
    good = _line("delete ts=9 rid=AQ==")
    log.write_text(f"{_line(bad)}\n{good}\n")
    with pytest.raises(CorruptLogError):
        run_compact(spark, [str(log)], str(tmp_path / "out.log"))
