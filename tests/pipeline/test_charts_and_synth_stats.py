"""Synthetic stats logs and the operator charts, without Spark: the charts are drawn
from table rows as the stats job passes them."""

from __future__ import annotations

import math
from datetime import date, timedelta
from pathlib import Path

import pytest
from matplotlib.lines import Line2D

from pipeline.charts import CHARTS, YOUNG_DAYS, Calendar, draw_charts, hourly_rows, write_charts
from pipeline.cli import main
from pipeline.synth_stats import synthetic_stats_lines
from router.server.ops.stats_lines import COUNTER_FIELDS, HEADER

FIRST = date(2024, 5, 1)


def parsed(lines: list[str]) -> list[dict[str, str]]:
    columns = HEADER.split(",")
    return [dict(zip(columns, line.rstrip("\n").split(","), strict=True)) for line in lines[1:]]


def test_synthetic_stats_logs_are_what_the_router_writes():
    lines = list(synthetic_stats_lines(9, seed=3))
    assert lines[0] == HEADER + "\n"
    rows = parsed(lines)
    assert len(rows) == 9 * 25  # 24 hourly lines and one P1D line a day
    for day in range(9):
        hours, roll_up = rows[day * 25 : day * 25 + 24], rows[day * 25 + 24]
        assert [r["period"] for r in hours] == ["PT1H"] * 24 and roll_up["period"] == "P1D"
        assert roll_up["time"] == hours[0]["time"] == f"{FIRST + timedelta(days=day)}T00:00:00Z"
        for name in COUNTER_FIELDS:  # the hourly lines add up to the day's line
            assert sum(int(r[name]) for r in hours) == int(roll_up[name])
        assert int(roll_up["msgs_sent"]) > int(roll_up["msgs_acknowledged"]) > 0


def test_active_counts_run_up_within_their_period_and_restart_with_the_next():
    rows = [r for r in parsed(list(synthetic_stats_lines(40))) if r["period"] == "P1D"]
    for before, after in zip(rows, rows[1:], strict=False):
        day = date.fromisoformat(after["time"][:10])
        for column, restarts in (
            ("active_queues_week", day.weekday() == 0),
            ("active_queues_month", day.day == 1),
        ):
            if not restarts:
                assert int(after[column]) >= int(before[column])
        assert int(after["active_queues_week"]) >= int(after["active_queues_day"])
        monday = day - timedelta(days=day.weekday())
        if monday.month == day.month:  # the week so far lies within the month
            assert int(after["active_queues_month"]) >= int(after["active_queues_week"])
    june = next(r for r in rows if r["time"].startswith("2024-06-01"))
    may_31 = next(r for r in rows if r["time"].startswith("2024-05-31"))
    assert int(june["active_queues_month"]) < int(may_31["active_queues_month"])


def test_down_days_have_no_lines_and_other_routers_have_outages_of_their_own():
    def days(router: int) -> set[str]:
        lines = synthetic_stats_lines(30, router=router, down=[(5, 7)])
        return {r["time"][:10] for r in parsed(list(lines))}

    first = days(0)
    assert {"2024-05-05", "2024-05-06", "2024-05-07"}.isdisjoint(first)
    assert len(first) == 27
    assert len(days(1)) == 25  # and two days of its own


def test_the_same_seed_gives_the_same_logs():
    assert list(synthetic_stats_lines(5, seed=4)) == list(synthetic_stats_lines(5, seed=4))
    assert list(synthetic_stats_lines(5, seed=4)) != list(synthetic_stats_lines(5, seed=5))


