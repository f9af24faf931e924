"""PNG charts for operators, drawn on the driver from the (small) aggregated tables.

Every daily series is laid on the full calendar from the first to the last day
with data: a day without data is a gap in the line (NaN), shaded grey, never a
straight line drawn across it. Points carry markers, so that one day of data is
a visible point, not an invisible line of length zero.

A router younger than a few days (YOUNG_DAYS of data) gets the same charts per
UTC hour instead, from its interval lines: one dot per day tells a new operator
nothing. The hours are laid on an `HourCalendar`, which draws as the daily one
does, a step of an hour instead of a day.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.dates as mdates  # noqa: E402 - the backend must be chosen first
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator, PercentFormatter, StrMethodFormatter  # noqa: E402

Rows = list[dict[str, object]]
NAN = float("nan")
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
YOUNG_DAYS = 3  # up to this many days of data, the charts are drawn per hour

CHARTS = (
    "messages_per_day.png",
    "delivery_ratio.png",
    "error_rates.png",
    "expired_and_quota_refused.png",
    "active_queues.png",
    "queue_churn.png",
)


class Calendar:
    """Every day from the first to the last day of the daily total, and which have data."""

    step, unit, key = DAY, "day", "day"

    def __init__(self, daily: Rows) -> None:
        self.present = {_as_date(r["day"]) for r in daily}
        most = max((int(r.get("routers") or 0) for r in daily), default=0)
        # days some router did not report: totals dip for that reason alone
        self.short = {_as_date(r["day"]) for r in daily if int(r.get("routers") or 0) < most}
        first, last = (min(self.present), max(self.present)) if self.present else (None, None)
        count = (last - first).days + 1 if first and last else 0
        self.days = [first + i * DAY for i in range(count)] if first else []

    def series(self, rows: Rows, column: str, scale: float = 1.0) -> list[float]:
        """`column` of `rows` per calendar day; NaN for a day without a row or a value."""
        by_day = {_as_date(r["day"]): r[column] for r in rows}
        return [_number(by_day.get(day), scale) for day in self.days]

    @property
    def width(self) -> float:
        """One step of the calendar in matplotlib's date units (days)."""
        return self.step / DAY

    def runs(self, days: set[date]) -> list[tuple[date, date]]:
        """(first, last) of each run of consecutive calendar days in `days`."""
        runs: list[tuple[date, date]] = []
        for day in self.days:
            if day not in days:
                continue
            if runs and runs[-1][1] + self.step == day:
                runs[-1] = (runs[-1][0], day)
            else:
                runs.append((day, day))
        return runs


class HourCalendar(Calendar):
    """Every UTC hour from the first to the last hour with interval lines."""

    step, unit, key = HOUR, "hour", "hour"

    def __init__(self, hourly: Rows) -> None:  # noqa: D107 - the rows of `hourly_rows`
        self.present = {r["hour"] for r in hourly}
        most = max((int(r.get("routers") or 0) for r in hourly), default=0)
        self.short = {r["hour"] for r in hourly if int(r.get("routers") or 0) < most}
        first, last = (min(self.present), max(self.present)) if self.present else (None, None)
        count = int((last - first) / HOUR) + 1 if first and last else 0
        self.days = [first + i * HOUR for i in range(count)] if first else []

    def series(self, rows: Rows, column: str, scale: float = 1.0) -> list[float]:
        by_hour = {r["hour"]: r.get(column) for r in rows}
        return [_number(by_hour.get(hour), scale) for hour in self.days]


_PERIOD = re.compile(r"^PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?$")


def _period_seconds(period: str) -> int | None:
    match = _PERIOD.match(period)
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def hourly_rows(lines: Rows) -> tuple[Rows, Rows] | None:
    """(all routers per hour, each router per hour) from interval lines (router, period,
    hour "YYYY-MM-DD HH:00", the counters, active_queues_day); None when some router
    writes lines longer than an hour (its hours could not be told apart)."""
    if not lines or any(
        (_period_seconds(str(line["period"])) or 86400) > 3600 for line in lines
    ):
        return None
    per_router: dict[tuple[str, datetime], dict[str, float]] = {}
    for line in lines:
        hour = datetime.strptime(str(line["hour"]), "%Y-%m-%d %H:%M")
        row = per_router.setdefault((str(line["router"]), hour), defaultdict(float))
        for column in _HOURLY_COUNTS:
            row[column] += float(line[column] or 0)
        row["active_queues_day"] = max(row["active_queues_day"],
                                       float(line["active_queues_day"] or 0))  # fmt: skip
    totals: dict[datetime, dict[str, float]] = {}
    by_router: Rows = []
    for (router, hour), counts in sorted(per_router.items(), key=lambda item: item[0][1]):
        by_router.append({"router": router, "hour": hour, **_with_ratios(counts)})
        total = totals.setdefault(hour, defaultdict(float))
        total["routers"] += 1
        for column, value in counts.items():
            total[column] += value
    total_rows = [{"hour": hour, **_with_ratios(counts)} for hour, counts in totals.items()]
    return total_rows, by_router


