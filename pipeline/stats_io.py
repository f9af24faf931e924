"""Reading stats logs and writing the stats tables: the thin I/O layer of `stats`.

Router names: a log's router is its file name without `.csv`; a log named
`stats.csv` (the router's default) takes the name of its directory, so
`logs/eu-1/stats.csv` and `logs/eu-1.csv` both belong to router `eu-1`.
"""

from __future__ import annotations

import csv
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from .schemas import ROUTER_STATS_LINE_SCHEMA, STATS_LINE_SCHEMA, STATS_TIME_FORMAT
from .stats_transforms import TABLE_PERIOD, sort_keys, stats_tables

log = logging.getLogger(__name__)

DEFAULT_NAME = "stats"
UNSAFE = r'[,"]'  # kept out of router names: they travel as a CSV field
CSV_OPTIONS = {"mode": "DROPMALFORMED", "timestampFormat": STATS_TIME_FORMAT}


def router_name(path: str | os.PathLike[str]) -> str:
    """The router a stats log belongs to (see the module docstring)."""
    p = Path(path)
    stem = p.name[:-4] if p.name.endswith(".csv") else p.name
    name = p.parent.name if stem == DEFAULT_NAME else stem
    return re.sub(UNSAFE, "_", name)


def router_name_column(file_path: Column) -> Column:
    """`router_name` as a column expression over a file path or URI."""
    parts = F.split(file_path, "/")
    stem = F.regexp_replace(F.element_at(parts, -1), r"\.csv$", "")
    name = F.when(stem == DEFAULT_NAME, F.element_at(parts, -2)).otherwise(stem)
    return F.regexp_replace(name, UNSAFE, "_")


def stats_log_files(inputs: Iterable[str]) -> list[Path]:
    """Every stats log among `inputs` (files, or directories searched for `*.csv`), sorted."""
    found: set[Path] = set()
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found.update(p for p in path.rglob("*.csv") if p.is_file())
        elif path.is_file():
            found.add(path)
        else:
            raise FileNotFoundError(f"no stats log at {item}")
    return sorted(found)


def read_stats_logs(spark: SparkSession, inputs: list[str]) -> DataFrame:
    """All lines of the logs at `inputs` (files or directories), with their router."""
    reader = spark.read.options(
        header=True, recursiveFileLookup=True, pathGlobFilter="*.csv", **CSV_OPTIONS
    )
    raw = reader.schema(STATS_LINE_SCHEMA).csv(inputs)
    named = raw.select(router_name_column(F.col("_metadata.file_path")).alias("router"), "*")
    return named.select(*ROUTER_STATS_LINE_SCHEMA.fieldNames())


def lines_from_text(spark: SparkSession, lines: list[str]) -> DataFrame:
    """Parse log lines already prefixed with `router,` (the incremental reader's output)."""
    rdd = spark.sparkContext.parallelize(lines, max(1, min(len(lines) // 50_000, 64)))
    return spark.read.options(**CSV_OPTIONS).schema(ROUTER_STATS_LINE_SCHEMA).csv(rdd)


def table_schemas(spark: SparkSession) -> dict[str, StructType]:
    """The schema of every output table, derived from the transforms themselves."""
    empty = spark.createDataFrame([], ROUTER_STATS_LINE_SCHEMA)
    return {name: df.schema for name, df in stats_tables(empty).items()}


def write_tables(tables: dict[str, DataFrame], parquet_dir: str, *, replace_all: bool) -> None:
    """Parquet, one directory per table, partitioned by its period column.

    `replace_all` drops every old partition; otherwise only the partitions
    present in `tables` are replaced (dynamic partition overwrite).
    """
    mode = "static" if replace_all else "dynamic"
    for name, df in tables.items():
        log.info("stats: writing %s", name)
        (
            df.write.mode("overwrite")
            .option("partitionOverwriteMode", mode)
            .partitionBy(TABLE_PERIOD[name])
            .parquet(f"{parquet_dir}/{name}")
        )


def read_table(spark: SparkSession, parquet_dir: str, name: str) -> DataFrame:
    schema = table_schemas(spark)[name]
    df = spark.read.schema(schema).parquet(f"{parquet_dir}/{name}")
    return df.select(*schema.fieldNames())


def collect_sorted(df: DataFrame) -> list[dict[str, object]]:
    return [row.asDict() for row in df.orderBy(*sort_keys(df)).collect()]


def write_csv(rows: list[dict[str, object]], columns: list[str], path: Path) -> None:
    """A CSV file for people, written whole and then renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_csv_value(row[c]) for c in columns] for row in rows)
    os.replace(tmp, path)


def _csv_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)
