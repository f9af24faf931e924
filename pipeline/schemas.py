"""Explicit schemas of everything the pipeline reads.

The stats log columns are those of `router.server.ops.statslog.COLUMNS`
(docs/stats-log.md); a test checks that the two lists agree.
"""

from __future__ import annotations

from pyspark.sql.types import (
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

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

# One reading of a router's postgres store (pipeline/store_transforms.py).
STORE_QUEUE_FIGURES = (
    "queues_stored", "queues_secured", "queues_with_notifier", "queues_with_link",
    "queues_contact", "queues_off", "queues_deleted_kept",
)  # fmt: skip
STORE_MESSAGE_FIGURES = ("msgs_stored", "queues_with_msgs", "queues_at_quota")
STORE_SERVICE_FIGURES = (
    "services_messaging", "services_notifier", "services_proxy",
    "service_queues_recipient", "service_queues_notifier",
)  # fmt: skip
STORE_FIGURE_NAMES = STORE_QUEUE_FIGURES + STORE_MESSAGE_FIGURES + STORE_SERVICE_FIGURES
STORE_DAILY_SCHEMA = StructType(
    [
        StructField("router", StringType(), nullable=False),
        StructField("day", DateType(), nullable=False),
        StructField("read_at", TimestampType(), nullable=False),
        *(StructField(name, LongType(), nullable=False) for name in STORE_FIGURE_NAMES),
    ]
)