_HOURLY_COUNTS = (
    "msgs_sent", "msgs_delivered", "msgs_acknowledged", "msgs_expired", "msgs_quota_refused",
    "queues_created", "queues_deleted",
)  # fmt: skip


def _with_ratios(counts: dict[str, float]) -> dict[str, float | None]:
    """The derived figures of pipeline/stats_transforms.py, for one hour's sums."""
    sent, refused = counts["msgs_sent"], counts["msgs_quota_refused"]
    return {
        **counts,
        "delivery_ratio": counts["msgs_acknowledged"] / sent if sent else None,
        "expired_ratio": counts["msgs_expired"] / sent if sent else None,
        "quota_refused_ratio": refused / (sent + refused) if sent + refused else None,
        "queues_net": counts["queues_created"] - counts["queues_deleted"],
    }


def _x(day: date) -> float:
    """A day as matplotlib's date number (days), whose halves a `date` cannot express."""
    return float(mdates.date2num(day))


def _as_date(value: object) -> date:
    return value if isinstance(value, date) else date.fromisoformat(str(value))


def _number(value: object, scale: float = 1.0) -> float:
    return NAN if value is None else float(value) * scale  # type: ignore[arg-type]


def draw_charts(
    total_daily: Rows,
    router_daily: Rows,
    total_weekly: Rows,
    total_monthly: Rows,
    interval_lines: Rows | None = None,
) -> dict[str, Figure]:
    """Every chart in CHARTS as a figure (the caller saves and closes them); per hour
    when the data spans at most YOUNG_DAYS days and `interval_lines` are given."""
    calendar = Calendar(total_daily)
    hourly = hourly_rows(interval_lines or []) if len(calendar.days) <= YOUNG_DAYS else None
    if hourly is not None:
        calendar = HourCalendar(hourly[0])
        total_daily, router_daily = hourly
    drawers: dict[str, Callable[[Figure], None]] = {
        "messages_per_day.png": lambda fig: _messages(fig, calendar, total_daily),
        "delivery_ratio.png": lambda fig: _delivery_ratio(fig, calendar, total_daily, router_daily),
        "error_rates.png": lambda fig: _error_rates(fig, calendar, total_daily),
        "expired_and_quota_refused.png": lambda fig: _refused_counts(fig, calendar, total_daily),
        "active_queues.png": lambda fig: _active_queues(
            fig, calendar, total_daily, total_weekly, total_monthly
        ),
        "queue_churn.png": lambda fig: _churn(fig, calendar, total_daily),
    }
    figures = {}
    for name, draw in drawers.items():
        fig = plt.figure(figsize=(10, 6.5 if name == "queue_churn.png" else 4.5), dpi=100)
        if calendar.days:
            draw(fig)
        else:
            _no_data(fig)
        fig.tight_layout()
        figures[name] = fig
    return figures


