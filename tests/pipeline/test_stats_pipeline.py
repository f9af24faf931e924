"""`smp-pipeline stats` on small logs written by the router's own stats log writer.

Two routers: `eu-1` (logs/eu-1/stats.csv) runs from Monday 2024-04-29 00:00 to
Thursday 2024-05-02 05:00 UTC, so April and May, one ISO week and a day in
progress are all covered; `us-2` (logs/us-2.csv) runs on 2024-05-01 only.
Every hour h of a router's run adds known numbers, so the expected tables are
computed here in plain Python.
"""

from __future__ import annotations

import csv
import shutil
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import pytest
import trio
from statslog_driver import CountingRouter

from pipeline import follow
from pipeline.charts import CHARTS
from pipeline.schemas import ROUTER_STATS_LINE_SCHEMA, STATS_NUMBERS
from pipeline.stats_io import read_stats_logs, router_name, stats_log_files
from pipeline.stats_job import StatsOutput, run_increment, run_stats
from pipeline.stats_transforms import stats_tables
from router.client import open_client
from router.server import RouterConfig, serve_router
from router.server.ops.stats_lines import COLUMNS, COUNTER_COLUMNS
from router.server.ops.statslog import StatsLog

pytestmark = pytest.mark.spark

HOUR = timedelta(hours=1)


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def hour_numbers(router: str, hour: int) -> dict[str, int]:
    """What the router counts in its `hour`-th hour (a pattern that varies by hour)."""
    base = 10 if router == "eu-1" else 100
    return {
        "queues_created": hour % 3,
        "queues_secured": hour % 2,
        "queues_deleted": 1 if hour % 5 == 0 else 0,
        "msgs_sent": base + hour,
        "msgs_delivered": base + hour - 1,
        "msgs_acknowledged": base + hour - 2,
        "msgs_expired": hour % 4,
        "msgs_quota_refused": 1 if hour % 7 == 0 else 0,
    }


def write_router_log(path: Path, router: str, start: str, hours: int) -> None:
    """Drive the real StatsLog hour by hour, as a running router would."""
    counting = CountingRouter()
    now = ts(start)
    stats = StatsLog(path, counting.statistics, wall_clock=lambda: now)
    stats.restore(now)
    for hour in range(hours):
        for column, value in hour_numbers(router, hour).items():
            field = COUNTER_COLUMNS[column]
            setattr(counting.counters, field, getattr(counting.counters, field) + value)
        counting.subscriptions = 5 + hour % 6
        counting.clients = 2 + hour % 3
        for q in range(hour % 4 + 1):  # queue ids repeat: distinct counts stay small
            stats.record_active_queue(f"{router}-{q + hour // 24}".encode())
        now += 3600
        stats.write_due(now)
    stats.save()


def expected_days(router: str, start: str, hours: int) -> dict[str, dict[str, int]]:
    days: dict[str, dict[str, int]] = {}
    for hour in range(hours):
        day = (datetime.fromisoformat(start) + hour * HOUR).date().isoformat()
        totals = days.setdefault(day, dict.fromkeys(hour_numbers(router, 0), 0))
        for name, value in hour_numbers(router, hour).items():
            totals[name] += value
    return days


RUNS = {"eu-1": ("2024-04-29T00:00:00", 77), "us-2": ("2024-05-01T00:00:00", 24)}


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    (root / "eu-1").mkdir()
    write_router_log(root / "eu-1" / "stats.csv", "eu-1", *RUNS["eu-1"])
    write_router_log(root / "us-2.csv", "us-2", *RUNS["us-2"])
    return root


