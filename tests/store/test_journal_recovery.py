"""Journal recovery: message files and the state log cut at every byte of their last
records, uncommitted tails, damaged and missing files, state log compaction."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
import trio

from store.interfaces import Message, WriteResult
from store.journal.logfile import LogCorruptError, encode_line
from store.journal.messages import JournalMessageStore, encode_message, open_journal

QUOTA = 100


def new_id() -> bytes:
    return os.urandom(24)


def msg(ts: int = 1_700_000_000, size: int = 60) -> Message:
    return Message(new_id(), ts, b"T", os.urandom(size))


async def listed(store: JournalMessageStore, rid: bytes) -> list[Message]:
    return [m async for m in store.iter_messages(rid)]


async def contents(directory: Path, rids: list[bytes]) -> list[list[Message]]:
    async with open_journal(directory, fsync="never") as store:
        return [await listed(store, rid) for rid in rids]


async def keeps_working(directory: Path, rid: bytes, before: list[Message]) -> None:
    """The store takes a new message after the recovered ones and keeps it across a reopen."""
    m = msg()
    async with open_journal(directory, fsync="never") as store:
        want = WriteResult.STORED if before else WriteResult.STORED_INTO_EMPTY
        assert await store.write_message(rid, m, QUOTA) is want
        assert await listed(store, rid) == before + [m]
    assert await contents(directory, [rid]) == [before + [m]]


def copy_of(source: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


async def written(directory: Path, rid: bytes, other: bytes) -> tuple[list[Message], Message]:
    """Messages in two queues; the last write (to `rid`) is the last record everywhere."""
    sent = [msg(size=s) for s in (10, 300, 50)]
    async with open_journal(directory) as store:
        await store.write_message(other, msg(), QUOTA)
        for m in sent:
            await store.write_message(rid, m, QUOTA)
    return sent[:-1], sent[-1]


# --- torn tails ----------------------------------------------------------------------------


async def test_a_message_file_cut_at_every_byte_of_its_last_record_keeps_the_others(
    tmp_path, caplog
):
    source, rid, other = tmp_path / "source", new_id(), new_id()
    kept, last = await written(source, rid, other)
    [other_messages] = await contents(copy_of(source, tmp_path, "peek"), [other])
    size = (source / f"{rid.hex()}.0.msgs").stat().st_size
    start = size - len(encode_message(last))
    for cut in range(start, size):
        directory = copy_of(source, tmp_path, f"cut{cut}")
        os.truncate(directory / f"{rid.hex()}.0.msgs", cut)
        with caplog.at_level(logging.WARNING, logger="store"):
            assert await contents(directory, [rid, other]) == [kept, other_messages], cut
        assert (directory / f"{rid.hex()}.0.msgs").stat().st_size == start, cut
        await keeps_working(directory, rid, kept)
        shutil.rmtree(directory)


async def test_a_state_log_cut_at_every_byte_of_its_last_line_keeps_the_earlier_lines(
    tmp_path, caplog
):
    source, rid, other = tmp_path / "source", new_id(), new_id()
    kept, last = await written(source, rid, other)
    [other_messages] = await contents(copy_of(source, tmp_path, "peek"), [other])
    data = (source / "state.log").read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(start, len(data)):
        directory = copy_of(source, tmp_path, f"cut{cut}")
        os.truncate(directory / "state.log", cut)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="store"):
            # The last write's state line is gone: its message was never committed.
            assert await contents(directory, [rid, other]) == [kept, other_messages], cut
        assert (cut > start) == ("torn last line" in caplog.text), cut
        await keeps_working(directory, rid, kept)
        shutil.rmtree(directory)


async def test_a_lost_last_delete_line_brings_the_message_back(tmp_path):
    rid, sent = new_id(), [msg(), msg()]
    async with open_journal(tmp_path) as store:
        for m in sent:
            await store.write_message(rid, m, QUOTA)
        await store.delete_message(rid, sent[0].msg_id)
    data = (tmp_path / "state.log").read_bytes()
    os.truncate(tmp_path / "state.log", data.rstrip(b"\n").rfind(b"\n") + 1 + 5)
    assert await contents(tmp_path, [rid]) == [sent]  # delivered again, never lost


async def test_a_record_written_but_never_committed_is_cut_off(tmp_path, caplog):
    rid, kept = new_id(), msg()
    async with open_journal(tmp_path) as store:
        await store.write_message(rid, kept, QUOTA)
    path = tmp_path / f"{rid.hex()}.0.msgs"
    committed = path.stat().st_size
    with open(path, "ab") as f:  # a whole record after the committed position: no OK was sent
        f.write(encode_message(msg()))
    with caplog.at_level(logging.WARNING, logger="store"):
        assert await contents(tmp_path, [rid]) == [[kept]]
    assert path.stat().st_size == committed
    assert "truncating a torn or uncommitted tail" in caplog.text
    await keeps_working(tmp_path, rid, [kept])


async def test_a_write_whose_state_line_is_lost_after_rotation_is_cut_off(tmp_path):
    rid, sent = new_id(), [msg() for _ in range(3)]
    async with open_journal(tmp_path, rotate_after=2) as store:
        for m in sent:
            await store.write_message(rid, m, QUOTA)
    data = (tmp_path / "state.log").read_bytes()
    (tmp_path / "state.log").write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    assert await contents(tmp_path, [rid]) == [sent[:2]]
    assert sorted(p.name for p in tmp_path.glob("*.msgs")) == [f"{rid.hex()}.0.msgs"]
    await keeps_working(tmp_path, rid, sent[:2])


# --- damage --------------------------------------------------------------------------------


async def test_a_corrupt_state_line_before_the_last_stops_the_open_naming_file_and_line(tmp_path):
    rids = [new_id() for _ in range(3)]
    async with open_journal(tmp_path) as store:
        for rid in rids:
            await store.write_message(rid, msg(), QUOTA)
    state = tmp_path / "state.log"
    lines = state.read_bytes().split(b"\n")
    lines[1] = lines[1][:-1] + (b"9" if lines[1][-1:] != b"9" else b"8")
    state.write_bytes(b"\n".join(lines))
    with pytest.raises(LogCorruptError, match=rf"^{state}:2: checksum mismatch$"):
        await JournalMessageStore.open(tmp_path)
    got = await skip_open(tmp_path, rids)
    assert [len(m) for m in got] == [1, 0, 1]  # the queue of the bad line is dropped


async def skip_open(directory: Path, rids: list[bytes]) -> list[list[Message]]:
    async with open_journal(directory, skip_corrupt=True) as store:
        return [await listed(store, rid) for rid in rids]


async def test_a_damaged_record_in_the_middle_drops_it_and_what_follows_in_its_file(
    tmp_path, caplog
):
    rid, sent = new_id(), [msg(size=40) for _ in range(4)]
    async with open_journal(tmp_path) as store:
        for m in sent:
            await store.write_message(rid, m, QUOTA)
    path = tmp_path / f"{rid.hex()}.0.msgs"
    data = bytearray(path.read_bytes())
    data[len(encode_message(sent[0])) * 2 - 3] ^= 0xFF  # inside the second record's body
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="store"):
        assert await contents(tmp_path, [rid]) == [sent[:1]]
    assert "damaged record" in caplog.text
    await keeps_working(tmp_path, rid, sent[:1])


async def test_a_missing_message_file_loses_only_its_messages(tmp_path, caplog):
    rid, sent = new_id(), [msg() for _ in range(6)]
    async with open_journal(tmp_path, rotate_after=2) as store:
        for m in sent:
            await store.write_message(rid, m, QUOTA)
    (tmp_path / f"{rid.hex()}.1.msgs").unlink()
    with caplog.at_level(logging.WARNING, logger="store"):
        assert await contents(tmp_path, [rid]) == [sent[:2] + sent[4:]]
    assert "missing" in caplog.text


async def test_files_no_state_line_points_to_are_deleted_at_open(tmp_path):
    rid = new_id()
    async with open_journal(tmp_path) as store:
        await store.write_message(rid, msg(), QUOTA)
    stray = [tmp_path / f"{new_id().hex()}.0.msgs", tmp_path / f"{rid.hex()}.7.msgs"]
    for p in stray:
        p.write_bytes(encode_message(msg()))
    (tmp_path / "state.log.new").write_bytes(b"half a compaction")
    (tmp_path / "notes.txt").write_text("not ours")
    assert [len(m) for m in await contents(tmp_path, [rid])] == [1]
    assert not any(p.exists() for p in stray)
    assert not (tmp_path / "state.log.new").exists()
    assert (tmp_path / "notes.txt").exists()


# --- state log compaction ----------------------------------------------------------------------


async def test_the_state_log_is_compacted_at_open_to_one_line_per_queue(tmp_path):
    rids = [new_id() for _ in range(3)]
    async with open_journal(tmp_path) as store:
        for _ in range(5):
            for rid in rids:
                await store.write_message(rid, msg(), QUOTA)
        head = await store.peek_message(rids[0])
        await store.delete_message(rids[0], head.msg_id)
        await store.delete_queue_messages(rids[2])
    assert len((tmp_path / "state.log").read_text().splitlines()) == 15 + 2
    got = await contents(tmp_path, rids)
    assert len((tmp_path / "state.log").read_text().splitlines()) == 2
    assert [len(m) for m in got] == [4, 5, 0]
    assert await contents(tmp_path, rids) == got


@pytest.mark.parametrize("policy", ["never", "batch", "always"])
async def test_a_long_state_log_is_compacted_while_running(tmp_path, policy):
    rids = [new_id() for _ in range(4)]
    kept = {rid: [] for rid in rids}
    with trio.fail_after(30):
        async with open_journal(tmp_path, fsync=policy, compact_state_at=4096) as store:
            for i in range(200):
                rid = rids[i % 4]
                m = msg()
                await store.write_message(rid, m, QUOTA)
                kept[rid].append(m)
                if i % 3 == 0:
                    head = await store.peek_message(rid)
                    await store.delete_message(rid, head.msg_id)
                    kept[rid].pop(0)
            assert store.statistics().state_log_bytes < 5000  # compacted near 4096 bytes
            assert (tmp_path / "state.log").stat().st_size == store.statistics().state_log_bytes
        assert await contents(tmp_path, rids) == [kept[rid] for rid in rids]


async def test_a_state_line_for_a_queue_id_of_odd_hex_is_corrupt(tmp_path):
    (tmp_path / "state.log").write_bytes(encode_line("abc 0 0 0 0 0") + encode_line("ab -"))
    with pytest.raises(LogCorruptError, match=r"state.log:1: unreadable record \(bad queue id\)"):
        await JournalMessageStore.open(tmp_path)


async def test_a_start_without_room_to_compact_the_state_log_keeps_it_as_it_is(
    tmp_path, monkeypatch, caplog
):
    rids = [new_id() for _ in range(2)]
    async with open_journal(tmp_path) as store:
        for _ in range(3):
            for rid in rids:
                await store.write_message(rid, msg(), QUOTA)
        head = await store.peek_message(rids[0])
        await store.delete_message(rids[0], head.msg_id)
    state = (tmp_path / "state.log").read_bytes()
    import store.journal.files as files

    def no_room(*args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "atomic_write", no_room)
    got = await contents(tmp_path, rids)
    assert [len(m) for m in got] == [2, 3]
    assert (tmp_path / "state.log").read_bytes() == state
    assert "not compacted at start" in caplog.text
    monkeypatch.undo()
    assert await contents(tmp_path, rids) == got
