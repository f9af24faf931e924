"""Stats log lines -> daily, weekly and monthly tables. Pure DataFrame -> DataFrame.

Input: lines in `ROUTER_STATS_LINE_SCHEMA` (router, time, period, numbers). Rules
(docs/stats-log.md, docs/pipeline.md):

- A line repeated after a router crash has the same (router, period, time); the
  repeat comes from an earlier snapshot of the same period, so per column the
  largest value wins.
- A day's counts are those of its `P1D` line when there is one, else the sum of
  its interval lines (the day is then marked incomplete).
- A week or month is complete when every one of its days (7, or 28 to 31) is
  present and complete: October with 15 complete days is not.
- Gauges become peaks (the largest value written in the period). Active queues
  are running counts within their day / week / month: the largest one seen is the
  period's figure.
- Totals add routers up. Active queue counts add up because a queue lives on one
  router; peaks add up to an upper bound (routers peak at different times).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .schemas import DAY_PERIOD, STATS_COUNTERS, STATS_GAUGES, STATS_NUMBERS

PEAKS = ("peak_subscriptions", "peak_clients")
DAILY_ACTIVE = ("active_queues_day", "active_queues_week", "active_queues_month")


def _ratio(numerator: str, denominator: str) -> Column:
    return F.when(F.col(denominator) > 0, F.col(numerator) / F.col(denominator)).cast("double")


def delivery_ratio() -> Column:
    """Acknowledged / sent: how much of what was sent reached its recipient."""
    return F.round(_ratio("msgs_acknowledged", "msgs_sent"), 6).alias("delivery_ratio")


def expired_ratio() -> Column:
    """Expired / sent: messages nobody fetched before the router's expiration."""
    return F.round(_ratio("msgs_expired", "msgs_sent"), 6).alias("expired_ratio")


def quota_refused_ratio() -> Column:
    """Refused / attempted: the share of SENDs answered ERR QUOTA (a full queue)."""
    attempted = F.col("msgs_sent") + F.col("msgs_quota_refused")
    refused = F.when(attempted > 0, F.col("msgs_quota_refused") / attempted).cast("double")
    return F.round(refused, 6).alias("quota_refused_ratio")


def queues_net() -> Column:
    """Queues created minus queues deleted: how the queue population grew."""
    return (F.col("queues_created") - F.col("queues_deleted")).alias("queues_net")


def derived() -> list[Column]:
    """The figures computed from a period's sums, in every table."""
    return [delivery_ratio(), expired_ratio(), quota_refused_ratio(), queues_net()]


def dedupe_lines(lines: DataFrame) -> DataFrame:
    """One line per (router, period, time); the largest value per column wins."""
    return lines.groupBy("router", "period", "time").agg(
        *(F.max(name).alias(name) for name in STATS_NUMBERS)
    )


def with_periods(lines: DataFrame) -> DataFrame:
    """Adds the UTC day, ISO week (its Monday) and month (its 1st) of every line."""
    return lines.select(
        "*",
        F.to_date("time").alias("day"),
        F.to_date(F.date_trunc("week", "time")).alias("week"),
        F.to_date(F.date_trunc("month", "time")).alias("month"),
    )


def daily_by_router(lines: DataFrame) -> DataFrame:
    """One row per router and UTC day."""
    is_day = F.col("period") == DAY_PERIOD
    grouped = with_periods(dedupe_lines(lines)).groupBy("router", "day", "week", "month")
    aggregated = grouped.agg(
        F.max(is_day.cast("int")).alias("has_day_line"),
        *(F.sum(F.when(is_day, F.col(c))).alias(f"day_{c}") for c in STATS_COUNTERS),
        *(F.sum(F.when(~is_day, F.col(c))).alias(f"int_{c}") for c in STATS_COUNTERS),
        *(F.max(g).alias(p) for g, p in zip(STATS_GAUGES, PEAKS, strict=True)),
        *(F.max(a).alias(a) for a in DAILY_ACTIVE),
    )
    counts = [
        F.when(F.col("has_day_line") == 1, F.col(f"day_{c}"))
        .otherwise(F.coalesce(F.col(f"int_{c}"), F.lit(0)))
        .alias(c)
        for c in STATS_COUNTERS
    ]
    with_counts = aggregated.select(
        "router",
        "day",
        "week",
        "month",
        (F.col("has_day_line") == 1).alias("complete"),
        *counts,
        *PEAKS,
        *DAILY_ACTIVE,
    )
    return with_counts.select(
        "router",
        "day",
        "week",
        "month",
        "complete",
        *STATS_COUNTERS,
        *derived(),
        *PEAKS,
        *DAILY_ACTIVE,
    )


