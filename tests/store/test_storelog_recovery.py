"""Store log recovery: torn tails, crashes between compaction steps, corrupt lines."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from store.durability import write_synced
from store.interfaces import NotifierCreds, Party, QueueLinkData, QueueRecord, QueueStatus
from store.journal.logfile import LogCorruptError, encode_line, line_payload
from store.journal.storelog import (
    StoreLogError,
    _backup_path,
    backups_of,
    compact_records,
    decode_record,
    open_store_log,
)
from store.queue_table import replay


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
    )
    return replace(rec, **changes)


def make_notifier() -> NotifierCreds:
    return NotifierCreds(new_id(), os.urandom(44), os.urandom(32))


def state_of(lines: list[bytes]) -> dict[bytes, QueueRecord]:
    """What a log of these lines describes (lines without LF)."""
    return replay(decode_record(line_payload(line)) for line in lines).queues


async def records_in(path: Path, **options: object) -> dict[bytes, QueueRecord]:
    async with open_store_log(path, **options) as store:
        return {r.recipient_id: r async for r in store.iter_queues()}


async def write_log(path: Path, last: str) -> None:
    """A log of several kinds of change (not yet compacted), ending with `last`."""
    async with open_store_log(path) as store:
        link = QueueLinkData(new_id(), os.urandom(300), os.urandom(100))
        a, b = make_record(), make_record(notifier=make_notifier())
        c = make_record(queue_mode=b"C", link_id=link.link_id)
        for rec in (a, b):
            await store.add_queue(rec)
        await store.add_queue(c, link)
        await store.secure_queue(a.recipient_id, os.urandom(44))
        await store.suspend_queue(b.recipient_id)
        await store.set_service(b.recipient_id, Party.NOTIFIER, b"svc")
        if last == "create":
            await store.add_queue(make_record(notifier=make_notifier(), rcv_service_id=b"r"))
        elif last == "add_notifier":
            await store.add_notifier(c.recipient_id, make_notifier())
        elif last == "set_link":
            await store.set_link(a.recipient_id, QueueLinkData(new_id(), b"fixed", b"user"))
        elif last == "delete_link":
            await store.delete_link(c.recipient_id)
        else:
            await store.delete_queue(a.recipient_id)


async def store_keeps_working(path: Path, before: dict[bytes, QueueRecord]) -> None:
    added = make_record()
    async with open_store_log(path, fsync="never") as store:
        assert await store.add_queue(added) is None
        assert await store.suspend_queue(added.recipient_id) is None
    after = await records_in(path)
    assert after.keys() == before.keys() | {added.recipient_id}
    assert after[added.recipient_id].status is QueueStatus.OFF


# --- torn tails ------------------------------------------------------------------------


@pytest.mark.parametrize("last", ["create", "add_notifier", "set_link", "delete_link", "delete"])
async def test_a_log_cut_at_every_byte_of_its_last_line_keeps_every_whole_line(
    tmp_path, caplog, last
):
    source = tmp_path / "source.log"
    await write_log(source, last)
    data = source.read_bytes()
    lines = data.split(b"\n")[:-1]
    start = len(data) - len(lines[-1]) - 1
    complete = state_of(lines[:-1])
    assert state_of(lines) != complete  # the last line matters
    for cut in range(start, len(data)):
        path = tmp_path / f"cut{cut}" / "queues.log"
        path.parent.mkdir()
        path.write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="store"):
            assert await records_in(path) == complete, cut
        assert (cut > start) == ("torn last line" in caplog.text), cut
        assert backups_of(path)[-1].read_bytes() == data[:start], cut  # cut back, then kept
        await store_keeps_working(path, complete)


async def test_a_last_line_failing_its_checksum_is_dropped_as_torn(tmp_path, caplog):
    path = tmp_path / "queues.log"
    await write_log(path, "create")
    data = path.read_bytes()
    lines = data.split(b"\n")[:-1]
    path.write_bytes(data[:-3] + (b"A" if data[-3:-2] != b"A" else b"B") + data[-2:])
    with caplog.at_level(logging.WARNING, logger="store"):
        assert await records_in(path) == state_of(lines[:-1])
    assert f"{path}:{len(lines)}: dropping a torn last line (checksum mismatch)" in caplog.text
    await store_keeps_working(path, state_of(lines[:-1]))


async def test_a_whole_log_without_its_final_newline_loses_only_the_last_line(tmp_path):
    path = tmp_path / "queues.log"
    await write_log(path, "add_notifier")
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    assert await records_in(path) == state_of(data.split(b"\n")[:-2])


# --- corrupt lines before the last ---------------------------------------------------------


def damage_line(path: Path, line_no: int) -> list[bytes]:
    """Flip one payload character of a line; returns the original lines."""
    lines = path.read_bytes().split(b"\n")[:-1]
    bad = bytearray(lines[line_no - 1])
    bad[12] = ord("x") if bad[12] != ord("x") else ord("y")
    path.write_bytes(b"\n".join(lines[: line_no - 1] + [bytes(bad)] + lines[line_no:]) + b"\n")
    return lines


async def test_a_corrupt_line_before_the_last_stops_the_open_naming_file_and_line(tmp_path):
    path = tmp_path / "queues.log"
    await write_log(path, "create")
    original = path.read_bytes()
    damage_line(path, 2)
    damaged = path.read_bytes()
    with pytest.raises(LogCorruptError, match=rf"^{path}:2: checksum mismatch$") as info:
        await records_in(path)
    assert (info.value.path, info.value.line_no) == (path, 2)
    assert path.read_bytes() == damaged != original  # nothing was changed or compacted
    assert backups_of(path) == []


async def test_the_skip_flag_skips_a_corrupt_line_with_a_warning(tmp_path, caplog):
    path = tmp_path / "queues.log"
    await write_log(path, "create")
    lines = damage_line(path, 4)  # the secure_queue line
    with caplog.at_level(logging.WARNING, logger="store"):
        got = await records_in(path, skip_corrupt=True)
    assert got == state_of(lines[:3] + lines[4:])
    assert f"{path}:4: skipping a corrupt line" in caplog.text
    assert await records_in(path) == got  # compacted without the line: opens without the flag


async def test_a_line_with_a_good_checksum_but_no_record_in_it_is_corrupt(tmp_path):
    path = tmp_path / "queues.log"
    await write_log(path, "create")
    lines = path.read_bytes().split(b"\n")[:-1]
    lines.insert(1, encode_line("rename ts=1 rid=AA==")[:-1])
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(LogCorruptError, match=r":2: unreadable record \(unknown record 'rename'\)"):
        await records_in(path)


# --- crashes during compaction -----------------------------------------------------------------
#
# Compaction steps (store/journal/storelog.py): 1 write and fsync queues.log.new; 2 rename
# queues.log to a backup; 3 rename queues.log.new to queues.log; 4 fsync the
# directory; 5 delete the oldest backups. Each test leaves the files as a crash at
# that point would, then opens the store.


async def log_and_state(path: Path) -> tuple[bytes, dict[bytes, QueueRecord]]:
    await write_log(path, "delete")
    data = path.read_bytes()
    return data, state_of(data.split(b"\n")[:-1])


def compacted(data: bytes) -> bytes:
    lines = compact_records(data.decode().splitlines())
    return "".join(line + "\n" for line in lines).encode()


@pytest.mark.parametrize("fraction", [0.0, 0.5, 1.0])
async def test_a_crash_while_writing_the_new_file_keeps_the_old_log(tmp_path, fraction):
    path = tmp_path / "queues.log"
    data, state = await log_and_state(path)
    new = compacted(data)
    write_synced(tmp_path / "queues.log.new", [new[: int(len(new) * fraction)]])
    assert await records_in(path) == state
    assert not (tmp_path / "queues.log.new").exists()
    assert path.read_bytes() == new
    await store_keeps_working(path, state)


async def test_a_crash_after_the_backup_rename_completes_the_compaction(tmp_path):
    path = tmp_path / "queues.log"
    data, state = await log_and_state(path)
    write_synced(tmp_path / "queues.log.new", [compacted(data)])
    os.rename(path, _backup_path(path))
    assert not path.exists()
    assert await records_in(path) == state
    assert not (tmp_path / "queues.log.new").exists()
    assert backups_of(path)[0].read_bytes() == data
    await store_keeps_working(path, state)


@pytest.mark.parametrize("extra_backups", [0, 7])
async def test_a_crash_after_the_new_log_is_in_place_loses_nothing(tmp_path, extra_backups):
    path = tmp_path / "queues.log"
    data, state = await log_and_state(path)
    for i in range(extra_backups):  # step 5 never ran, for several compactions
        path.with_name(f"queues.20000101T0000000000{i:02d}Z.log").write_bytes(data)
    write_synced(tmp_path / "queues.log.new", [compacted(data)])
    os.rename(path, _backup_path(path))
    os.rename(tmp_path / "queues.log.new", path)
    assert await records_in(path, backups=3) == state
    assert len(backups_of(path)) == min(3, extra_backups + 1)
    assert backups_of(path)[-1].read_bytes() == data
    await store_keeps_working(path, state)


async def test_a_missing_log_with_backups_is_refused_rather_than_started_empty(tmp_path):
    path = tmp_path / "queues.log"
    await write_log(path, "create")
    backup = _backup_path(path)
    shutil.move(path, backup)
    with pytest.raises(StoreLogError, match=rf"restore the newest backup \({backup.name}\)"):
        await records_in(path)


# --- a full disk at start -----------------------------------------------------------------


async def test_a_start_without_room_to_compact_keeps_the_log_as_it_is(
    tmp_path, monkeypatch, caplog
):
    path = tmp_path / "queues.log"
    await write_log(path, "delete")
    lines_before = path.read_bytes()
    expected = state_of(lines_before.splitlines())
    import store.journal.storelog as storelog

    def no_room(*args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storelog, "write_synced", no_room)
    assert await records_in(path) == expected
    assert path.read_bytes() == lines_before  # not compacted, nothing lost
    assert not list(tmp_path.glob("*.new"))
    assert "not compacted at start" in caplog.text
    monkeypatch.undo()
    await store_keeps_working(path, expected)