def test_synth_stats_from_the_command_line(tmp_path):
    argv = ["synth", "--stats", "--days", "3", "--routers", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    logs = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.csv"))
    assert logs == ["router-1/stats.csv", "router-2/stats.csv"]
    assert len((tmp_path / "router-2" / "stats.csv").read_text().splitlines()) == 1 + 3 * 25


# --- charts --------------------------------------------------------------------------------


def day_row(day: date, routers: int = 1, sent: int = 1000, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "day": day,
        "routers": routers,
        "complete": True,
        "queues_created": 50,
        "queues_deleted": 40,
        "queues_net": 10,
        "msgs_sent": sent,
        "msgs_delivered": sent - 10,
        "msgs_acknowledged": sent - 20,
        "msgs_expired": 3,
        "msgs_quota_refused": 1,
        "delivery_ratio": (sent - 20) / sent if sent else None,
        "expired_ratio": 3 / sent if sent else None,
        "quota_refused_ratio": 1 / (sent + 1),
        "active_queues_day": 300,
        "active_queues_week": 500,
        "active_queues_month": 800,
    }
    row.update(extra)
    return row


def period_row(key: str, start: date, active: int) -> dict[str, object]:
    return {key: start, "complete": False, "active_queues": active}


def figures_for(daily: list[dict[str, object]]) -> dict:
    by_router = [{**r, "router": "eu-1"} for r in daily]
    weekly = [period_row("week", date(2024, 4, 29), 500)]
    monthly = [period_row("month", date(2024, 5, 1), 800)]
    return draw_charts(daily, by_router, weekly, monthly)


def finite_points(line: Line2D) -> int:
    return sum(1 for y in line.get_ydata() if not math.isnan(float(y)))


def test_one_day_of_data_draws_a_visible_point_on_every_line_chart():
    figures = figures_for([day_row(FIRST)])
    assert list(figures) == list(CHARTS)
    for name, fig in figures.items():
        lines = [line for ax in fig.axes for line in ax.get_lines() if finite_points(line)]
        patches = [p for ax in fig.axes for p in ax.patches if p.get_height()]
        assert lines or patches, f"{name} draws nothing"
        for line in lines:  # a single point needs a marker, a line of length 0 shows nothing
            if len(line.get_xdata()) == 1:
                assert line.get_marker() not in (None, "None", ""), name
        for ax in fig.axes:
            low, high = ax.get_xlim()
            assert high - low >= 1  # the day sits inside a real date range
            assert ax.get_ylim()[1] > ax.get_ylim()[0]


def test_missing_days_are_gaps_not_lines_across():
    daily = [day_row(FIRST), day_row(FIRST + timedelta(days=1)), day_row(FIRST + timedelta(4))]
    fig = figures_for(daily)["messages_per_day.png"]
    sent = next(line for line in fig.axes[0].get_lines() if line.get_label() == "sent")
    ys = [float(y) for y in sent.get_ydata()]
    assert len(ys) == 5
    assert [math.isnan(y) for y in ys] == [False, False, True, True, False]
    shaded = [p for p in fig.axes[0].patches if p.get_label() == "no data"]
    assert len(shaded) == 1  # days 3 and 4 as one grey span


def test_days_when_a_router_did_not_report_are_marked():
    daily = [day_row(FIRST, routers=2), day_row(FIRST + timedelta(days=1), routers=1)]
    calendar = Calendar(daily)
    assert calendar.short == {FIRST + timedelta(days=1)}
    fig = figures_for(daily)["delivery_ratio.png"]
    assert any(p.get_label() == "not every router reported" for p in fig.axes[0].patches)


def test_a_day_with_nothing_sent_says_so_instead_of_a_blank_chart():
    fig = figures_for([day_row(FIRST, sent=0)])["delivery_ratio.png"]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "no messages sent on these days" in texts


def test_growth_is_the_running_total_of_net_queues_over_the_days_present():
    daily = [day_row(FIRST), day_row(FIRST + timedelta(days=2), queues_net=-4)]
    growth = figures_for(daily)["queue_churn.png"].axes[1].get_lines()[0]
    ys = [float(y) for y in growth.get_ydata()]
    assert ys[0] == 10 and math.isnan(ys[1]) and ys[2] == 6


def test_no_rows_at_all_still_writes_every_chart_saying_so(tmp_path: Path):
    paths = write_charts(tmp_path, [], [], [], [])
    assert [p.name for p in paths] == list(CHARTS)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    empty = draw_charts([], [], [], [])["active_queues.png"]
    assert [t.get_text() for t in empty.axes[0].texts] == ["no stats lines in the input"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


# --- a router younger than a few days: hourly points ---------------------------------------


def interval_line(router: str, hour: int, sent: int, period: str = "PT1H", day: int = 1):
    return {
        "router": router, "period": period, "hour": f"2024-05-{day:02d} {hour:02d}:00",
        "msgs_sent": sent, "msgs_delivered": sent, "msgs_acknowledged": sent - 1,
        "msgs_expired": 0, "msgs_quota_refused": 0, "queues_created": 2, "queues_deleted": 1,
        "active_queues_day": 10 * (hour + 1),
    }  # fmt: skip


def test_a_router_younger_than_a_few_days_gets_a_point_per_hour():
    lines = [interval_line(r, h, 100 + h) for r in ("eu-1", "eu-2") for h in range(20)]
    # a 15-minute router's four lines of one hour add up to that hour
    lines += [interval_line("eu-3", 5, 25, "PT15M") for _ in range(4)]
    figures = draw_charts([day_row(FIRST, routers=3)], [], [], [], lines)
    ax = figures["messages_per_day.png"].axes[0]
    assert ax.get_title() == "Messages per hour, all routers"
    sent = next(line for line in ax.get_lines() if line.get_label() == "sent")
    ys = [float(y) for y in sent.get_ydata()]
    assert len(ys) == 20 and ys[0] == 200 and ys[5] == 2 * 105 + 100 and ys[19] == 2 * 119
    churn = figures["queue_churn.png"].axes[0]
    assert churn.get_title() == "Queues created and deleted per hour, all routers"
    low, high = ax.get_xlim()
    assert 19 / 24 < high - low < 21 / 24  # hours, not days, across the axis


def test_hourly_totals_and_per_router_rows_add_up():
    lines = [interval_line("eu-1", 0, 10), interval_line("eu-2", 0, 30),
             interval_line("eu-1", 1, 20)]  # fmt: skip
    total, by_router = hourly_rows(lines)
    assert [(r["hour"].hour, r["routers"], r["msgs_sent"]) for r in total] == [
        (0, 2, 40), (1, 1, 20)
    ]
    assert total[0]["delivery_ratio"] == 38 / 40 and total[0]["queues_net"] == 2
    assert [(r["router"], r["hour"].hour) for r in by_router] == [
        ("eu-1", 0), ("eu-2", 0), ("eu-1", 1)
    ]


def test_older_routers_and_lines_longer_than_an_hour_stay_daily():
    lines = [interval_line("eu-1", h, 100) for h in range(24)]
    days = [day_row(FIRST + timedelta(days=n)) for n in range(YOUNG_DAYS + 1)]
    title = draw_charts(days, [], [], [], lines)["messages_per_day.png"].axes[0].get_title()
    assert title == "Messages per day, all routers"
    two_hours = [interval_line("eu-1", h, 100, "PT2H") for h in range(0, 24, 2)]
    assert hourly_rows(two_hours) is None
    title = draw_charts([day_row(FIRST)], [], [], [], two_hours)["messages_per_day.png"]
    assert title.axes[0].get_title() == "Messages per day, all routers"
