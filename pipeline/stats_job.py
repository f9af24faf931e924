"""`smp-pipeline stats`: stats logs -> tables (Parquet + CSV) and charts.

Whole runs read every log with Spark's own CSV reader and replace all outputs.
Incremental runs (`--follow`) use stored positions; see `pipeline.follow`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from . import follow
from .charts import YOUNG_DAYS, write_charts
from .schemas import ROUTER_STATS_LINE_SCHEMA
from .stats_io import (
    collect_sorted,
    lines_from_text,
    read_stats_logs,
    read_table,
    router_name,
    stats_log_files,
    table_schemas,
    write_csv,
    write_tables,
)
from .stats_transforms import TABLE_PERIOD, interval_lines, since_periods, stats_tables

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StatsOutput:
    out_dir: Path  # CSV and PNG (the driver writes these)
    parquet: str  # Parquet tables: any path or URI Spark can write

    @classmethod
    def at(cls, out_dir: str, parquet: str | None = None) -> StatsOutput:
        return cls(Path(out_dir), parquet or str(Path(out_dir) / "parquet"))


NO_LINES_WARNING = (
    "smp-pipeline: warning: {inputs}: no statistics lines yet, only headers, so the tables "
    "and charts are empty; a router writes its first line at the end of its first "
    "stats_interval (an hour by default)"
)


def warn_no_lines(inputs: list[str]) -> None:
    print(NO_LINES_WARNING.format(inputs=" ".join(inputs)), file=sys.stderr, flush=True)


def run_stats(spark: SparkSession, inputs: list[str], output: StatsOutput) -> None:
    """Read every log whole and replace every output."""
    log.info("stats: reading %d input path(s)", len(inputs))
    lines = read_stats_logs(spark, inputs).cache()  # six tables are built from it
    if lines.isEmpty():
        warn_no_lines(inputs)
    try:
        tables = stats_tables(lines)
        write_tables(tables, output.parquet, replace_all=True)
        rows = {name: collect_sorted(df) for name, df in tables.items()}
        young = 0 < len(rows["total_daily"]) <= YOUNG_DAYS
        hourly = [r.asDict() for r in interval_lines(lines).collect()] if young else None
        write_reports(spark, output, rows, hourly)
    finally:
        lines.unpersist()


def run_increment(
    spark: SparkSession,
    inputs: list[str],
    output: StatsOutput,
    checkpoint_dir: str,
    start: str = "beginning",
) -> int:
    """One incremental pass; returns how many new lines it processed."""
    checkpoint = follow.load_checkpoint(checkpoint_dir)
    lines = _read_new_lines(inputs, checkpoint, start)
    if not lines:
        follow.commit_checkpoint(checkpoint_dir, checkpoint)
        log.info("stats: nothing new")
        return 0
    batch = checkpoint.next_batch
    first, last = follow.line_days(lines)
    log.info("stats: batch %d, %d new line(s), days %s..%s", batch, len(lines), first, last)
    lines_from_text(spark, lines).write.mode("overwrite").parquet(
        f"{_staged(checkpoint_dir)}/batch={batch}"
    )
    checkpoint.batches[batch] = (first, last)
    _recompute_from(spark, checkpoint, checkpoint_dir, follow.first_day_needed(first), output)
    rows = {name: collect_sorted(read_table(spark, output.parquet, name)) for name in TABLE_PERIOD}
    write_reports(spark, output, rows, _young_interval_rows(spark, checkpoint, checkpoint_dir,
                                                            rows["total_daily"]))
    checkpoint.next_batch = batch + 1
    follow.commit_checkpoint(checkpoint_dir, checkpoint)
    return len(lines)


def follow_logs(
    spark: SparkSession,
    inputs: list[str],
    output: StatsOutput,
    checkpoint_dir: str,
    *,
    start: str = "beginning",
    every: float = 60.0,
    once: bool = False,
    after_pass: Callable[[], None] | None = None,
) -> None:
    """Incremental passes every `every` seconds (or one pass with `once`), each followed
    by `after_pass` (`stats --db` reads the stores then)."""
    while True:
        if inputs:
            run_increment(spark, inputs, output, checkpoint_dir, start)
        if after_pass is not None:
            after_pass()
        if once:
            return
        time.sleep(every)


def _read_new_lines(inputs: list[str], checkpoint: follow.Checkpoint, start: str) -> list[str]:
    lines: list[str] = []
    for path in stats_log_files(inputs):
        key = str(path.resolve())
        position = checkpoint.logs.get(key) or follow.first_position(path, router_name(path), start)
        new, checkpoint.logs[key] = follow.read_appended(path, position)
        lines += new
    return lines


def _young_interval_rows(
    spark: SparkSession, checkpoint: follow.Checkpoint, checkpoint_dir: str, daily: list[dict]
) -> list[dict] | None:
    """The staged interval lines, when the data spans at most YOUNG_DAYS days (the
    charts are then drawn per hour); None otherwise."""
    if not 0 < len(daily) <= YOUNG_DAYS:
        return None
    first_day = str(daily[0]["day"])
    paths = [f"{_staged(checkpoint_dir)}/batch={n}"
             for n in follow.batches_since(checkpoint, first_day)]  # fmt: skip
    staged = spark.read.schema(ROUTER_STATS_LINE_SCHEMA).parquet(*paths)
    return [r.asDict() for r in interval_lines(staged).collect()]


def _staged(checkpoint_dir: str) -> str:
    return f"{checkpoint_dir}/lines"


def _recompute_from(
    spark: SparkSession,
    checkpoint: follow.Checkpoint,
    checkpoint_dir: str,
    first_day: str,
    output: StatsOutput,
) -> None:
    """Rebuild every output period from `first_day` on, from all staged lines."""
    batches = follow.batches_since(checkpoint, first_day)
    log.info("stats: recomputing periods from %s over %d batch(es)", first_day, len(batches))
    paths = [f"{_staged(checkpoint_dir)}/batch={n}" for n in batches]
    staged = spark.read.schema(ROUTER_STATS_LINE_SCHEMA).parquet(*paths)
    lines = staged.where(F.to_date("time") >= F.to_date(F.lit(first_day)))
    tables = since_periods(stats_tables(lines), first_day)
    write_tables(tables, output.parquet, replace_all=False)


def write_reports(
    spark: SparkSession,
    output: StatsOutput,
    rows: dict[str, list[dict]] | None = None,
    interval_rows: list[dict] | None = None,
) -> None:
    """CSV copies of every table and the charts; from `rows` (whole tables, sorted)
    when the caller has them, else read back from the Parquet tables."""
    output.out_dir.mkdir(parents=True, exist_ok=True)
    schemas = table_schemas(spark)
    if rows is None:
        rows = {
            name: collect_sorted(read_table(spark, output.parquet, name)) for name in TABLE_PERIOD
        }
    for name in TABLE_PERIOD:
        write_csv(rows[name], schemas[name].fieldNames(), output.out_dir / f"{name}.csv")
    charts = write_charts(
        output.out_dir / "charts",
        rows["total_daily"],
        rows["router_daily"],
        rows["total_weekly"],
        rows["total_monthly"],
        interval_rows,
    )
    log.info(
        "stats: wrote %d CSV table(s) and %d chart(s) to %s", len(rows), len(charts), output.out_dir
    )
