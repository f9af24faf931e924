"""The store log: its line format, the replay fold, compaction at open, durability policies."""

from __future__ import annotations

import errno
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import trio

from store.interfaces import (
    NotifierCreds,
    Party,
    QueueLinkData,
    QueueRecord,
    QueueStatus,
    StoreError,
)
from store.journal import storelog
from store.journal.logfile import encode_line, line_payload
from store.journal.storelog import StoreLogQueueStore, backups_of, open_store_log
from store.journal.storelog_format import compact_records, decode_record, encode_record
from store.queue_table import (
    AddNotifier,
    CreateQueue,
    DeleteLink,
    DeleteNotifier,
    DeleteQueue,
    SecureQueue,
    SetLink,
    SetService,
    SuspendQueue,
    replay,
)


def new_id() -> bytes:
    return os.urandom(24)


def make_record(**changes: object) -> QueueRecord:
    rec = QueueRecord(
        recipient_id=new_id(),
        sender_id=new_id(),
        recipient_key=os.urandom(44),
        rcv_dh_secret=os.urandom(32),
        sender_key=None,
        snd_secure=True,
        updated_at=1_700_000_000,
    )
    return replace(rec, **changes)


def make_notifier() -> NotifierCreds:
    return NotifierCreds(new_id(), os.urandom(44), os.urandom(32))


def make_link(**changes: object) -> QueueLinkData:
    return replace(QueueLinkData(new_id(), os.urandom(200), os.urandom(60)), **changes)


def linked(link: QueueLinkData, mode: bytes = b"C", **changes: object) -> CreateQueue:
    return CreateQueue(make_record(queue_mode=mode, link_id=link.link_id, **changes), link)


class Clock:
    """A settable wall clock, so updated_at values are known."""

    def __init__(self, now: int = 1_700_000_100) -> None:
        self.now = now

    def __call__(self) -> float:
        self.now += 1
        return self.now


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


async def all_records(store: StoreLogQueueStore) -> dict[bytes, QueueRecord]:
    return {r.recipient_id: r async for r in store.iter_queues()}


EVERY_KIND_OF_RECORD = [
    CreateQueue(make_record()),
    CreateQueue(
        make_record(
            sender_key=b"",
            snd_secure=False,
            status=QueueStatus.OFF,
            notifier=make_notifier(),
            rcv_service_id=b"r",
            ntf_service_id=b"nn",
            updated_at=-5,
        )
    ),
    SecureQueue(7, new_id(), os.urandom(44)),
    AddNotifier(8, new_id(), make_notifier()),
    DeleteNotifier(9, new_id()),
    SuspendQueue(10, new_id()),
    SetService(11, new_id(), Party.RECIPIENT, b"svc"),
    SetService(12, new_id(), Party.NOTIFIER, None),
    DeleteQueue(13, new_id()),
    CreateQueue(make_record(queue_mode=b"M")),
    linked(make_link(), b"C", notifier=make_notifier(), ntf_service_id=b"n"),
    linked(make_link(fixed_data=b"", user_data=b""), b"M"),
    SetLink(14, new_id(), make_link()),
    SetLink(15, new_id(), make_link(user_data=b"")),
    DeleteLink(16, new_id()),
]


# --- the line format ----------------------------------------------------------------


@pytest.mark.parametrize("rec", EVERY_KIND_OF_RECORD, ids=lambda r: type(r).__name__)
def test_every_kind_of_record_reads_back_as_written(rec):
    line = encode_line(encode_record(rec))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_record(line_payload(line[:-1])) == rec


def test_a_line_is_a_crc_of_its_payload_then_the_payload():
    rec = DeleteQueue(1_700_000_000, b"\x00\xff" * 12)
    line = encode_line(encode_record(rec)).decode()
    assert line == "98d91926 delete ts=1700000000 rid=AP8A_wD_AP8A_wD_AP8A_wD_AP8A_wD_\n"


