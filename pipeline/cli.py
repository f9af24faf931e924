"""`smp-pipeline`: the command line of the Spark jobs (docs/pipeline.md).

    smp-pipeline stats LOG_OR_DIR... --out DIR [--follow [--once] [--start ...]]
    smp-pipeline compact STORE_LOG... --out PATH [--shards N]
    smp-pipeline synth --records N --out PATH

`--master` passes through to Spark (default `local[*]`); `--conf key=value`
sets any Spark option. Under spark-submit (`pipeline/submit.py`) the master is
spark-submit's unless `--master` is given.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

log = logging.getLogger("pipeline")


def build_parser(spark_submit: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smp-pipeline", description="Spark jobs over SMP router logs."
    )
    parser.add_argument(
        "--master",
        default=None if spark_submit else "local[*]",
        help="Spark master URL: local[*], spark://host:7077, yarn, k8s://https://host:443",
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark option"
    )
    parser.add_argument("--log-level", default="INFO", help="pipeline log level (INFO, DEBUG)")
    commands = parser.add_subparsers(dest="command", required=True)
    _stats_parser(commands)
    _compact_parser(commands)
    _synth_parser(commands)
    return parser


def _stats_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("stats", help="stats logs -> daily/weekly/monthly tables and charts")
    p.add_argument("inputs", nargs="+", help="stats log files, or directories of *.csv logs")
    p.add_argument("--out", required=True, help="directory for CSV tables and PNG charts")
    p.add_argument("--parquet", help="where the Parquet tables go (default OUT/parquet)")
    p.add_argument(
        "--follow", action="store_true", help="incremental: process only what was appended"
    )
    p.add_argument("--checkpoint", help="positions of --follow (default OUT/checkpoint)")
    p.add_argument(
        "--start",
        default="beginning",
        help="for logs not seen before: beginning, latest, or an ISO 8601 UTC time",
    )
    p.add_argument("--every", type=float, default=60.0, help="seconds between --follow passes")
    p.add_argument("--once", action="store_true", help="one --follow pass, then exit")


def _compact_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("compact", help="replay store logs -> compacted store log(s)")
    p.add_argument("inputs", nargs="+", help="store log files, replayed in the order given")
    p.add_argument(
        "--out",
        required=True,
        help="compacted log file; with --shards N, a directory of N logs",
    )
    p.add_argument("--shards", type=int, default=1, help="split queues by recipient id hash")
    p.add_argument("--partitions", type=int, default=0, help="Spark partitions (0: automatic)")


def _synth_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("synth", help="write a large synthetic store log")
    p.add_argument("--records", type=int, required=True, help="number of log records")
    p.add_argument("--out", required=True, help="store log file to write")
    p.add_argument("--seed", type=int, default=1, help="random seed (same seed, same log)")


def main(argv: Sequence[str] | None = None, *, spark_submit: bool = False) -> int:
    args = build_parser(spark_submit).parse_args(argv)
    _log_to_stderr(args.log_level.upper())
    try:
        return _dispatch(args)
    except (ValueError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 2


def _log_to_stderr(level: str) -> None:
    """Progress lines of the pipeline's own loggers (Spark's bar is separate)."""
    log.setLevel(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log.handlers = [handler]
    log.propagate = False


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "synth":
        from .synth import write_synthetic_log

        write_synthetic_log(args.out, args.records, seed=args.seed)
        return 0
    from .session import build_session, parse_conf

    spark = build_session(f"smp-pipeline {args.command}", args.master, parse_conf(args.conf))
    spark.sparkContext.setLogLevel("WARN")
    try:
        if args.command == "stats":
            _stats(spark, args)
        else:
            _compact(spark, args)
    finally:
        spark.stop()
    return 0


def _stats(spark, args: argparse.Namespace) -> None:
    from .follow import parse_start
    from .stats_job import StatsOutput, follow_logs, run_stats

    output = StatsOutput.at(args.out, args.parquet)
    if not args.follow:
        run_stats(spark, args.inputs, output)
        return
    checkpoint = args.checkpoint or f"{args.out}/checkpoint"
    follow_logs(
        spark,
        args.inputs,
        output,
        checkpoint,
        start=parse_start(args.start),
        every=args.every,
        once=args.once,
    )


def _compact(spark, args: argparse.Namespace) -> None:
    from .compact_job import run_compact

    if args.shards < 1:
        raise ValueError("--shards must be at least 1")
    run_compact(spark, args.inputs, args.out, shards=args.shards, partitions=args.partitions)


if __name__ == "__main__":
    sys.exit(main())