def write_charts(
    out_dir: Path,
    total_daily: Rows,
    router_daily: Rows,
    total_weekly: Rows,
    total_monthly: Rows,
    interval_lines: Rows | None = None,
) -> list[Path]:
    """Every chart in CHARTS, written to `out_dir`; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    figures = draw_charts(total_daily, router_daily, total_weekly, total_monthly, interval_lines)
    for name, fig in figures.items():
        path = out_dir / name
        fig.savefig(path, metadata={"Software": None})  # no version stamp: same data, same file
        plt.close(fig)
        paths.append(path)
    return paths


# --- axes common to every chart ---------------------------------------------------------


def _day_axes(fig: Figure, calendar: Calendar, title: str, position: int = 111) -> Axes:
    """Axes over the calendar: a date per tick, half a day of margin, gaps shaded."""
    ax = fig.add_subplot(position)
    ax.set_title(title)
    first, last = _x(calendar.days[0]), _x(calendar.days[-1])
    margin = max(0.6 * calendar.width, (last - first) * 0.02)  # in days
    ax.set_xlim(first - margin, last + margin)
    span = int(last - first)
    if isinstance(calendar, HourCalendar):
        hours = max(1, round((last - first) * 24))
        ax.xaxis.set_major_locator(mdates.HourLocator(interval=max(1, math.ceil(hours / 12))))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:00"))
        ax.set_xlabel("UTC hour")
    elif span <= 14:
        ax.xaxis.set_major_locator(mdates.DayLocator(interval=1 if span <= 7 else 2))
    else:
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=4, maxticks=10))
    if not isinstance(calendar, HourCalendar):
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    for label in ax.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")
    missing = set(calendar.days) - calendar.present
    _shade(ax, calendar.runs(missing), "0.85", "no data", calendar.width)
    _shade(ax, calendar.runs(calendar.short), "#fbeec1", "not every router reported",
           calendar.width)  # fmt: skip
    ax.grid(True, alpha=0.3)
    return ax


FEW_DAYS = 7  # up to this many days, points are labelled with their values


def _shade(
    ax: Axes, runs: list[tuple[date, date]], color: str, label: str, width: float = 1.0
) -> None:
    for index, (start, end) in enumerate(runs):
        ax.axvspan(
            _x(start) - width / 2,
            _x(end) + width / 2,
            color=color,
            zorder=0,
            label=label if index == 0 else None,
        )


def _line(
    ax: Axes,
    calendar: Calendar,
    ys: Sequence[float],
    label: str,
    value_format: str | None = "{:,.0f}",
    **style,
) -> None:
    """A daily series with markers; up to FEW_DAYS days, each point labelled with its
    value (`value_format`; None: no labels), the labels of the n-th line of the axes
    set 12 points lower than those of the one before, so that close values stay legible."""
    style = {"marker": "o", "markersize": 3 if len(ys) > 45 else 5, "zorder": 3, **style}
    (line,) = ax.plot(calendar.days, ys, label=label, **style)
    if value_format is None or len(ys) > FEW_DAYS:
        return
    rank = len(ax.get_lines()) - 1
    for day, y in zip(calendar.days, ys, strict=True):
        if not math.isnan(y):
            ax.annotate(
                value_format.format(y),
                (_x(day), y),
                textcoords="offset points",
                xytext=(8, 8 - 12 * rank),
                va="center",
                fontsize="small",
                color=line.get_color(),
            )


def _label_bars(ax: Axes, bars, values: Sequence[float]) -> None:
    """Up to FEW_DAYS days, each bar says its value inside it."""
    if len(values) <= FEW_DAYS:
        labels = ["" if math.isnan(v) else f"{v:,.0f}" for v in values]
        ax.bar_label(bars, labels=labels, label_type="center", fontsize="small")


def _top_from_data(ax: Axes, minimum: float) -> float:
    """10% above the largest value drawn (the autoscaled top can clip a single point)."""
    high = ax.dataLim.y1
    return max(high * 1.1 if math.isfinite(high) else 0, minimum)


def _counts_from_zero(ax: Axes) -> None:
    """Counts start at 0, have whole ticks, and an all-zero series still has a scale."""
    ax.set_ylim(bottom=0, top=_top_from_data(ax, 1))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def _legend(ax: Axes, **where) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**{"loc": "best", "fontsize": "small", **where})


def _note(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _all_nan(values: Sequence[float]) -> bool:
    return all(math.isnan(v) for v in values)


def _no_data(fig: Figure) -> None:
    ax = fig.add_subplot(111)
    ax.set_axis_off()
    _note(ax, "no stats lines in the input")


# --- the charts ---------------------------------------------------------------------------


def _messages(fig: Figure, calendar: Calendar, daily: Rows) -> None:
    ax = _day_axes(fig, calendar, f"Messages per {calendar.unit}, all routers")
    for column, label in (
        ("msgs_sent", "sent"),
        ("msgs_delivered", "delivered"),
        ("msgs_acknowledged", "acknowledged"),
    ):
        _line(ax, calendar, calendar.series(daily, column), label)
    ax.set_ylabel("messages")
    _counts_from_zero(ax)
    _legend(ax)


def _delivery_ratio(fig: Figure, calendar: Calendar, total: Rows, by_router: Rows) -> None:
    ax = _day_axes(
        fig, calendar, f"Delivery ratio per {calendar.unit} (acknowledged / sent)"
    )
    per_router: dict[str, Rows] = defaultdict(list)
    for row in by_router:
        per_router[str(row["router"])].append(row)
    if len(per_router) > 1:  # with one router its line is the total's
        for router, rows in sorted(per_router.items()):
            ratios = calendar.series(rows, "delivery_ratio", 100)
            _line(ax, calendar, ratios, router, None, alpha=0.6, linewidth=1, markersize=3)
    overall = calendar.series(total, "delivery_ratio", 100)
    _line(ax, calendar, overall, "all routers", "{:.1f}%", color="black", linewidth=2)
    ax.yaxis.set_major_formatter(PercentFormatter())
    drawn = [v for line in ax.get_lines() for v in line.get_ydata() if not math.isnan(v)]
    low, high = min(drawn, default=0), max(drawn, default=100)
    # from a round 10% below the lowest day, so that a dip of a few percent shows;
    # the top can pass 100%: a day's ACKs include messages sent the day before
    ax.set_ylim(max(0, 10 * math.floor(low / 10) - 10), max(102, high * 1.02))
    ax.set_ylabel("acknowledged / sent")
    if _all_nan(overall):
        _note(ax, "no messages sent on these days")
    _legend(ax)


def _error_rates(fig: Figure, calendar: Calendar, daily: Rows) -> None:
    ax = _day_axes(
        fig, calendar, f"Errors per {calendar.unit}, all routers: share of messages"
    )
    expired = calendar.series(daily, "expired_ratio", 100)
    refused = calendar.series(daily, "quota_refused_ratio", 100)
    _line(ax, calendar, expired, "expired (of sent)", "{:.2f}%")
    _line(ax, calendar, refused, "refused for quota (of SENDs)", "{:.2f}%")
    ax.yaxis.set_major_formatter(PercentFormatter(decimals=None))
    ax.set_ylim(bottom=0, top=_top_from_data(ax, 1))
    if _all_nan(expired) and _all_nan(refused):
        _note(ax, "no messages sent on these days")
    _legend(ax)


def _refused_counts(fig: Figure, calendar: Calendar, daily: Rows) -> None:
    ax = _day_axes(
        fig, calendar, f"Expired and quota-refused messages per {calendar.unit}, all routers"
    )
    expired = calendar.series(daily, "msgs_expired")
    refused = calendar.series(daily, "msgs_quota_refused")
    bar = 0.8 * calendar.width
    for bars, values in (
        (ax.bar(calendar.days, expired, width=bar, label="expired"), expired),
        (ax.bar(calendar.days, refused, width=bar, bottom=expired, label="refused for quota"),
         refused),
    ):  # fmt: skip
        _label_bars(ax, bars, values)
    ax.set_ylabel("messages")
    _counts_from_zero(ax)
    _legend(ax)


def _active_queues(
    fig: Figure, calendar: Calendar, daily: Rows, weekly: Rows, monthly: Rows
) -> None:
    ax = _day_axes(fig, calendar, "Active queues, all routers (HyperLogLog estimates)")
    per_day = "per day" if calendar.unit == "day" else "this UTC day so far"
    _line(ax, calendar, calendar.series(daily, "active_queues_day"), per_day)
    _period_bars(ax, weekly, "week", lambda start: start + 7 * DAY, "per ISO week", "tab:orange")
    _period_bars(ax, monthly, "month", _next_month, "per month", "tab:green")
    ax.set_ylabel("queues (dashed: period not complete)")
    _counts_from_zero(ax)
    ax.set_ylim(top=_top_from_data(ax, 1) * 1.15)  # room for the legend above the lines
    _legend(ax, loc="upper left", ncols=5)


def _period_bars(
    ax: Axes,
    rows: Rows,
    key: str,
    end_of: Callable[[date], date],
    label: str,
    color: str,
) -> None:
    """A period's figure as a horizontal segment over the days it covers (dashed when
    the period is not complete, so a partial week does not pass for a whole one)."""
    for index, row in enumerate(rows):
        start = _as_date(row[key])
        value = _number(row["active_queues"])
        ax.hlines(
            value,
            _x(start) - 0.5,
            _x(end_of(start)) - 0.5,
            colors=color,
            linewidth=2.5,
            linestyles="solid" if row.get("complete") else "dashed",
            label=label if index == 0 else None,
        )


def _next_month(start: date) -> date:
    return (start.replace(day=28) + 4 * DAY).replace(day=1)


def _churn(fig: Figure, calendar: Calendar, daily: Rows) -> None:
    top = _day_axes(
        fig, calendar, f"Queues created and deleted per {calendar.unit}, all routers", 211
    )
    created = calendar.series(daily, "queues_created")
    deleted = calendar.series(daily, "queues_deleted")
    net = calendar.series(daily, "queues_net")
    bar = 0.8 * calendar.width
    made = top.bar(calendar.days, created, width=bar, color="tab:green", alpha=0.6,
                   label="created")  # fmt: skip
    gone = top.bar(calendar.days, [-v for v in deleted], width=bar, color="tab:red", alpha=0.6,
                   label="deleted (below 0)")  # fmt: skip
    _label_bars(top, made, created)
    _label_bars(top, gone, deleted)
    _line(top, calendar, net, "net (created - deleted)", color="black", linewidth=1.5)
    top.axhline(0, color="0.3", linewidth=0.8)
    top.set_ylabel(f"queues per {calendar.unit}")
    top.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    low, high = top.get_ylim()
    top.set_ylim(low, high + (high - low) * 0.35)  # the legend goes above the bars
    _legend(top, loc="upper left", ncols=3)
    bottom = _day_axes(
        fig, calendar, f"Growth: net queues since the first {calendar.unit} shown", 212
    )
    _line(bottom, calendar, _running_total(net), "cumulative net", color="tab:purple")
    bottom.axhline(0, color="0.3", linewidth=0.8)
    bottom.margins(y=0.15)  # room for a point's label at the top
    bottom.set_ylabel("queues")
    bottom.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    _legend(bottom)


def _running_total(values: Sequence[float]) -> list[float]:
    """Cumulative sum that skips missing days (and leaves them missing)."""
    total, out = 0.0, []
    for value in values:
        if math.isnan(value):
            out.append(NAN)
        else:
            total += value
            out.append(total)
    return out


# --- the store chart (stats --db) ---------------------------------------------------------

STORE_CHART = "store.png"


def store_totals(store_rows: Rows) -> tuple[Rows, dict[str, Rows]]:
    """(all routers per day, each router's rows) of the `store_daily` table."""
    per_day: dict[date, dict[str, float]] = {}
    by_router: dict[str, Rows] = defaultdict(list)
    for row in store_rows:
        day = _as_date(row["day"])
        total = per_day.setdefault(day, defaultdict(float))
        total["routers"] += 1
        for column in ("queues_stored", "msgs_stored"):
            total[column] += float(row[column] or 0)  # type: ignore[arg-type]
        by_router[str(row["router"])].append(row)
    totals = [{"day": day, **counts} for day, counts in sorted(per_day.items())]
    return totals, by_router


def write_store_chart(out_dir: Path, store_rows: Rows) -> Path:
    """What the routers' stores hold per day (the last reading of each day)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    totals, by_router = store_totals(store_rows)
    calendar = Calendar(totals)
    fig = plt.figure(figsize=(10, 6.5), dpi=100)
    for position, column, what in (
        (211, "queues_stored", "Queues stored"),
        (212, "msgs_stored", "Messages waiting"),
    ):
        ax = _day_axes(fig, calendar, f"{what}, read from the routers' databases", position)
        if len(by_router) > 1:  # with one router its line is the total's
            for router, rows in sorted(by_router.items()):
                _line(ax, calendar, calendar.series(rows, column), router, None,
                      alpha=0.6, linewidth=1, markersize=3)  # fmt: skip
        _line(ax, calendar, calendar.series(totals, column), "all routers", color="black",
              linewidth=2)  # fmt: skip
        ax.set_ylabel(what.split()[0].lower())
        _counts_from_zero(ax)
        ax.set_ylim(top=_top_from_data(ax, 1) * 1.3)  # room for the legend above the lines
        _legend(ax, loc="upper left", ncols=5)
    fig.tight_layout()
    path = out_dir / STORE_CHART
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path