def test_a_create_line_names_its_fields_and_omits_the_absent_ones():
    rec = make_record(
        recipient_id=b"\x01", sender_id=b"\x02", recipient_key=b"k", rcv_dh_secret=b""
    )
    assert encode_record(CreateQueue(rec)) == (
        "create ts=1700000000 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active"
    )


def test_the_link_fields_follow_the_old_ones_so_old_lines_read_as_before():
    link = QueueLinkData(b"\x03", b"\x04\x05", b"")
    rec = make_record(
        recipient_id=b"\x01",
        sender_id=b"\x02",
        recipient_key=b"k",
        rcv_dh_secret=b"",
        queue_mode=b"C",
        link_id=link.link_id,
    )
    assert encode_record(CreateQueue(rec, link)) == (
        "create ts=1700000000 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active"
        " mode=C lid=Aw== lfix=BAU= lusr="
    )
    assert (
        encode_record(SetLink(5, b"\x01", link))
        == "set_link ts=5 rid=AQ== lid=Aw== lfix=BAU= lusr="
    )
    assert encode_record(DeleteLink(6, b"\x01")) == "delete_link ts=6 rid=AQ=="
    old = decode_record("create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=0 status=active")
    assert old.record.queue_mode is None and old.record.link_id is None and old.link is None


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active mode=X",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active mode=",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active lid=AA==",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active lid=AA== lfix=",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active lfix= lusr=",
        "set_link ts=1 rid=AQ== lid=AA== lfix=",
        "set_link ts=1 rid=AQ== lid=AA== lfix=A lusr=",
        "delete_link ts=1 rid=AQ== lid=AA==",
        "rename ts=1 rid=AA==",
        "delete ts=1",
        "delete ts=x rid=AA==",
        "delete ts=1 rid=AA== rid=AA==",
        "delete ts=1 rid=AA== extra=1",
        "delete ts=1 rid=A",
        "delete ts=1 rid=AA",
        "delete ts=1 rid=A+==",
        "delete ts=+1 rid=AA==",
        "delete  ts=1 rid=AA==",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=2 status=active",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=paused",
        "create ts=1 rid=AQ== sid=Ag== rkey=aw== rdh= secure=1 status=active nid=AA==",
        "set_service ts=1 rid=AA== party=s svc=AA==",
    ],
)
def test_a_payload_that_is_not_a_record_is_refused(payload):
    with pytest.raises(ValueError):
        decode_record(payload)


def test_a_line_whose_checksum_does_not_match_has_no_payload():
    line = encode_line("delete ts=1 rid=AA==")[:-1]
    assert line_payload(line) == "delete ts=1 rid=AA=="
    assert line_payload(line.replace(b"ts=1", b"ts=2")) is None
    assert line_payload(line.upper()) is None
    assert line_payload(line[:8]) is None


# --- the fold -----------------------------------------------------------------------


def test_replay_folds_changes_into_records():
    rec, ntf = make_record(), make_notifier()
    rid = rec.recipient_id
    table = replay(
        [
            CreateQueue(rec),
            SecureQueue(2, rid, b"sk"),
            AddNotifier(3, rid, ntf),
            SetService(4, rid, Party.NOTIFIER, b"ns"),
            SetService(5, rid, Party.RECIPIENT, b"rs"),
            SuspendQueue(6, rid),
        ]
    )
    want = replace(
        rec,
        sender_key=b"sk",
        notifier=ntf,
        ntf_service_id=b"ns",
        rcv_service_id=b"rs",
        status=QueueStatus.OFF,
        updated_at=6,
    )
    assert table.queues == {rid: want}
    assert table.get(Party.NOTIFIER, ntf.notifier_id) == want
    assert table.get(Party.SENDER, rec.sender_id) == want


def test_replay_clears_the_notifier_service_with_the_notifier_and_forgets_deleted_queues():
    rec, other = make_record(notifier=make_notifier(), ntf_service_id=b"ns"), make_record()
    rid = rec.recipient_id
    table = replay(
        [
            CreateQueue(rec),
            CreateQueue(other),
            DeleteNotifier(2, rid),
            DeleteQueue(3, other.recipient_id),
            SecureQueue(4, other.recipient_id, b"ignored: the queue is gone"),
        ]
    )
    assert table.queues == {rid: replace(rec, notifier=None, ntf_service_id=None, updated_at=2)}
    assert table.senders == {rec.sender_id: rid}
    assert table.notifiers == {} and table.ntf_services == {}


