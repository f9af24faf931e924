"""The journal message store: record format, reopening, rotation, file handles, group
commit, and what a full disk or a failed fsync leaves behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio
import trio.testing

from store.interfaces import Message, StoreError, WriteResult
from store.journal import messages
from store.journal.messages import (
    JournalMessageStore,
    Pos,
    decode_message,
    encode_message,
    open_journal,
    parse_state_line,
    state_line,
)

QUOTA = 5


def new_id() -> bytes:
    return os.urandom(24)


def msg(ts: int = 1_700_000_000, body: bytes | None = None) -> Message:
    return Message(new_id(), ts, b"T", os.urandom(60) if body is None else body)


def marker_for(m: Message) -> Message:
    return Message(m.msg_id, m.ts, b"", b"", quota=True)


async def drain(store: JournalMessageStore, rid: bytes) -> list[Message]:
    out = []
    while (head := await store.peek_message(rid)) is not None:
        assert (await store.delete_message(rid, head.msg_id))[0]
        out.append(head)
    return out


async def listed(store: JournalMessageStore, rid: bytes) -> list[Message]:
    return [m async for m in store.iter_messages(rid)]


def files_of(directory: Path, rid: bytes) -> list[str]:
    return sorted(p.name for p in directory.glob(f"{rid.hex()}.*.msgs"))


# --- formats ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "m",
    [
        Message(b"i" * 24, 1_700_000_000, b"T", b"body"),
        Message(b"i" * 24, -1, b"F\x00x", b""),
        Message(b"", 0, b"", os.urandom(16064)),
        Message(b"q" * 24, 99, b"", b"", quota=True),
    ],
    ids=["message", "odd flags", "largest body", "quota marker"],
)
def test_a_message_record_reads_back_as_written(m):
    assert decode_message(encode_message(m)) == m


def test_a_message_record_is_length_crc_then_payload():
    record = encode_message(Message(b"ab", 258, b"T", b"xyz"))
    payload = b"M\x02ab" + (258).to_bytes(8, "big") + b"\x00\x01T" + b"xyz"
    assert record[:4] == len(payload).to_bytes(4, "big")
    assert record[8:] == payload


def test_a_damaged_or_cut_record_is_refused():
    record = encode_message(msg())
    for bad in (record[:-1], record[:7], record[:20] + b"\xff" + record[21:], b"X" + record[1:]):
        with pytest.raises(ValueError):
            decode_message(bad)


def test_a_state_line_reads_back_as_written():
    rid = new_id()
    line = state_line(rid, Pos(2, 10), Pos(3, 40, 7))
    assert line == f"{rid.hex()} 2 10 3 40 7"
    assert parse_state_line(line) == (rid, (Pos(2, 10), Pos(3, 40, 7)))
    assert parse_state_line(f"{rid.hex()} -") == (rid, None)


@pytest.mark.parametrize(
    "line", ["abc 0 0 0 0 0", "ab 0 0 0 0", "ab 0 0 0 0 x", "ab 1 0 0 5 1", "AB 0 0 0 0 0", "ab"]
)
def test_a_state_line_that_makes_no_sense_is_refused(line):
    with pytest.raises(ValueError):
        parse_state_line(line)


# --- reopening -----------------------------------------------------------------------------


async def test_messages_and_a_quota_marker_survive_two_reopens_in_order(tmp_path):
    full, partial = new_id(), new_id()
    sent = [msg(ts=i) for i in range(QUOTA)]
    refused = msg(ts=99)
    other = [msg(), msg(), msg()]
    async with open_journal(tmp_path) as store:
        for m in sent + [refused, msg()]:
            await store.write_message(full, m, QUOTA)
        for m in other:
            await store.write_message(partial, m, QUOTA)
        await store.delete_message(partial, other[0].msg_id)
    for _ in range(2):
        async with open_journal(tmp_path) as store:
            assert await listed(store, full) == sent + [marker_for(refused)]
            assert await listed(store, partial) == other[1:]
            assert await store.write_message(full, msg(), QUOTA) is WriteResult.QUOTA_EXCEEDED
            assert await store.queue_size(full) == QUOTA + 1
    async with open_journal(tmp_path) as store:
        assert await drain(store, full) == sent + [marker_for(refused)]
        again = msg()
        assert await store.write_message(full, again, QUOTA) is WriteResult.STORED_INTO_EMPTY
    async with open_journal(tmp_path) as store:
        assert await drain(store, full) == [again]


async def test_an_unacknowledged_head_keeps_its_id_across_a_reopen(tmp_path):
    rid, m = new_id(), msg()
    async with open_journal(tmp_path) as store:
        await store.write_message(rid, m, QUOTA)
        assert await store.peek_message(rid) == m
    async with open_journal(tmp_path) as store:
        assert await store.peek_message(rid) == m
        assert await store.delete_message(rid, m.msg_id) == (True, None)


async def test_deleted_queues_and_emptied_queues_leave_no_files_after_a_reopen(tmp_path):
    gone, emptied, kept = new_id(), new_id(), new_id()
    async with open_journal(tmp_path) as store:
        for rid in (gone, emptied, kept):
            await store.write_message(rid, msg(), QUOTA)
        assert await store.delete_queue_messages(gone) == 1
        assert files_of(tmp_path, gone) == []
        await drain(store, emptied)
    async with open_journal(tmp_path) as store:
        assert {rid async for rid in store.queue_ids()} == {kept}
    assert files_of(tmp_path, emptied) == [] and files_of(tmp_path, gone) == []
    assert len((tmp_path / "state.log").read_text().splitlines()) == 1


# --- rotation and file handles ---------------------------------------------------------------


async def test_files_rotate_after_n_messages_and_consumed_files_are_deleted(tmp_path):
    rid = new_id()
    sent = [msg(ts=i) for i in range(8)]
    async with open_journal(tmp_path, rotate_after=3) as store:
        for m in sent:
            await store.write_message(rid, m, 100)
        assert files_of(tmp_path, rid) == [f"{rid.hex()}.{n}.msgs" for n in (0, 1, 2)]
        for m in sent[:4]:
            await store.delete_message(rid, m.msg_id)
        assert files_of(tmp_path, rid) == [f"{rid.hex()}.{n}.msgs" for n in (1, 2)]
    async with open_journal(tmp_path, rotate_after=3) as store:
        assert await listed(store, rid) == sent[4:]
        more = [msg(), msg()]
        for m in more:
            await store.write_message(rid, m, 100)
        assert files_of(tmp_path, rid) == [f"{rid.hex()}.{n}.msgs" for n in (1, 2, 3)]
        assert await drain(store, rid) == sent[4:] + more
        assert files_of(tmp_path, rid) == [f"{rid.hex()}.3.msgs"]


async def test_idle_file_handles_are_closed_and_idle_empty_queues_forgotten(tmp_path):
    rids = [new_id() for _ in range(6)]
    sent = {rid: [msg(), msg()] for rid in rids}
    async with open_journal(tmp_path, max_open_files=2) as store:
        for rid in rids:
            for m in sent[rid]:
                await store.write_message(rid, m, QUOTA)
            assert store.statistics().open_files <= 2
        for rid in rids:  # reading reopens what was closed
            assert await listed(store, rid) == sent[rid]
        for rid in rids[:3]:
            await drain(store, rid)
        for rid in rids[3:]:  # touching other queues evicts the emptied ones' handles
            await store.peek_message(rid)
        assert store.statistics().queues == 3
        assert store.statistics().open_files <= 2
        for rid in rids[:3]:
            assert files_of(tmp_path, rid) == []
            assert await store.write_message(rid, msg(), QUOTA) is WriteResult.STORED_INTO_EMPTY
    async with open_journal(tmp_path) as store:
        for rid in rids[3:]:
            assert await listed(store, rid) == sent[rid]


# --- fsync policies and group commit -----------------------------------------------------------


@pytest.mark.parametrize("policy", ["never", "batch", "always"])
async def test_concurrent_writers_each_keep_their_order_under_every_fsync_policy(tmp_path, policy):
    rids = [new_id() for _ in range(3)]
    sent: dict[tuple[bytes, int], list[Message]] = {}

    async def writer(store: JournalMessageStore, rid: bytes, n: int) -> None:
        for i in range(10):
            m = Message(new_id(), i, bytes([n]), os.urandom(30))
            assert await store.write_message(rid, m, 1000) is not WriteResult.QUOTA_EXCEEDED
            sent.setdefault((rid, n), []).append(m)

    with trio.fail_after(20):
        async with open_journal(tmp_path, fsync=policy, rotate_after=7) as store:
            async with trio.open_nursery() as nursery:
                for rid in rids:
                    for n in range(4):
                        nursery.start_soon(writer, store, rid, n)
        async with open_journal(tmp_path) as store:
            for rid in rids:
                got = await drain(store, rid)
                assert len(got) == 40
                for n in range(4):
                    assert [m for m in got if m.flags == bytes([n])] == sent[(rid, n)]


async def test_a_batch_of_concurrent_writes_shares_its_fsyncs(tmp_path, monkeypatch):
    rounds = []
    real = messages._fsync_parallel

    async def fsync_parallel(fds: list[int], directory: Path | None) -> list[OSError]:
        rounds.append(fds)
        return await real(fds, directory)

    monkeypatch.setattr(messages, "_fsync_parallel", fsync_parallel)
    with trio.fail_after(10):
        async with open_journal(tmp_path, fsync="batch") as store:
            async with trio.open_nursery() as nursery:
                for _ in range(30):
                    nursery.start_soon(store.write_message, new_id(), msg(), QUOTA)
    assert 1 <= len(rounds) < 30
    assert sum(map(len, rounds)) == 30  # every queue's file is fsynced once


@pytest.mark.parametrize("policy", ["batch", "always"])
async def test_data_is_fsynced_before_the_state_line_that_points_to_it(
    tmp_path, monkeypatch, policy
):
    events = []
    real_fsync_all = messages._fsync_all
    monkeypatch.setattr(
        messages, "_fsync_all", lambda fds, d: (events.append("data fsync"), real_fsync_all(fds, d))
    )
    async with open_journal(tmp_path, fsync=policy) as store:
        real_append = store._append_state
        monkeypatch.setattr(
            store, "_append_state", lambda lines: (events.append("state line"), real_append(lines))
        )
        await store.write_message(new_id(), msg(), QUOTA)
        assert events == ["data fsync", "state line"]


async def test_a_pending_write_is_invisible_until_its_commit(tmp_path, mock_clock):
    rid, first, second = new_id(), msg(), msg()
    results = []

    async def write(m: Message) -> None:
        results.append(await store.write_message(rid, m, 2))

    async with open_journal(tmp_path, fsync="batch", window=1.0) as store:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, first)
            await trio.testing.wait_all_tasks_blocked()
            assert await store.peek_message(rid) is None
            assert await store.queue_size(rid) == 0
            nursery.start_soon(write, second)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            mock_clock.jump(1.0)
        assert results == [WriteResult.STORED_INTO_EMPTY, WriteResult.STORED]
        assert await listed(store, rid) == [first, second]


async def test_a_cancelled_writer_does_not_strand_the_others_of_its_round(tmp_path, mock_clock):
    rid = new_id()
    scopes: dict[str, trio.CancelScope] = {}
    finished = []

    async def writer(name: str) -> None:
        with trio.CancelScope() as scopes[name]:
            await store.write_message(rid, msg(), QUOTA)
            finished.append(name)

    async with open_journal(tmp_path, fsync="batch", window=1.0) as store:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer, "leader")  # it runs the round: shielded, it completes
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(writer, "follower")
            nursery.start_soon(writer, "cancelled follower")
            await trio.testing.wait_all_tasks_blocked()
            scopes["leader"].cancel()
            scopes["cancelled follower"].cancel()
            mock_clock.jump(1.0)
        assert sorted(finished) == ["follower", "leader"]
        # The cancelled writer's message was written before it gave up; like an
        # unanswered SEND, it may be stored.
        assert await store.queue_size(rid) == 3


async def test_closing_commits_every_pending_write(tmp_path, mock_clock):
    rid, m = new_id(), msg()
    store = await JournalMessageStore.open(tmp_path, fsync="batch", window=1.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.write_message, rid, m, QUOTA)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(store.close)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(1.0)
    async with open_journal(tmp_path) as store:
        assert await listed(store, rid) == [m]


async def test_a_closed_store_refuses_writes(tmp_path):
    store = await JournalMessageStore.open(tmp_path)
    await store.close()
    with pytest.raises(trio.ClosedResourceError):
        await store.write_message(new_id(), msg(), QUOTA)


async def test_a_store_closed_by_a_cancelled_caller_commits_and_releases_its_files(tmp_path):
    rid = new_id()
    m = msg()
    store = await JournalMessageStore.open(tmp_path)
    await store.write_message(rid, m, QUOTA)
    assert store.statistics().open_files > 0
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.close()
    assert store.statistics().open_files == 0
    with pytest.raises(OSError):
        os.fstat(store._state_fd)
    async with open_journal(tmp_path) as reopened:
        assert await listed(reopened, rid) == [m]


# --- a full disk and failing fsyncs --------------------------------------------------------------


def failing_writes(store: JournalMessageStore, *, state: bool, error: int = errno.ENOSPC):
    """A write_all that fails on message files (or on the state log): half written, then error."""
    real = messages.write_all

    def write_all(fd: int, data: bytes) -> None:
        if (fd == store._state_fd) != state:
            return real(fd, data)
        os.write(fd, data[: len(data) // 2])
        raise OSError(error, os.strerror(error))

    return write_all


@pytest.mark.parametrize("policy", ["never", "batch", "always"])
@pytest.mark.parametrize("failing", ["message file", "state log"])
async def test_a_full_disk_refuses_the_write_and_a_later_write_succeeds_without_a_phantom(
    tmp_path, monkeypatch, policy, failing
):
    rid, before, refused, later = new_id(), msg(), msg(), msg()
    async with open_journal(tmp_path, fsync=policy) as store:
        await store.write_message(rid, before, QUOTA)
        size = (tmp_path / f"{rid.hex()}.0.msgs").stat().st_size
        with monkeypatch.context() as patch:
            failing_write_all = failing_writes(store, state=failing == "state log")
            patch.setattr(messages, "write_all", failing_write_all)
            with pytest.raises(StoreError) as info:
                await store.write_message(rid, refused, QUOTA)
            assert info.value.error.tag == "STORE"
            assert "No space left on device" in str(info.value)
        assert await listed(store, rid) == [before]
        assert (tmp_path / f"{rid.hex()}.0.msgs").stat().st_size == size
        assert await store.write_message(rid, later, QUOTA) is WriteResult.STORED
        assert await listed(store, rid) == [before, later]
    async with open_journal(tmp_path) as store:
        assert await drain(store, rid) == [before, later]


async def test_a_full_disk_on_a_new_queue_leaves_it_empty_and_writable(tmp_path, monkeypatch):
    rid, m = new_id(), msg()
    async with open_journal(tmp_path) as store:
        with monkeypatch.context() as patch:
            patch.setattr(messages, "write_all", failing_writes(store, state=False))
            with pytest.raises(StoreError):
                await store.write_message(rid, msg(), QUOTA)
        assert {r async for r in store.queue_ids()} == set()
        assert await store.write_message(rid, m, QUOTA) is WriteResult.STORED_INTO_EMPTY
    async with open_journal(tmp_path) as store:
        assert await drain(store, rid) == [m]


async def test_a_full_disk_refuses_a_delete_and_keeps_the_message(tmp_path, monkeypatch):
    rid, m = new_id(), msg()
    async with open_journal(tmp_path) as store:
        await store.write_message(rid, m, QUOTA)
        with monkeypatch.context() as patch:
            patch.setattr(messages, "write_all", failing_writes(store, state=True))
            with pytest.raises(StoreError):
                await store.delete_message(rid, m.msg_id)
            with pytest.raises(StoreError):
                await store.delete_queue_messages(rid)
        assert await store.peek_message(rid) == m
    async with open_journal(tmp_path) as store:
        assert await store.peek_message(rid) == m


async def test_a_failed_data_fsync_rolls_the_write_back(tmp_path, monkeypatch):
    rid, before, later = new_id(), msg(), msg()

    def broken(fds: list[int], directory: Path | None) -> None:
        raise OSError(errno.EIO, "Input/output error")

    async with open_journal(tmp_path, fsync="batch") as store:
        await store.write_message(rid, before, QUOTA)
        with monkeypatch.context() as patch:
            patch.setattr(messages, "_fsync_all", broken)
            with pytest.raises(StoreError, match="Input/output error"):
                await store.write_message(rid, msg(), QUOTA)
        assert await listed(store, rid) == [before]
        await store.write_message(rid, later, QUOTA)
    async with open_journal(tmp_path) as store:
        assert await drain(store, rid) == [before, later]


async def test_a_failed_state_fsync_rolls_the_write_back_and_restates_the_position(
    tmp_path, monkeypatch
):
    rid, before, later = new_id(), msg(), msg()
    async with open_journal(tmp_path, fsync="always") as store:
        await store.write_message(rid, before, QUOTA)
        real = os.fsync

        def fsync(fd: int) -> None:
            if fd == store._state_fd:
                raise OSError(errno.EIO, "Input/output error")
            real(fd)

        with monkeypatch.context() as patch:
            patch.setattr(os, "fsync", fsync)
            with pytest.raises(StoreError, match="Input/output error"):
                await store.write_message(rid, msg(), QUOTA)
        assert await listed(store, rid) == [before]
    async with open_journal(tmp_path) as store:  # the restated position wins over the failed one
        assert await listed(store, rid) == [before]
        await store.write_message(rid, later, QUOTA)
        assert await drain(store, rid) == [before, later]


async def test_a_queue_deleted_while_a_write_and_an_ack_wait_for_the_state_log_stays_empty(
    tmp_path,
):
    rid, head, pending, later = new_id(), msg(), msg(), msg()
    acked = []
    async with open_journal(tmp_path, fsync="always") as store:
        await store.write_message(rid, head, QUOTA)
        state_sync_started, release = trio.Event(), trio.Event()
        real_fsync_state = store._fsync_state

        async def held_fsync_state() -> None:
            state_sync_started.set()
            await release.wait()
            await real_fsync_state()

        async def ack() -> None:
            acked.append(await store.delete_message(rid, head.msg_id))

        store._fsync_state = held_fsync_state  # type: ignore[method-assign]
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.write_message, rid, pending, QUOTA)
                await state_sync_started.wait()
                nursery.start_soon(ack)
                await trio.testing.wait_all_tasks_blocked()  # it waits for the state log
                nursery.start_soon(store.delete_queue_messages, rid)
                await trio.testing.wait_all_tasks_blocked()
                release.set()
        assert acked == [(True, None)]
        assert await store.queue_size(rid) == 0
        assert await store.write_message(rid, later, QUOTA) is WriteResult.STORED_INTO_EMPTY
        assert await listed(store, rid) == [later]
