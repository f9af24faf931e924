"""Opening a store log streams: the same compacted log as the in-memory reference,
in memory bounded by the live queues rather than by the log's length."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from pipeline.synth import synthetic_lines
from store.interfaces import QueueRecord
from store.journal import logfile, storelog
from store.journal.logfile import encode_line
from store.journal.storelog import backups_of, iter_snapshot_lines, open_log
from store.journal.storelog_format import compact_records, encode_record, snapshot_lines
from store.queue_table import CreateQueue, DeleteQueue, replay


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines))


def record(i: int) -> QueueRecord:
    return QueueRecord(
        recipient_id=i.to_bytes(24, "big"),
        sender_id=(i + 10**9).to_bytes(24, "big"),
        recipient_key=os.urandom(44),
        rcv_dh_secret=os.urandom(32),
        sender_key=None,
        snd_secure=True,
        updated_at=1_700_000_000 + i,
    )


def line_of(rec: object) -> str:
    return encode_line(encode_record(rec))[:-1].decode("ascii")  # type: ignore[arg-type]


def test_opening_a_synthetic_log_gives_the_reference_compaction(tmp_path):
    lines = list(synthetic_lines(5000, seed=7))
    log = tmp_path / "queues.log"
    write_lines(log, lines)
    table = open_log(log, backups=1, skip_corrupt=False)
    expected = compact_records(lines)
    assert log.read_text().splitlines() == expected
    assert len(table.queues) == sum(" create " in line for line in expected)
    assert len(table.services.by_id) == sum(" add_service " in line for line in expected) == 8
    assert len(backups_of(log)) == 1


def test_snapshot_lines_stream_in_the_order_of_the_sorted_list(monkeypatch):
    table = replay(CreateQueue(record(i)) for i in range(300))
    # A coarser checksum key (its top 3 bits) keeps the order but makes most lines
    # share theirs, so the ties must be ordered by the whole line.
    real = storelog._snapshot_crc
    monkeypatch.setattr(storelog, "_snapshot_crc", lambda rec: real(rec) >> 29)
    assert list(iter_snapshot_lines(table)) == snapshot_lines(table)


def test_a_compact_log_is_recognised_while_read_and_left_alone(tmp_path):
    log = tmp_path / "queues.log"
    write_lines(log, snapshot_lines(replay(CreateQueue(record(i)) for i in range(50))))
    before = log.read_bytes()
    open_log(log, backups=3, skip_corrupt=False)
    assert log.read_bytes() == before
    assert backups_of(log) == []


@pytest.mark.parametrize("damage", ["unsorted", "duplicate", "not canonical", "not a create"])
def test_a_log_that_only_looks_compact_is_rewritten(tmp_path, damage):
    creates = snapshot_lines(replay(CreateQueue(record(i)) for i in range(20)))
    if damage == "unsorted":
        creates[3], creates[4] = creates[4], creates[3]
    elif damage == "duplicate":
        creates.insert(5, creates[5])
    elif damage == "not canonical":  # an integer written with a leading zero reads the same
        payload = creates[7][9:].replace(" ts=", " ts=0", 1)
        creates[7] = encode_line(payload)[:-1].decode("ascii")
    else:
        creates.append(line_of(DeleteQueue(1, record(999).recipient_id)))
    log = tmp_path / "queues.log"
    write_lines(log, creates)
    open_log(log, backups=3, skip_corrupt=False)
    assert log.read_text().splitlines() == compact_records(creates)
    assert len(backups_of(log)) == 1


def test_a_skipped_corrupt_line_makes_the_open_rewrite_the_log(tmp_path):
    lines = snapshot_lines(replay(CreateQueue(record(i)) for i in range(10)))
    broken = "00000000" + lines[4][8:]
    log = tmp_path / "queues.log"
    write_lines(log, [*lines[:4], broken, *lines[5:]])
    table = open_log(log, backups=1, skip_corrupt=True)
    assert len(table.queues) == 9
    assert log.read_text().splitlines() == compact_records(lines[:4] + lines[5:])


def test_a_torn_tail_is_cut_and_the_rest_compacted(tmp_path):
    lines = list(synthetic_lines(300, seed=3))
    log = tmp_path / "queues.log"
    write_lines(log, lines)
    with open(log, "ab") as f:
        f.write(b"0123abcd create ts=1")  # no LF: a torn append
    open_log(log, backups=0, skip_corrupt=False)
    assert log.read_text().splitlines() == compact_records(lines)


def test_memory_follows_the_live_queues_not_the_length_of_the_log(tmp_path, monkeypatch):
    """A long log that creates and deletes the same few queues over and over."""
    monkeypatch.setattr(logfile, "READ_CHUNK", 64 * 1024)
    lines = []
    for round_ in range(1000):
        for i in range(20):
            rec = record(i)
            lines.append(line_of(CreateQueue(rec)))
            if round_ < 999:
                lines.append(line_of(DeleteQueue(rec.updated_at + 1, rec.recipient_id)))
    log = tmp_path / "queues.log"
    write_lines(log, lines)
    size = log.stat().st_size
    tracemalloc.start()
    try:
        table = open_log(log, backups=0, skip_corrupt=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(table.queues) == 20
    assert size > 5_000_000
    assert peak < size / 10  # one chunk of the file and 20 queues, not 40,000 records
    assert log.read_text().splitlines() == compact_records(lines)