def test_replay_folds_links_as_the_queue_has_them():
    first, second, third = make_link(), make_link(), make_link()
    a = linked(first)
    b = CreateQueue(make_record())
    c = linked(third)
    ra, rb, rc = a.recipient_id, b.recipient_id, c.recipient_id
    table = replay(
        [
            a,
            b,
            c,
            SetLink(2, rb, second),
            DeleteLink(3, ra),
            SetLink(4, ra, replace(first, user_data=b"again")),
            SetLink(5, new_id(), make_link()),  # no such queue: ignored
            DeleteQueue(6, rc),
            CreateQueue(replace(b.record, updated_at=7)),  # replaces b, and its link
        ]
    )
    assert table.links == {ra: replace(first, user_data=b"again")}
    assert table.link_ids == {first.link_id: ra}
    assert table.queues[ra].link_id == first.link_id and table.queues[ra].updated_at == 4
    assert table.queues[rb].link_id is None
    assert table.get(Party.LINK, first.link_id) == table.queues[ra]
    assert table.get(Party.LINK, second.link_id) is None
    assert table.get(Party.LINK, third.link_id) is None


async def test_the_live_state_is_the_replay_of_the_log(tmp_path):
    path = tmp_path / "queues.log"
    async with open_store_log(path, clock=Clock()) as store:
        recs = [make_record(notifier=make_notifier() if i % 2 else None) for i in range(6)]
        for rec in recs:
            await store.add_queue(rec)
        await store.secure_queue(recs[0].recipient_id, b"key")
        await store.add_notifier(recs[1].recipient_id, make_notifier())
        await store.delete_notifier(recs[3].recipient_id)
        await store.suspend_queue(recs[2].recipient_id)
        await store.set_service(recs[1].recipient_id, Party.NOTIFIER, b"svc")
        await store.delete_queue(recs[4].recipient_id)
        with_link = linked(make_link())
        await store.add_queue(with_link.record, with_link.link)
        await store.set_link(recs[0].recipient_id, make_link())
        await store.set_link(recs[5].recipient_id, make_link())
        await store.delete_link(recs[5].recipient_id)
        live = await all_records(store)
        links = {rid: link async for rid, link in store.iter_links()}
        logged = [decode_record(line_payload(line.encode())) for line in log_lines(path)]
    assert replay(logged).queues == live
    assert replay(logged).links == links and len(links) == 2
    assert len(logged) == 6 + 6 + 4


# --- compaction -----------------------------------------------------------------------


async def test_compact_records_keeps_one_create_line_per_live_queue(tmp_path):
    path = tmp_path / "queues.log"
    async with open_store_log(path, clock=Clock()) as store:
        kept, gone = make_record(), make_record()
        await store.add_queue(kept)
        await store.add_queue(gone)
        await store.secure_queue(kept.recipient_id, b"key")
        await store.delete_queue(gone.recipient_id)
        now = await store.get_queue(Party.RECIPIENT, kept.recipient_id)
    compacted = compact_records(log_lines(path))
    assert compacted == [encode_line(encode_record(CreateQueue(now))).decode()[:-1]]
    assert compact_records(compacted) == compacted
    assert compact_records(line + "\n" for line in log_lines(path)) == compacted


