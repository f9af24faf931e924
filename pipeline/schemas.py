"""Explicit schemas of everything the pipeline reads.

The stats log columns are those of `router.server.ops.statslog.COLUMNS`
(docs/stats-log.md); a test checks that the two lists agree.
"""

from __future__ import annotations

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

STATS_COUNTERS = (
    "queues_created",
    "queues_secured",
    "queues_deleted",
    "msgs_sent",
    "msgs_delivered",
    "msgs_acknowledged",
    "msgs_expired",
    "msgs_quota_refused",
)
STATS_GAUGES = ("subscriptions", "clients")
STATS_ACTIVE = ("active_queues_day", "active_queues_week", "active_queues_month")
STATS_NUMBERS = STATS_COUNTERS + STATS_GAUGES + STATS_ACTIVE

# One stats log line as the router writes it (`time` is UTC ISO 8601 with a Z).
STATS_LINE_SCHEMA = StructType(
    [
        StructField("time", TimestampType(), nullable=False),
        StructField("period", StringType(), nullable=False),
        *(StructField(name, LongType(), nullable=False) for name in STATS_NUMBERS),
    ]
)

# The same line with the name of the router that wrote it in front.
ROUTER_STATS_LINE_SCHEMA = StructType(
    [StructField("router", StringType(), nullable=False), *STATS_LINE_SCHEMA.fields]
)

STATS_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ssX"
DAY_PERIOD = "P1D"