@pytest.fixture(scope="module")
def batch_out(spark, logs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("out")
    run_stats(spark, [str(logs)], StatsOutput.at(str(out)))
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_pipeline_reads_the_columns_the_router_writes():
    assert ("time", "period", *STATS_NUMBERS) == COLUMNS


def test_router_names_come_from_the_file_or_its_directory(spark, logs):
    files = stats_log_files([str(logs)])
    assert sorted(router_name(f) for f in files) == ["eu-1", "us-2"]
    names = read_stats_logs(spark, [str(logs)]).select("router").distinct().collect()
    assert sorted(r.router for r in names) == ["eu-1", "us-2"]


def test_daily_counts_per_router_match_what_the_router_counted(batch_out):
    rows = read_csv(batch_out / "router_daily.csv")
    got = {(r["router"], r["day"]): r for r in rows}
    for router, (start, hours) in RUNS.items():
        for day, totals in expected_days(router, start, hours).items():
            row = got.pop((router, day))
            assert {k: int(row[k]) for k in totals} == totals
    assert got == {}


def test_a_day_with_its_roll_up_line_is_complete_and_one_in_progress_is_not(batch_out):
    rows = {
        (r["router"], r["day"]): r["complete"] for r in read_csv(batch_out / "router_daily.csv")
    }
    assert rows[("eu-1", "2024-05-01")] == "true"
    assert rows[("eu-1", "2024-05-02")] == "false"  # five hours, no P1D line yet
    assert rows[("us-2", "2024-05-01")] == "true"


def test_the_total_adds_the_routers_up_and_recomputes_the_ratio(batch_out):
    total = {r["day"]: r for r in read_csv(batch_out / "total_daily.csv")}
    eu = expected_days("eu-1", *RUNS["eu-1"])["2024-05-01"]
    us = expected_days("us-2", *RUNS["us-2"])["2024-05-01"]
    row = total["2024-05-01"]
    assert row["routers"] == "2"
    assert int(row["msgs_sent"]) == eu["msgs_sent"] + us["msgs_sent"]
    ratio = (eu["msgs_acknowledged"] + us["msgs_acknowledged"]) / (
        eu["msgs_sent"] + us["msgs_sent"]
    )
    assert float(row["delivery_ratio"]) == pytest.approx(ratio, abs=1e-6)
    assert total["2024-04-29"]["routers"] == "1"


def test_weeks_start_on_monday_and_months_split_at_the_first(batch_out):
    weekly = read_csv(batch_out / "router_weekly.csv")
    assert [(r["router"], r["week"], r["days"]) for r in weekly] == [
        ("eu-1", "2024-04-29", "4"),
        ("us-2", "2024-04-29", "1"),
    ]
    monthly = read_csv(batch_out / "router_monthly.csv")
    assert [(r["router"], r["month"], r["days"]) for r in monthly] == [
        ("eu-1", "2024-04-01", "2"),
        ("eu-1", "2024-05-01", "2"),
        ("us-2", "2024-05-01", "1"),
    ]
    eu_days = expected_days("eu-1", *RUNS["eu-1"])
    assert int(monthly[0]["msgs_sent"]) == sum(
        eu_days[d]["msgs_sent"] for d in ("2024-04-29", "2024-04-30")
    )


def test_active_queue_counts_are_the_running_counts_of_their_period(batch_out):
    daily = {(r["router"], r["day"]): r for r in read_csv(batch_out / "router_daily.csv")}
    # each day the router saw queue ids <router>-<d>..<router>-<d+3>
    assert daily[("eu-1", "2024-04-30")]["active_queues_day"] == "4"
    weekly = {(r["router"], r["week"]): r for r in read_csv(batch_out / "router_weekly.csv")}
    assert weekly[("eu-1", "2024-04-29")]["active_queues"] == "7"  # ids 0..6 over four days
    monthly = {(r["router"], r["month"]): r for r in read_csv(batch_out / "router_monthly.csv")}
    assert monthly[("eu-1", "2024-04-01")]["active_queues"] == "5"  # ids 0..4
    assert monthly[("eu-1", "2024-05-01")]["active_queues"] == "5"  # ids 2..6, month restarted


def test_the_charts_an_operator_looks_at_are_written(batch_out):
    for name in CHARTS:
        assert (batch_out / "charts" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_error_rates_and_net_queues_are_in_every_table(batch_out):
    eu = expected_days("eu-1", *RUNS["eu-1"])["2024-04-30"]
    day = next(r for r in read_csv(batch_out / "router_daily.csv") if r["day"] == "2024-04-30")
    assert day["router"] == "eu-1"
    assert float(day["expired_ratio"]) == pytest.approx(
        eu["msgs_expired"] / eu["msgs_sent"], abs=1e-6
    )
    refused = eu["msgs_quota_refused"] / (eu["msgs_sent"] + eu["msgs_quota_refused"])
    assert float(day["quota_refused_ratio"]) == pytest.approx(refused, abs=1e-6)
    assert int(day["queues_net"]) == eu["queues_created"] - eu["queues_deleted"]
    for table in ("router_weekly", "total_monthly"):
        header = (batch_out / f"{table}.csv").read_text().split("\n", 1)[0].split(",")
        assert {"expired_ratio", "quota_refused_ratio", "queues_net"} <= set(header)


def p1d_lines(router: str, first: date, days: int) -> list[tuple]:
    """One complete P1D line per day, as a router running all day long writes it."""
    numbers = (1, 0, 0, 10, 9, 8, 0, 0, 1, 1, 1, 1, 1)
    return [
        (router, datetime.combine(first + timedelta(days=d), time(0), UTC), "P1D", *numbers)
        for d in range(days)
    ]


def test_a_week_or_month_is_complete_only_when_all_its_days_are(spark):
    lines = (
        p1d_lines("eu-1", date(2024, 2, 1), 29)  # all of February 2024 (a leap year)
        + p1d_lines("eu-1", date(2024, 10, 1), 15)  # October 1 to 15: half a month
        + p1d_lines("eu-1", date(2024, 5, 6), 7)  # the ISO week of Monday May 6, whole
        + p1d_lines("eu-1", date(2024, 5, 20), 6)  # Monday May 20 to Saturday: no Sunday
    )
    tables = stats_tables(spark.createDataFrame(lines, ROUTER_STATS_LINE_SCHEMA))
    monthly = {r["month"].isoformat(): r for r in tables["router_monthly"].collect()}
    assert (monthly["2024-02-01"]["days"], monthly["2024-02-01"]["complete"]) == (29, True)
    assert (monthly["2024-10-01"]["days"], monthly["2024-10-01"]["complete"]) == (15, False)
    assert monthly["2024-05-01"]["complete"] is False  # 13 of 31 days
    weekly = {r["week"].isoformat(): r["complete"] for r in tables["router_weekly"].collect()}
    assert weekly["2024-05-06"] is True
    assert weekly["2024-05-20"] is False
    totals = {r["month"].isoformat(): r["complete"] for r in tables["total_monthly"].collect()}
    assert totals == {"2024-02-01": True, "2024-05-01": False, "2024-10-01": False}


def test_parquet_tables_are_partitioned_by_their_period(batch_out):
    days = sorted(p.name for p in (batch_out / "parquet" / "router_daily").glob("day=*"))
    assert days[0] == "day=2024-04-29" and days[-1] == "day=2024-05-02"
    assert (batch_out / "parquet" / "total_monthly" / "month=2024-04-01").is_dir()


def test_a_repeated_line_after_a_crash_is_counted_once(spark, logs, batch_out, tmp_path):
    copy = tmp_path / "logs"
    shutil.copytree(logs, copy)
    lines = (copy / "us-2.csv").read_text().splitlines()
    repeat = lines[5].split(",")
    repeat[5] = "0"  # an earlier snapshot of the same hour: fewer messages
    with open(copy / "us-2.csv", "a") as f:
        f.write(",".join(repeat) + "\n")
    out = tmp_path / "out"
    run_stats(spark, [str(copy)], StatsOutput.at(str(out)))
    for table in ("router_daily", "total_weekly"):
        assert (out / f"{table}.csv").read_text() == (batch_out / f"{table}.csv").read_text()


# --- incremental runs --------------------------------------------------------------


def split_logs(logs: Path, dest: Path, keep: int) -> list[tuple[Path, str]]:
    """Copy the logs keeping only their first `keep` lines; returns (copy, rest) pairs."""
    pairs = []
    for src in stats_log_files([str(logs)]):
        target = dest / src.relative_to(logs)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = src.read_text()
        lines = text.splitlines(keepends=True)
        target.write_text("".join(lines[:keep]))
        pairs.append((target, "".join(lines[keep:])))
    return pairs


def assert_same_tables(out: Path, expected: Path) -> None:
    for table in (
        "router_daily",
        "router_weekly",
        "router_monthly",
        "total_daily",
        "total_weekly",
        "total_monthly",
    ):
        assert (out / f"{table}.csv").read_text() == (expected / f"{table}.csv").read_text(), table


def test_incremental_runs_end_where_a_whole_run_ends(spark, logs, batch_out, tmp_path):
    pairs = split_logs(logs, tmp_path / "logs", keep=12)
    out, ckpt = StatsOutput.at(str(tmp_path / "out")), str(tmp_path / "ckpt")
    first = run_increment(spark, [str(tmp_path / "logs")], out, ckpt)
    cuts = [rest.index("\n", len(rest) // 2) + 1 for _, rest in pairs]
    for (path, rest), cut in zip(pairs, cuts, strict=True):
        with open(path, "a") as f:
            f.write(rest[: cut + 7])  # ending in a torn line the router is still writing
    second = run_increment(spark, [str(tmp_path / "logs")], out, ckpt)
    for (path, rest), cut in zip(pairs, cuts, strict=True):
        with open(path, "a") as f:
            f.write(rest[cut + 7 :])
    third = run_increment(spark, [str(tmp_path / "logs")], out, ckpt)
    assert first > 0 and second > 0 and third > 0
    assert run_increment(spark, [str(tmp_path / "logs")], out, ckpt) == 0
    assert_same_tables(tmp_path / "out", batch_out)


def test_a_run_that_crashed_before_committing_is_redone_without_double_counting(
    spark, logs, batch_out, tmp_path, monkeypatch
):
    pairs = split_logs(logs, tmp_path / "logs", keep=20)
    out, ckpt = StatsOutput.at(str(tmp_path / "out")), str(tmp_path / "ckpt")
    run_increment(spark, [str(tmp_path / "logs")], out, ckpt)
    for path, rest in pairs:
        with open(path, "a") as f:
            f.write(rest)

    def crash(*args):
        raise RuntimeError("killed before the positions were committed")

    with monkeypatch.context() as m:
        m.setattr(follow, "commit_checkpoint", crash)
        with pytest.raises(RuntimeError):
            run_increment(spark, [str(tmp_path / "logs")], out, ckpt)
    run_increment(spark, [str(tmp_path / "logs")], out, ckpt)
    assert_same_tables(tmp_path / "out", batch_out)


def test_start_latest_skips_what_is_already_there(spark, logs, tmp_path):
    pairs = split_logs(logs, tmp_path / "logs", keep=1000)
    out, ckpt = StatsOutput.at(str(tmp_path / "out")), str(tmp_path / "ckpt")
    assert run_increment(spark, [str(tmp_path / "logs")], out, ckpt, start="latest") == 0
    path = pairs[0][0]
    with open(path, "a") as f:
        f.write("2024-05-03T00:00:00Z,PT1H,1,0,0,9,9,9,0,0,1,1,1,1,1\n")
    assert run_increment(spark, [str(tmp_path / "logs")], out, ckpt) == 1
    rows = read_csv(tmp_path / "out" / "router_daily.csv")
    assert [(r["day"], r["msgs_sent"]) for r in rows] == [("2024-05-03", "9")]


def test_start_at_a_time_keeps_lines_of_periods_from_then_on(spark, logs, tmp_path):
    out, ckpt = StatsOutput.at(str(tmp_path / "out")), str(tmp_path / "ckpt")
    start = follow.parse_start("2024-05-02T00:00:00+00:00")
    run_increment(spark, [str(logs)], out, ckpt, start=start)
    rows = read_csv(tmp_path / "out" / "router_daily.csv")
    assert [(r["router"], r["day"]) for r in rows] == [("eu-1", "2024-05-02")]
    assert (
        int(rows[0]["msgs_sent"]) == expected_days("eu-1", *RUNS["eu-1"])["2024-05-02"]["msgs_sent"]
    )


# --- a stats log written by the running router -------------------------------------


async def run_router_with_traffic(stats_log: Path, messages: int) -> None:
    """Serve, send and receive `messages` messages, wait for the line that counts them."""
    config = RouterConfig(port=0, stats_log=stats_log, stats_interval=1)
    async with trio.open_nursery() as nursery:
        info = await nursery.start(serve_router, config)
        stats = info.router.stats_log
        async with open_client(info.address) as client:
            queue = await client.create_queue()
            for n in range(messages):
                await client.send(queue.sender_id, b"m%d" % n)
            await client.subscribe(queue)
            for _ in range(messages):
                await client.ack(queue, (await client.next_event()).msg_id)
            await stats.wait_lines_written(stats.statistics().lines_written + 1)
        nursery.cancel_scope.cancel()


async def test_logs_written_by_running_routers_are_summed_per_router_and_in_total(spark, tmp_path):
    with trio.fail_after(60):
        await run_router_with_traffic(tmp_path / "logs" / "r1" / "stats.csv", 3)
        await run_router_with_traffic(tmp_path / "logs" / "r2.csv", 5)
    out = StatsOutput.at(str(tmp_path / "out"))
    await trio.to_thread.run_sync(run_stats, spark, [str(tmp_path / "logs")], out)
    per_router: dict[str, dict[str, int]] = {}
    for row in read_csv(tmp_path / "out" / "router_daily.csv"):
        sums = per_router.setdefault(row["router"], {"sent": 0, "acked": 0, "created": 0})
        sums["sent"] += int(row["msgs_sent"])
        sums["acked"] += int(row["msgs_acknowledged"])
        sums["created"] += int(row["queues_created"])
    assert per_router == {
        "r1": {"sent": 3, "acked": 3, "created": 1},
        "r2": {"sent": 5, "acked": 5, "created": 1},
    }
    totals = read_csv(tmp_path / "out" / "total_monthly.csv")
    assert sum(int(r["msgs_sent"]) for r in totals) == 8


def test_interval_lines_give_each_routers_hours_as_it_counted_them(spark, logs):
    from pipeline.charts import hourly_rows
    from pipeline.stats_transforms import interval_lines

    rows = [r.asDict() for r in interval_lines(read_stats_logs(spark, [str(logs)])).collect()]
    total, by_router = hourly_rows(rows)
    us = {r["hour"]: r["msgs_sent"] for r in by_router if r["router"] == "us-2"}
    assert len(us) == RUNS["us-2"][1]
    start = datetime.fromisoformat(RUNS["us-2"][0])
    for hour in range(RUNS["us-2"][1]):
        assert us[start + hour * HOUR] == hour_numbers("us-2", hour)["msgs_sent"]
    both = next(r for r in total if r["hour"] == start)
    assert both["routers"] == 2


def test_a_follow_pass_over_a_young_router_draws_hourly_charts(spark, tmp_path, monkeypatch):
    """Its tables are read back from Parquet; the hours come from the staged lines."""
    import pipeline.stats_job as stats_job

    write_router_log(tmp_path / "logs" / "us-2.csv", "us-2", "2024-05-01T00:00:00", 30)
    drawn: list[object] = []
    real = stats_job.write_charts

    def recording(out_dir, *tables):
        drawn.append(tables[-1])
        return real(out_dir, *tables)

    monkeypatch.setattr(stats_job, "write_charts", recording)
    out, ckpt = StatsOutput.at(str(tmp_path / "out")), str(tmp_path / "ckpt")
    assert run_increment(spark, [str(tmp_path / "logs")], out, ckpt) > 0
    (hourly,) = drawn
    assert hourly is not None and len(hourly) == 30
    assert {row["hour"] for row in hourly} >= {"2024-05-01 00:00", "2024-05-02 05:00"}