async def test_a_compacted_link_is_in_its_queue_s_create_line(tmp_path):
    path = tmp_path / "queues.log"
    link, later = make_link(), make_link()
    async with open_store_log(path, clock=Clock()) as store:
        a, b = linked(link), CreateQueue(make_record(queue_mode=b"C"))
        await store.add_queue(a.record, a.link)
        await store.add_queue(b.record)
        await store.set_link(a.recipient_id, replace(link, user_data=b"new"))
        await store.set_link(b.recipient_id, later)
        now_a = await store.get_queue(Party.RECIPIENT, a.recipient_id)
        now_b = await store.get_queue(Party.RECIPIENT, b.recipient_id)
    compacted = compact_records(log_lines(path))
    assert compacted == sorted(
        encode_line(encode_record(create)).decode()[:-1]
        for create in (
            CreateQueue(now_a, replace(link, user_data=b"new")),
            CreateQueue(now_b, later),
        )
    )
    async with open_store_log(path) as store:  # the open compacted it the same way
        assert log_lines(path) == compacted
        assert await store.get_link(b.recipient_id) == later
        assert await store.get_queue(Party.LINK, later.link_id) == now_b


def test_compact_records_refuses_a_damaged_line():
    good = encode_line(encode_record(DeleteQueue(1, b"x"))).decode()
    with pytest.raises(ValueError, match="line 2"):
        compact_records([good, "0" + good[1:]])


async def test_opening_compacts_the_log_and_keeps_the_old_one_as_a_backup(tmp_path):
    path = tmp_path / "queues.log"
    async with open_store_log(path, clock=Clock()) as store:
        rec = make_record()
        await store.add_queue(rec)
        await store.suspend_queue(rec.recipient_id)
    before = log_lines(path)
    async with open_store_log(path) as store:
        assert (await store.get_queue(Party.RECIPIENT, rec.recipient_id)).status is QueueStatus.OFF
    assert log_lines(path) == compact_records(before)
    [backup] = backups_of(path)
    assert log_lines(backup) == before
    assert not (tmp_path / "queues.log.new").exists()


async def test_a_log_that_is_already_compact_is_not_rewritten(tmp_path):
    path = tmp_path / "queues.log"
    async with open_store_log(path) as store:
        await store.add_queue(make_record())
        await store.add_queue(make_record())
    async with open_store_log(path):
        pass
    compacted, backups = path.read_bytes(), backups_of(path)
    async with open_store_log(path):
        pass
    assert path.read_bytes() == compacted
    assert backups_of(path) == backups


async def test_only_the_newest_backups_are_kept(tmp_path):
    path = tmp_path / "queues.log"
    for _ in range(5):
        async with open_store_log(path, backups=2) as store:
            rec = make_record()
            await store.add_queue(rec)
            await store.suspend_queue(rec.recipient_id)  # so the log is never compact already
    async with open_store_log(path, backups=2):
        pass
    backups = backups_of(path)
    assert len(backups) == 2
    # The logs the last two opens found: the queues compacted before, plus two new lines.
    assert [len(log_lines(b)) for b in backups] == [3 + 2, 4 + 2]


async def test_no_backups_at_all_can_be_asked_for(tmp_path):
    path = tmp_path / "queues.log"
    async with open_store_log(path, backups=0) as store:
        await store.add_queue(make_record())
    async with open_store_log(path, backups=0) as store:
        assert await store.queue_count() == 1
    assert backups_of(path) == []


# --- reopening ----------------------------------------------------------------------------


async def test_queues_keys_notifiers_suspension_and_deletions_survive_two_reopens(tmp_path):
    path = tmp_path / "queues.log"
    kept, changed, gone = (make_record(notifier=make_notifier()) for _ in range(3))
    new_ntf = make_notifier()
    async with open_store_log(path, clock=Clock()) as store:
        for rec in (kept, changed, gone):
            await store.add_queue(rec)
        await store.secure_queue(changed.recipient_id, b"sender key")
        await store.add_notifier(changed.recipient_id, new_ntf)
        await store.suspend_queue(changed.recipient_id)
        await store.set_service(changed.recipient_id, Party.RECIPIENT, b"svc")
        await store.delete_queue(gone.recipient_id)
        expected = await all_records(store)
    for _ in range(2):
        async with open_store_log(path) as store:
            assert await all_records(store) == expected
            assert (
                await store.get_queue(Party.NOTIFIER, new_ntf.notifier_id)
                == (expected[changed.recipient_id])
            )
            assert await store.get_queue(Party.NOTIFIER, changed.notifier.notifier_id) is None
            assert await store.get_queue(Party.SENDER, gone.sender_id) is None
            page = await store.service_queue_page(b"svc", Party.RECIPIENT, None, 10)
            assert page == [changed.recipient_id]


