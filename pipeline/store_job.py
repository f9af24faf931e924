"""`smp-pipeline stats --db`: a router's postgres store read by Spark's JDBC source,
into the `store_daily` table (docs/pipeline.md#a-router-on-postgresql).

What it reads, and why so (issue: "metrics ... never count tables"):

- the catalog's row estimates (`pg_class.reltuples`), to choose how many
  partitions the large tables are read in; no COUNT;
- `msg_queues`, the large table, in ranges of its primary key `pk` (bounds from
  `min(pk)`/`max(pk)`, two index look-ups), one Spark task per range, only
  booleans computed in the database from each row (never an id or a key);
- `message_queues`, the per-queue message counters the router keeps as it writes
  and deletes (so `messages` itself, the hottest table, is never read), in ranges
  of the first byte of its primary key;
- `services` with `service_queues`, the per-service counters: a few rows.

Every read is a plain snapshot query (no lock the router's writes wait for), in
fetches of `FETCH_SIZE` rows (Spark's PostgreSQL dialect turns autocommit off for
that, so the driver streams through a cursor instead of holding a range in memory).
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .schemas import STORE_DAILY_SCHEMA
from .store_source import StoreDatabase
from .store_transforms import store_figures

log = logging.getLogger(__name__)

ROWS_PER_PARTITION = 1_000_000
MAX_PARTITIONS = 256  # the key ranges of message_queues are ranges of one byte
FETCH_SIZE = 10_000
STORE_TABLE = "store_daily"


def _jdbc(spark: SparkSession, db: StoreDatabase, query: str, **options: object) -> DataFrame:
    reader = spark.read.format("jdbc").option("url", db.jdbc_url)
    reader = reader.option("dbtable", f"({query}) AS t").option("fetchsize", FETCH_SIZE)
    for key, value in {**db.properties, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def _estimates(spark: SparkSession, db: StoreDatabase) -> dict[str, int]:
    """The catalog's row estimates of the schema's tables (0 before the first ANALYZE)."""
    query = (
        "SELECT c.relname AS name, greatest(c.reltuples, 0)::bigint AS estimate"
        " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        f" WHERE n.nspname = '{db.schema}' AND c.relkind = 'r'"
    )
    return {row["name"]: row["estimate"] for row in _jdbc(spark, db, query).collect()}


def partitions_for(estimate: int, wanted: int = 0) -> int:
    """`wanted` when given, else one partition per ROWS_PER_PARTITION estimated rows."""
    count = wanted or math.ceil(estimate / ROWS_PER_PARTITION)
    return max(1, min(MAX_PARTITIONS, count))


def byte_ranges(column: str, partitions: int) -> list[str]:
    """SQL predicates that split a BYTEA key into `partitions` ranges of its first byte
    (random ids: even ranges), each a range scan of the key's index."""
    if partitions == 1:
        return ["TRUE"]
    bounds = [256 * i // partitions for i in range(1, partitions)]

    def key(b: int) -> str:
        return f"decode('{b:02x}', 'hex')"

    ranges = [f"{column} < {key(bounds[0])}"]
    ranges += [f"{column} >= {key(lo)} AND {column} < {key(hi)}"
               for lo, hi in zip(bounds, bounds[1:], strict=False)]  # fmt: skip
    ranges.append(f"{column} >= {key(bounds[-1])}")
    return ranges


def read_queue_flags(
    spark: SparkSession, db: StoreDatabase, partitions: int
) -> DataFrame:
    bounds = _jdbc(
        spark, db, f"SELECT min(pk) AS lo, max(pk) AS hi FROM {db.table('msg_queues')}"
    ).first()
    query = (
        "SELECT pk, deleted_at IS NULL AS live, sender_key IS NOT NULL AS secured,"
        " notifier_id IS NOT NULL AS with_notifier, link_id IS NOT NULL AS with_link,"
        " coalesce(queue_mode = 'C'::bytea, FALSE) AS contact, status = 'off' AS off"
        f" FROM {db.table('msg_queues')}"
    )
    if bounds is None or bounds["lo"] is None:  # no queue rows: one read of nothing
        return _jdbc(spark, db, query)
    return _jdbc(
        spark, db, query, partitionColumn="pk", lowerBound=bounds["lo"],
        upperBound=bounds["hi"] + 1, numPartitions=partitions,
    )


def read_message_counters(
    spark: SparkSession, db: StoreDatabase, partitions: int
) -> DataFrame:
    query = (
        "SELECT recipient_id, msg_queue_size, msg_quota_reached"
        f" FROM {db.table('message_queues')}"
    )
    predicates = byte_ranges("recipient_id", partitions)
    properties = {**db.properties, "fetchsize": str(FETCH_SIZE)}
    frame = spark.read.jdbc(db.jdbc_url, f"({query}) AS t", predicates=predicates,
                            properties=properties)  # fmt: skip
    return frame.select("msg_queue_size", "msg_quota_reached")


def read_services(spark: SparkSession, db: StoreDatabase) -> DataFrame:
    query = (
        "SELECT s.service_role AS role,"
        " coalesce(sum(q.queue_count) FILTER (WHERE q.side = 'r'), 0)::bigint AS rcv_queues,"
        " coalesce(sum(q.queue_count) FILTER (WHERE q.side = 'n'), 0)::bigint AS ntf_queues"
        f" FROM {db.table('services')} s LEFT JOIN {db.table('service_queues')} q"
        " ON q.service_id = s.service_id GROUP BY s.service_id, s.service_role"
    )
    return _jdbc(spark, db, query)


def read_store(
    spark: SparkSession, db: StoreDatabase, partitions: int = 0
) -> DataFrame:
    """One row: the router's store figures now (`store_transforms.store_figures`)."""
    read_at = datetime.now(UTC).replace(microsecond=0)
    estimates = _estimates(spark, db)
    if "msg_queues" not in estimates:
        raise ValueError(
            f"--db {db.shown}: schema {db.schema} holds no router store (no msg_queues); "
            "give the router's db_schema as ?schema=NAME"
        )
    queue_parts = partitions_for(estimates.get("msg_queues", 0), partitions)
    counter_parts = partitions_for(estimates.get("message_queues", 0), partitions)
    log.info(
        "stats: reading the store of %s from %s (schema %s) in %d + %d partition(s)",
        db.router, db.shown, db.schema, queue_parts, counter_parts,
    )
    return store_figures(
        db.router,
        F.lit(read_at).cast("timestamp"),
        read_queue_flags(spark, db, queue_parts),
        read_message_counters(spark, db, counter_parts),
        read_services(spark, db),
    )


def write_store_table(readings: DataFrame, parquet_dir: str) -> None:
    """Each reading replaces its router's row of that day, other rows stay."""
    (
        readings.select(*STORE_DAILY_SCHEMA.fieldNames())
        .write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy("day", "router")
        .parquet(f"{parquet_dir}/{STORE_TABLE}")
    )


def read_store_table(spark: SparkSession, parquet_dir: str) -> list[dict[str, object]]:
    frame = spark.read.schema(STORE_DAILY_SCHEMA).parquet(f"{parquet_dir}/{STORE_TABLE}")
    ordered = frame.select(*STORE_DAILY_SCHEMA.fieldNames()).orderBy("day", "router")
    return [row.asDict() for row in ordered.collect()]


def run_store(
    spark: SparkSession, databases: list[StoreDatabase], parquet_dir: str, partitions: int = 0
) -> list[dict[str, object]]:
    """Read every router's store, add the readings to `store_daily`, return the table."""
    readings = [read_store(spark, db, partitions) for db in databases]
    combined = readings[0]
    for reading in readings[1:]:
        combined = combined.unionByName(reading)
    # the figures are computed once, then written (the reads are not repeated)
    rows = combined.collect()
    write_store_table(spark.createDataFrame(rows, STORE_DAILY_SCHEMA), parquet_dir)
    return read_store_table(spark, parquet_dir)
