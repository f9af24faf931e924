"""A postgres store's rows -> the store's figures. Pure DataFrame -> DataFrame.

The stats log says what happened in a period (sent, delivered, created ...); these
figures say what a router holds at the moment they are read: the queues stored
and what they have (a sender key, a notifier, a short link), the messages waiting
and the queues at their quota, the services and the queues associated with them.
Memory, journal and SQLite routers answer the same questions on the control port
(`stats`: `queues_stored`) and the metrics; for a router on PostgreSQL the
pipeline reads them from the database (docs/pipeline.md#a-router-on-postgresql).

Inputs, as `store_job` reads them (no id, key or message body ever reaches Spark):

- queue flags, one row per `msg_queues` row: `live, secured, with_notifier,
  with_link, contact, off` (booleans);
- message counters, one row per `message_queues` row: `msg_queue_size`,
  `msg_quota_reached` (the router keeps them as it writes and deletes messages,
  the QUOTA marker counted in the size);
- services, one row per service: `role` (M, N, P), `rcv_queues`, `ntf_queues`
  (the counters the router keeps per service and side, docs/protocol.md#services).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .schemas import STORE_FIGURE_NAMES

ROLE_FIGURE = {"M": "services_messaging", "N": "services_notifier", "P": "services_proxy"}


def _count_if(condition: Column) -> Column:
    return F.coalesce(F.sum(condition.cast("long")), F.lit(0)).cast("long")


def _sum(column: str) -> Column:
    return F.coalesce(F.sum(column), F.lit(0)).cast("long")


def queue_figures(flags: DataFrame) -> DataFrame:
    """One row: the live queues and what they have; soft-deleted rows the router keeps
    until `db_deleted_ttl` has passed are `queues_deleted_kept`."""
    live = F.col("live")
    return flags.agg(
        _count_if(live).alias("queues_stored"),
        _count_if(live & F.col("secured")).alias("queues_secured"),
        _count_if(live & F.col("with_notifier")).alias("queues_with_notifier"),
        _count_if(live & F.col("with_link")).alias("queues_with_link"),
        _count_if(live & F.col("contact")).alias("queues_contact"),
        _count_if(live & F.col("off")).alias("queues_off"),
        _count_if(~live).alias("queues_deleted_kept"),
    )


def message_figures(counters: DataFrame) -> DataFrame:
    """One row: messages waiting (a queue at its quota holds the QUOTA marker beside its
    messages, docs/protocol.md#behaviour: it is not a message), the queues holding any,
    and the queues at their quota."""
    quota = F.col("msg_quota_reached")
    return counters.agg(
        (_sum("msg_queue_size") - _count_if(quota)).alias("msgs_stored"),
        _count_if(F.col("msg_queue_size") > 0).alias("queues_with_msgs"),
        _count_if(quota).alias("queues_at_quota"),
    )


def service_figures(services: DataFrame) -> DataFrame:
    """One row: services per role, and the queues associated with them per side."""
    return services.agg(
        *(_count_if(F.col("role") == role).alias(name) for role, name in ROLE_FIGURE.items()),
        _sum("rcv_queues").alias("service_queues_recipient"),
        _sum("ntf_queues").alias("service_queues_notifier"),
    )


def store_figures(
    router: str, read_at: Column, flags: DataFrame, counters: DataFrame, services: DataFrame
) -> DataFrame:
    """One row for the router: `router, day, read_at` and every figure."""
    joined = queue_figures(flags).crossJoin(message_figures(counters))
    joined = joined.crossJoin(service_figures(services))
    return joined.select(
        F.lit(router).alias("router"),
        F.to_date(read_at).alias("day"),
        read_at.alias("read_at"),
        *STORE_FIGURE_NAMES,
    )
