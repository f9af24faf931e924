"""The router's stats log: line format, interval and day roll-over, state across restarts.

Time runs on trio's MockClock, moved by the test: the log's wall clock is the mock
clock plus a fixed UTC start, so a day passes in no real time.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from datetime import UTC, datetime

import pytest
import trio
from statslog_driver import CountingRouter, jump_to

from router.server.core.counters import RouterStatistics
from router.server.ops.active_queues import HyperLogLog, queue_hash
from router.server.ops.stats_lines import (
    COLUMNS,
    COUNTER_COLUMNS,
    GAUGE_COLUMNS,
    HEADER,
    format_line,
    period_label,
    period_resets,
    stats_line,
)
from router.server.ops.statslog import StatsLog


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def mock_wall(start: str):
    """A wall clock that reads `start` now and moves with trio's clock."""
    offset = utc(start) - trio.current_time()
    return lambda: offset + trio.current_time()


def read_rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


async def sleep_until(wall, text: str) -> None:
    await trio.sleep(utc(text) - wall())


@pytest.mark.parametrize(
    ("seconds", "label"),
    [(3600, "PT1H"), (900, "PT15M"), (60, "PT1M"), (5, "PT5S"), (5400, "PT1H30M"), (86400, "P1D")],
)
def test_periods_are_labelled_as_iso_8601_durations(seconds, label):
    assert period_label(seconds) == label


def test_a_line_lists_every_column_in_header_order():
    counts = {"msgs_sent": 7, "queues_created": 2}
    gauges = {"subscriptions": 3, "clients": 1}
    active = {"active_queues_day": 4, "active_queues_week": 5, "active_queues_month": 6}
    line = format_line(utc("2024-05-01T13:00:00"), 3600, counts, gauges, active)
    row = dict(zip(COLUMNS, line.rstrip("\n").split(","), strict=True))
    assert row["time"] == "2024-05-01T13:00:00Z"
    assert row["period"] == "PT1H"
    assert (row["queues_created"], row["msgs_sent"], row["msgs_expired"]) == ("2", "7", "0")
    assert (row["subscriptions"], row["clients"]) == ("3", "1")
    assert row["active_queues_month"] == "6"


@pytest.mark.parametrize(
    ("old", "new", "resets"),
    [
        ("2024-05-01", "2024-05-02", (False, False)),  # Wednesday -> Thursday
        ("2024-05-05", "2024-05-06", (True, False)),  # Sunday -> Monday
        ("2024-05-31", "2024-06-01", (False, True)),  # Friday -> Saturday, new month
        ("2024-04-28", "2024-05-06", (True, True)),  # a gap over both
    ],
)
def test_week_and_month_sketches_clear_when_their_period_ends(old, new, resets):
    assert period_resets(utc(old + "T00:00:00"), utc(new + "T00:00:00")) == resets


def test_a_sketch_counts_distinct_queues_within_a_few_percent():
    sketch = HyperLogLog()
    for i in range(20_000):
        sketch.add_hash(queue_hash(i.to_bytes(24, "big")))
        sketch.add_hash(queue_hash(i.to_bytes(24, "big")))
    assert abs(sketch.estimate() - 20_000) < 20_000 * 0.05


def test_a_sketch_is_exact_for_a_handful_of_queues():
    sketch = HyperLogLog()
    assert sketch.estimate() == 0
    for i in range(7):
        sketch.add_hash(queue_hash(bytes([i]) * 24))
    assert sketch.estimate() == 7


def test_a_sketch_survives_its_text_form():
    sketch = HyperLogLog()
    sketch.add_hash(queue_hash(b"q" * 24))
    assert HyperLogLog.from_text(sketch.to_text()).registers == sketch.registers


def test_a_line_is_the_difference_of_two_snapshots():
    router = CountingRouter()
    router.counters.messages_sent = 10
    before = router.statistics()
    router.counters.messages_sent += 3
    router.counters.messages_acked += 2
    router.subscriptions, router.clients = 4, 2
    line = stats_line(utc("2024-05-01T13:00:00"), 3600, before, router.statistics(), {})
    row = dict(zip(COLUMNS, line.rstrip("\n").split(","), strict=True))
    assert (row["msgs_sent"], row["msgs_acknowledged"], row["queues_created"]) == ("3", "2", "0")
    assert (row["subscriptions"], row["clients"]) == ("4", "2")


