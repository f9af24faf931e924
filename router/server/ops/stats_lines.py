"""The stats log's lines: its columns, its periods, and a line as the difference
of two snapshots of the router's statistics (pure functions, no I/O).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from ..core.counters import RouterStatistics

DAY = 86400
DEFAULT_INTERVAL = 3600


# Count columns: how many times each thing happened in the period. Each column
# writes one field of the router's statistics; the column names are the file's.
COUNTER_COLUMNS = {
    "queues_created": "queues_created",
    "queues_secured": "queues_secured",
    "queues_deleted": "queues_deleted",
    "msgs_sent": "messages_sent",
    "msgs_delivered": "messages_delivered",
    "msgs_acknowledged": "messages_acked",
    "msgs_expired": "messages_expired",
    "msgs_quota_refused": "messages_quota_refused",
}
# Gauge columns: the statistic's value at the end of the period.
GAUGE_COLUMNS = {"subscriptions": "subscriptions", "clients": "connections"}
COUNTER_FIELDS = tuple(COUNTER_COLUMNS)
GAUGE_FIELDS = tuple(GAUGE_COLUMNS)
ACTIVE_FIELDS = ("active_queues_day", "active_queues_week", "active_queues_month")
COLUMNS = ("time", "period", *COUNTER_FIELDS, *GAUGE_FIELDS, *ACTIVE_FIELDS)
HEADER = ",".join(COLUMNS)


# --- pure helpers: periods and line formatting --------------------------------


def period_label(seconds: int) -> str:
    """ISO 8601 duration of a period: 3600 -> PT1H, 900 -> PT15M, 86400 -> P1D."""
    if seconds == DAY:
        return "P1D"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}H" if hours else "",
        f"{minutes}M" if minutes else "",
        f"{secs}S" if secs else "",
    ]
    return "PT" + "".join(parts)


def check_interval(seconds: int) -> int:
    """Intervals must tile a UTC day so that every line falls in exactly one day."""
    if seconds < 1 or DAY % seconds:
        raise ValueError(f"stats interval must divide 86400 seconds, got {seconds}")
    return seconds


def floor_to(ts: float, step: int) -> int:
    return int(ts // step) * step


def format_time(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_line(
    start: int,
    seconds: int,
    counts: Mapping[str, int],
    gauges: Mapping[str, int],
    active: Mapping[str, int],
) -> str:
    """One CSV line (with its newline) in the order of `COLUMNS`."""
    values = [format_time(start), period_label(seconds)]
    values += [str(int(counts.get(name, 0))) for name in COUNTER_FIELDS]
    values += [str(int(gauges.get(name, 0))) for name in GAUGE_FIELDS]
    values += [str(int(active.get(name, 0))) for name in ACTIVE_FIELDS]
    return ",".join(values) + "\n"


def interval_counts(before: RouterStatistics, after: RouterStatistics) -> dict[str, int]:
    """The count columns of the period between two snapshots."""
    return {
        column: getattr(after, field) - getattr(before, field)
        for column, field in COUNTER_COLUMNS.items()
    }


def gauges(snapshot: RouterStatistics) -> dict[str, int]:
    return {column: getattr(snapshot, field) for column, field in GAUGE_COLUMNS.items()}


def stats_line(
    start: int,
    seconds: int,
    before: RouterStatistics,
    after: RouterStatistics,
    active: Mapping[str, int],
) -> str:
    """The line of the period [start, start + seconds) whose ends the snapshots are."""
    return format_line(start, seconds, interval_counts(before, after), gauges(after), active)


def rebase(snapshot: RouterStatistics, counts: Mapping[str, int]) -> RouterStatistics:
    """The snapshot from which `snapshot` is `counts` later (counts as saved by the log)."""
    earlier = {
        field: getattr(snapshot, field) - int(counts.get(column, 0))
        for column, field in COUNTER_COLUMNS.items()
    }
    return replace(snapshot, **earlier)


def _day(ts: int) -> date:
    return datetime.fromtimestamp(ts, UTC).date()


def _week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def period_resets(old_day_start: int, new_day_start: int) -> tuple[bool, bool]:
    """(week sketch cleared, month sketch cleared) when the day moves on."""
    old, new = _day(old_day_start), _day(new_day_start)
    return _week_start(old) != _week_start(new), (old.year, old.month) != (new.year, new.month)