async def test_a_change_is_in_the_file_as_soon_as_it_returns(tmp_path):
    path = tmp_path / "queues.log"
    async with open_store_log(path, fsync="never") as store:
        rec = make_record()
        await store.add_queue(rec)
        assert compact_records(log_lines(path)) == compact_records(
            [encode_line(encode_record(CreateQueue(rec))).decode()]
        )


async def test_a_closed_store_refuses_changes(tmp_path):
    store = await StoreLogQueueStore.open(tmp_path / "queues.log")
    await store.close()
    with pytest.raises(trio.ClosedResourceError):
        await store.add_queue(make_record())


# --- durability and failures ------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["never", "batch", "always"])
async def test_concurrent_changes_all_land_under_every_fsync_policy(tmp_path, policy):
    path = tmp_path / "queues.log"
    recs = [make_record() for _ in range(30)]
    with trio.fail_after(10):
        async with open_store_log(path, fsync=policy) as store:
            async with trio.open_nursery() as nursery:
                for rec in recs:
                    nursery.start_soon(store.add_queue, rec)
        async with open_store_log(path) as store:
            assert await store.queue_count() == len(recs)


async def test_a_batch_of_concurrent_changes_shares_its_fsyncs(tmp_path, monkeypatch):
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd)))
    with trio.fail_after(10):
        async with open_store_log(tmp_path / "queues.log", fsync="batch") as store:
            fsyncs.clear()
            async with trio.open_nursery() as nursery:
                for _ in range(30):
                    nursery.start_soon(store.add_queue, make_record())
            assert 1 <= len(fsyncs) < 30


def no_space(fd: int, data: bytes) -> None:
    os.write(fd, data[: len(data) // 2])  # a short write, then the disk is full
    raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_full_disk_refuses_a_change_and_leaves_no_trace(tmp_path, monkeypatch):
    path = tmp_path / "queues.log"
    refused, later = make_record(), make_record()
    async with open_store_log(path) as store:
        monkeypatch.setattr(storelog, "write_all", no_space)
        with pytest.raises(StoreError) as info:
            await store.add_queue(refused)
        assert info.value.error.tag == "STORE"
        assert await store.get_queue(Party.RECIPIENT, refused.recipient_id) is None
        monkeypatch.undo()
        assert await store.add_queue(later) is None
    assert compact_records(log_lines(path)) == compact_records(
        [encode_line(encode_record(CreateQueue(later))).decode()]
    )
    async with open_store_log(path) as store:
        assert list(await all_records(store)) == [later.recipient_id]


def test_the_example_in_the_format_document_compacts_as_documented():
    text = (Path(__file__).parents[2] / "docs" / "store-log.md").read_text()
    blocks = [b.splitlines() for b in re.findall(r"```\n(.*?)```", text, re.S)]
    example = next(i for i, b in enumerate(blocks) if b[0].endswith("status=active"))
    assert compact_records(blocks[example]) == blocks[example + 1]


def test_the_links_example_in_the_format_document_compacts_as_documented():
    text = (Path(__file__).parents[2] / "docs" / "store-log.md").read_text()
    blocks = [b.splitlines() for b in re.findall(r"```\n(.*?)```", text, re.S)]
    example = next(i for i, b in enumerate(blocks) if b[0].endswith("lusr=dXNlciBwYXJ0"))
    assert {line.split(" ")[1] for line in blocks[example]} == {
        "create",
        "set_link",
        "delete_link",
    }
    assert compact_records(blocks[example]) == blocks[example + 1]
    state = replay(decode_record(line_payload(line.encode())) for line in blocks[example])
    assert [link.user_data for link in state.links.values()] == [b"new user part"]