def test_every_count_column_writes_a_field_of_the_statistics():
    fields = {f.name for f in dataclasses.fields(RouterStatistics)}
    assert set(COUNTER_COLUMNS.values()) <= fields
    assert set(GAUGE_COLUMNS.values()) <= fields


async def test_the_log_writes_one_line_per_interval_and_a_day_line_at_midnight(
    mock_clock, tmp_path
):
    wall = mock_wall("2024-05-05T22:30:00")  # a Sunday
    router = CountingRouter()
    stats = StatsLog(tmp_path / "stats.csv", router.statistics, wall_clock=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(stats.run)
        router.counters.queues_created += 2
        router.counters.messages_sent += 5
        stats.record_active_queue(b"a" * 24)
        for when in ("2024-05-05T23:00:00", "2024-05-05T23:10:00"):
            await jump_to(mock_clock, wall, utc(when))
        router.counters.messages_sent += 1
        stats.record_active_queue(b"b" * 24)
        await jump_to(mock_clock, wall, utc("2024-05-06T00:00:00"))
        await stats.wait_lines_written(3)
        await jump_to(mock_clock, wall, utc("2024-05-06T00:30:00"))
        stats.record_active_queue(b"c" * 24)
        await jump_to(mock_clock, wall, utc("2024-05-06T01:00:00"))
        await stats.wait_lines_written(4)
        nursery.cancel_scope.cancel()
    rows = read_rows(tmp_path / "stats.csv")
    assert [(r["time"], r["period"]) for r in rows] == [
        ("2024-05-05T22:00:00Z", "PT1H"),
        ("2024-05-05T23:00:00Z", "PT1H"),
        ("2024-05-05T00:00:00Z", "P1D"),
        ("2024-05-06T00:00:00Z", "PT1H"),
    ]
    assert [int(r["msgs_sent"]) for r in rows] == [5, 1, 6, 0]
    assert rows[2]["queues_created"] == "2"
    assert [r["active_queues_day"] for r in rows] == ["1", "2", "2", "1"]
    # Monday starts a new week; May goes on
    assert [r["active_queues_week"] for r in rows] == ["1", "2", "2", "1"]
    assert [r["active_queues_month"] for r in rows] == ["1", "2", "2", "3"]


async def test_a_clean_stop_and_start_within_an_interval_keeps_counting_it(mock_clock, tmp_path):
    path = tmp_path / "stats.csv"
    wall = mock_wall("2024-05-01T10:05:00")
    first = CountingRouter()
    async with trio.open_nursery() as nursery:
        first_log = StatsLog(path, first.statistics, wall_clock=wall)
        await nursery.start(first_log.run)
        first.counters.messages_sent += 4
        first_log.record_active_queue(b"a" * 24)
        await jump_to(mock_clock, wall, utc("2024-05-01T10:20:00"))
        nursery.cancel_scope.cancel()
    second = CountingRouter()  # a new process counts from zero
    stats = StatsLog(path, second.statistics, wall_clock=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(stats.run)
        assert stats.state()["counts"]["msgs_sent"] == 4
        second.counters.messages_sent += 1
        stats.record_active_queue(b"a" * 24)
        await jump_to(mock_clock, wall, utc("2024-05-01T11:00:00"))
        await stats.wait_lines_written(1)
        nursery.cancel_scope.cancel()
    rows = read_rows(path)
    assert [(r["time"], r["msgs_sent"], r["active_queues_day"]) for r in rows] == [
        ("2024-05-01T10:00:00Z", "5", "1")
    ]


def test_a_restart_keeps_the_days_earlier_intervals(tmp_path):
    path = tmp_path / "stats.csv"
    first = CountingRouter()
    stats = StatsLog(path, first.statistics)
    stats.restore(utc("2024-05-01T22:30:00"))
    first.counters.messages_sent += 3
    stats.write_due(utc("2024-05-01T23:00:00"))
    first.counters.messages_sent += 2
    stats.save()
    later = StatsLog(path, CountingRouter().statistics)
    later.restore(utc("2024-05-01T23:30:00"))
    assert later.write_due(utc("2024-05-02T00:00:00"))
    rows = read_rows(path)
    assert [(r["period"], r["msgs_sent"]) for r in rows] == [
        ("PT1H", "3"), ("PT1H", "2"), ("P1D", "5"),
    ]


def test_an_interval_that_ended_while_stopped_is_written_at_start(tmp_path):
    path = tmp_path / "stats.csv"
    router = CountingRouter()
    stopped = StatsLog(path, router.statistics, wall_clock=lambda: utc("2024-05-01T23:40:00"))
    stopped.restore()
    router.counters.messages_expired += 9
    router.counters.messages_quota_refused += 2
    stopped.save()
    later = StatsLog(
        path, CountingRouter().statistics, wall_clock=lambda: utc("2024-05-02T03:15:00")
    )
    lines = later.restore()
    assert len(lines) == 2
    rows = read_rows(path)
    assert [(r["time"], r["period"], r["msgs_expired"]) for r in rows] == [
        ("2024-05-01T23:00:00Z", "PT1H", "9"),
        ("2024-05-01T00:00:00Z", "P1D", "9"),
    ]
    assert rows[1]["msgs_quota_refused"] == "2"
    assert later.next_boundary() == utc("2024-05-02T04:00:00")


async def test_idle_intervals_while_running_still_get_a_line(mock_clock, tmp_path):
    wall = mock_wall("2024-05-01T10:00:00")
    stats = StatsLog(tmp_path / "s.csv", CountingRouter().statistics, interval=900, wall_clock=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(stats.run)
        for quarter in range(1, 5):
            await jump_to(mock_clock, wall, utc("2024-05-01T10:00:00") + 900 * quarter)
        await stats.wait_lines_written(4)
        nursery.cancel_scope.cancel()
    rows = read_rows(tmp_path / "s.csv")
    assert [r["time"][11:16] for r in rows] == ["10:00", "10:15", "10:30", "10:45"]
    assert {r["period"] for r in rows} == {"PT15M"}


def test_the_file_starts_with_the_header_once(tmp_path):
    path = tmp_path / "stats.csv"
    clock = iter([utc("2024-05-01T10:00:00"), utc("2024-05-01T12:00:00")])
    StatsLog(path, CountingRouter().statistics, wall_clock=lambda: next(clock)).restore()
    StatsLog(path, CountingRouter().statistics, wall_clock=lambda: next(clock)).restore()
    text = path.read_text()
    assert text.startswith(HEADER + "\n")
    assert text.count("time,period") == 1
    assert len(text.splitlines()) == 2  # the header and the 10:00 line


def test_a_log_with_other_columns_is_moved_aside(tmp_path):
    path = tmp_path / "stats.csv"
    path.write_text("when,what\n1,2\n")
    ten = lambda: utc("2024-05-01T10:00:00")  # noqa: E731 - a fixed wall clock
    StatsLog(path, CountingRouter().statistics, wall_clock=ten).restore()
    assert path.read_text() == HEADER + "\n"
    assert (tmp_path / "stats.csv.old").read_text() == "when,what\n1,2\n"


def test_neither_the_log_nor_its_state_holds_queue_ids(tmp_path):
    path = tmp_path / "stats.csv"
    clock = iter([utc("2024-05-01T10:00:00"), utc("2024-05-01T11:00:00")])
    stats = StatsLog(path, CountingRouter().statistics, wall_clock=lambda: next(clock))
    stats.restore()
    rid = os.urandom(24)
    stats.record_active_queue(rid)
    stats.save()
    assert stats.write_due(next(clock))
    for file in (path, stats.state_path):
        data = file.read_bytes()
        assert rid not in data and rid.hex().encode() not in data


@pytest.mark.parametrize("bad", [0, 7, 7000, 86401])
def test_an_interval_that_does_not_tile_a_day_is_refused(tmp_path, bad):
    with pytest.raises(ValueError):
        StatsLog(tmp_path / "s.csv", CountingRouter().statistics, interval=bad)


async def test_the_task_restores_and_saves_through_a_worker_thread(tmp_path):
    path = tmp_path / "stats.csv"
    router = CountingRouter()
    half_past = lambda: utc("2024-05-01T10:30:00")  # noqa: E731 - a fixed wall clock
    stats = StatsLog(path, router.statistics, wall_clock=half_past)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(stats.run)
            router.counters.messages_delivered += 3
            nursery.cancel_scope.cancel()
    assert path.read_text() == HEADER + "\n"
    restored = StatsLog(path, CountingRouter().statistics, wall_clock=half_past)
    restored.restore()
    assert restored.state()["counts"]["msgs_delivered"] == 3