def _days_in(period: str) -> Column:
    """How many days the week or month starting at column `period` has."""
    if period == "week":
        return F.lit(7)
    return F.dayofmonth(F.last_day(F.col(period)))


def _roll_up(daily: DataFrame, keys: list[str], active: str) -> DataFrame:
    """Sum counts, keep peaks and the largest running active count over `keys`;
    complete only when every day of the period is there and complete."""
    aggregated = daily.groupBy(*keys).agg(
        F.count("*").alias("days"),
        F.min(F.col("complete").cast("int")).alias("all_complete"),
        *(F.sum(c).alias(c) for c in STATS_COUNTERS),
        *(F.max(p).alias(p) for p in PEAKS),
        F.max(active).alias("active_queues"),
    )
    whole = (F.col("all_complete") == 1) & (F.col("days") == _days_in(keys[-1]))
    return aggregated.select(
        *keys,
        "days",
        whole.alias("complete"),
        *STATS_COUNTERS,
        *derived(),
        *PEAKS,
        "active_queues",
    )


def weekly_by_router(daily: DataFrame) -> DataFrame:
    """One row per router and ISO week (`week` is its Monday); from `daily_by_router`."""
    return _roll_up(daily, ["router", "week"], "active_queues_week")


def monthly_by_router(daily: DataFrame) -> DataFrame:
    """One row per router and month (`month` is its 1st); from `daily_by_router`."""
    return _roll_up(daily, ["router", "month"], "active_queues_month")


def _total(by_router: DataFrame, key: str, actives: tuple[str, ...]) -> DataFrame:
    aggregated = by_router.groupBy(key).agg(
        F.countDistinct("router").alias("routers"),
        F.min(F.col("complete").cast("int")).alias("all_complete"),
        *(F.sum(c).alias(c) for c in STATS_COUNTERS),
        *(F.sum(c).alias(c) for c in PEAKS + actives),
    )
    return aggregated.select(
        key,
        "routers",
        (F.col("all_complete") == 1).alias("complete"),
        *STATS_COUNTERS,
        *derived(),
        *PEAKS,
        *actives,
    )


def daily_total(daily: DataFrame) -> DataFrame:
    """All routers together, per UTC day; from `daily_by_router`."""
    return _total(daily, "day", DAILY_ACTIVE)


def weekly_total(weekly: DataFrame) -> DataFrame:
    return _total(weekly, "week", ("active_queues",))


def monthly_total(monthly: DataFrame) -> DataFrame:
    return _total(monthly, "month", ("active_queues",))


# The tables `stats` writes, each with the column its output is partitioned by.
TABLE_PERIOD = {
    "router_daily": "day",
    "router_weekly": "week",
    "router_monthly": "month",
    "total_daily": "day",
    "total_weekly": "week",
    "total_monthly": "month",
}


def stats_tables(lines: DataFrame) -> dict[str, DataFrame]:
    """Every output table from the lines."""
    daily = daily_by_router(lines)
    weekly = weekly_by_router(daily)
    monthly = monthly_by_router(daily)
    tables = {
        "router_daily": daily.drop("week", "month"),
        "router_weekly": weekly,
        "router_monthly": monthly,
        "total_daily": daily_total(daily),
        "total_weekly": weekly_total(weekly),
        "total_monthly": monthly_total(monthly),
    }
    return tables


def interval_lines(lines: DataFrame) -> DataFrame:
    """The interval lines (not `P1D`), one per (router, period, time), with the UTC hour
    they fall in (`hour`, "YYYY-MM-DD HH:00"): what the charts of a router younger than
    a few days plot per hour (pipeline/charts.py)."""
    deduped = dedupe_lines(lines).where(F.col("period") != DAY_PERIOD)
    hour = F.date_format(F.date_trunc("hour", "time"), "yyyy-MM-dd HH:00")
    return deduped.select("router", "period", hour.alias("hour"), *STATS_COUNTERS,
                          "active_queues_day")  # fmt: skip


def sort_keys(df: DataFrame) -> list[str]:
    """The order people read a table in: by period, then router."""
    return [c for c in ("day", "week", "month", "router") if c in df.columns]


def since_periods(tables: dict[str, DataFrame], first_day: str) -> dict[str, DataFrame]:
    """Keep only the periods that start on or after the period of `first_day` (YYYY-MM-DD).

    An incremental run recomputes these periods from every line they contain and
    replaces exactly these output partitions.
    """
    day = F.to_date(F.lit(first_day))
    bounds = {
        "day": day,
        "week": F.to_date(F.date_trunc("week", day)),
        "month": F.to_date(F.date_trunc("month", day)),
    }
    return {
        name: df.where(F.col(TABLE_PERIOD[name]) >= bounds[TABLE_PERIOD[name]])
        for name, df in tables.items()
    }
