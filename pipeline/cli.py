"""`smp-pipeline`: the command line of the Spark jobs (docs/pipeline.md).

    smp-pipeline stats [LOG_OR_DIR...] --out DIR [--follow [--once] [--start ...]]
                       [--db [ROUTER=]postgresql://... [--jdbc-jar JAR]]
    smp-pipeline compact STORE_LOG... --out PATH [--shards N]
    smp-pipeline synth --records N --out PATH
    smp-pipeline synth --stats --days N [--routers N] [--down A-B] --out DIR

`--master` passes through to Spark (default `local[*]`); `--conf key=value`
sets any Spark option. Under spark-submit (`pipeline/submit.py`) the master is
spark-submit's unless `--master` is given.

Errors are one line on stderr: exit code 2 for a bad argument or input (a
missing log, a malformed master URL), 1 for anything else (no Java, a master
that cannot be reached, a failed Spark job). `--log-level DEBUG` adds the
traceback and Spark's own warnings.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from . import checks

log = logging.getLogger("pipeline")

EXIT_FAILURE = 1
EXIT_USAGE = 2
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the usage text and then the error."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(EXIT_USAGE)


def _number(kind: Callable[[str], float], lowest: float, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}, not {text!r}") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"{what}, not {text}")
        return value

    return parse


positive_int = _number(int, 1, "must be a whole number of at least 1")
non_negative_int = _number(int, 0, "must be a whole number of at least 0")
positive_seconds = _number(float, 0.001, "must be a number of seconds above 0")


def _checked(check: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type from a check that raises ValueError with a message."""

    def parse(text: str) -> str:
        try:
            check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


def _start_point(text: str) -> str:
    from .follow import parse_start

    return parse_start(text)


def _conf_pair(text: str) -> str:
    from .session import parse_conf

    parse_conf([text])
    return text


def _store_database(text: str) -> str:
    from .store_source import parse_store_database

    parse_store_database(text)
    return text


def _day_range(text: str) -> tuple[int, int]:
    first, sep, last = text.partition("-")
    try:
        bounds = (int(first), int(last if sep else first))
    except ValueError:
        message = f"takes a day or a range like 40-42, not {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"takes days counted from 1, first <= last, not {text}")
    return bounds


def build_parser(spark_submit: bool = False) -> argparse.ArgumentParser:
    parser = _Parser(prog="smp-pipeline", description="Spark jobs over SMP router logs.")
    parser.add_argument(
        "--master",
        type=_checked(checks.master_url),
        default=None if spark_submit else "local[*]",
        help="Spark master URL: local[*], spark://host:7077, yarn, k8s://https://host:443",
    )
    parser.add_argument(
        "--conf",
        action="append",
        type=_checked(_conf_pair),
        default=[],
        metavar="KEY=VALUE",
        help="a Spark option",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="pipeline log level (DEBUG also shows tracebacks and Spark's warnings)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _stats_parser(commands)
    _compact_parser(commands)
    _synth_parser(commands)
    return parser


def _stats_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("stats", help="stats logs -> daily/weekly/monthly tables and charts")
    p.add_argument("inputs", nargs="*", help="stats log files, or directories of *.csv logs")
    p.add_argument("--out", required=True, help="directory for CSV tables and PNG charts")
    p.add_argument("--parquet", help="where the Parquet tables go (default OUT/parquet)")
    p.add_argument(
        "--follow", action="store_true", help="incremental: process only what was appended"
    )
    p.add_argument("--checkpoint", help="positions of --follow (default OUT/checkpoint)")
    p.add_argument(
        "--start",
        default="beginning",
        type=_checked(_start_point),
        help="for logs not seen before: beginning, latest, or an ISO 8601 UTC time",
    )
    p.add_argument(
        "--every", type=positive_seconds, default=60.0, help="seconds between --follow passes"
    )
    p.add_argument("--once", action="store_true", help="one --follow pass, then exit")
    p.add_argument(
        "--db",
        action="append",
        type=_checked(_store_database),
        default=[],
        metavar="[ROUTER=]URL",
        help="a router's postgres store (its db_connection; ?schema=NAME for its db_schema), "
        "read into store_daily; repeatable",
    )
    p.add_argument(
        "--jdbc-jar",
        default=None,
        help="the PostgreSQL JDBC driver for --db (default: Debian's "
        "/usr/share/java/postgresql.jar)",
    )
    p.add_argument(
        "--db-partitions",
        type=non_negative_int,
        default=0,
        help="--db: ranges each large table is read in (0: one per million rows estimated)",
    )


def _compact_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("compact", help="replay store logs -> compacted store log(s)")
    p.add_argument("inputs", nargs="+", help="store log files, replayed in the order given")
    p.add_argument(
        "--out",
        required=True,
        help="compacted log file; with --shards N, a directory of N logs",
    )
    p.add_argument(
        "--shards", type=positive_int, default=1, help="split queues by recipient id hash"
    )
    p.add_argument(
        "--partitions", type=non_negative_int, default=0, help="Spark partitions (0: automatic)"
    )


def _synth_parser(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "synth", help="write a synthetic store log, or with --stats synthetic stats logs"
    )
    p.add_argument("--records", type=positive_int, help="store log: number of log records")
    p.add_argument(
        "--out", required=True, help="store log file to write; with --stats, a directory"
    )
    p.add_argument("--seed", type=int, default=1, help="random seed (same seed, same output)")
    p.add_argument(
        "--stats", action="store_true", help="write stats logs (OUT/<router>/stats.csv) instead"
    )
    p.add_argument("--days", type=positive_int, help="stats: days of lines per router")
    p.add_argument("--routers", type=positive_int, default=1, help="stats: how many routers")
    p.add_argument(
        "--first-day", default="2024-05-01", help="stats: the first UTC day (YYYY-MM-DD)"
    )
    p.add_argument(
        "--down",
        type=_day_range,
        action="append",
        default=[],
        metavar="A-B",
        help="stats: days A..B (counted from 1) when no router wrote anything; repeatable",
    )


def main(argv: Sequence[str] | None = None, *, spark_submit: bool = False) -> int:
    parser = build_parser(spark_submit)
    args = parser.parse_args(argv)
    _log_to_stderr(args.log_level)
    try:
        _check_before_spark(args, spark_submit)
        return _dispatch(args)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line, see _failure
        message, code = _failure(exc)
        log.debug("traceback of the failure", exc_info=exc)
        return _fail(message, code)


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"smp-pipeline: error: {message}\n")
    return code


def _failure(exc: BaseException) -> tuple[str, int]:
    """One line and an exit code for whatever ended the run."""
    if isinstance(exc, checks.EnvironmentProblem):
        return str(exc), EXIT_FAILURE
    if isinstance(exc, ValueError):  # UsageError, CorruptLogError, a bad --start, ...
        return str(exc), EXIT_USAGE
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}", EXIT_USAGE
    spark_error = _spark_error(exc)
    if spark_error is not None:
        return spark_error
    return f"{type(exc).__name__}: {_first_line(str(exc))}", EXIT_FAILURE


def _spark_error(exc: BaseException) -> tuple[str, int] | None:
    """Spark's own errors: the first line of the message; a path Spark could not find
    is bad input (2), the rest a failed job (1)."""
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:
        return None
    if isinstance(exc, PySparkException):
        condition = exc.getCondition() if hasattr(exc, "getCondition") else None
        code = EXIT_USAGE if condition and "PATH_NOT_FOUND" in condition else EXIT_FAILURE
        return f"Spark: {_first_line(str(exc))}", code
    if isinstance(exc, Py4JError):
        java = getattr(exc, "java_exception", None)
        text = str(java.toString()) if java is not None else str(exc)
        return f"Spark: {_first_line(text)}", EXIT_FAILURE
    return None


def _first_line(text: str, limit: int = 400) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _check_before_spark(args: argparse.Namespace, spark_submit: bool) -> None:
    """Everything that can be checked without a JVM, checked before one starts."""
    if args.command == "synth":
        _check_synth(args)
        return
    kind = "stats log" if args.command == "stats" else "store log"
    if args.command == "stats":
        _check_databases(args)
    checks.check_inputs_exist(args.inputs, kind)
    local = [path for path in args.inputs if checks.is_local_path(path)]
    if args.command == "stats" and args.inputs and len(local) == len(args.inputs):
        from .stats_io import stats_log_files

        if not stats_log_files(local):
            raise checks.UsageError("no stats logs (*.csv) in " + " ".join(args.inputs))
    if args.command == "compact":
        checks.check_writable_parent(args.out)
    else:
        checks.check_output_dir(args.out)
    if not (spark_submit and args.master is None):
        checks.check_java()
    checks.check_master_reachable(args.master)


def _check_databases(args: argparse.Namespace) -> None:
    """`stats` needs something to read; `--db` needs its driver and a database that answers."""
    if not args.inputs and not args.db:
        raise checks.UsageError("stats needs stats logs, or a router's database with --db")
    if not args.db:
        for given, flag in ((args.jdbc_jar is not None, "--jdbc-jar"),
                            (args.db_partitions, "--db-partitions")):  # fmt: skip
            if given:
                raise checks.UsageError(f"{flag} is for --db")
        return
    from .store_source import DEFAULT_DRIVER_JAR, check_driver_jar, check_reachable
    from .store_source import parse_store_database as parse

    args.jdbc_jar = args.jdbc_jar or DEFAULT_DRIVER_JAR
    check_driver_jar(args.jdbc_jar)
    databases = [parse(text) for text in args.db]
    names = [db.router for db in databases]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise checks.UsageError(f"--db: router {twice} is given twice (name them: ROUTER=URL)")
    for db in databases:
        check_reachable(db)


def _check_synth(args: argparse.Namespace) -> None:
    if args.stats:
        if args.days is None:
            raise checks.UsageError("synth --stats needs --days N")
        if args.records is not None:
            raise checks.UsageError(
                "synth --stats writes days of stats lines: give --days, not --records"
            )
        from .synth_stats import parse_day

        parse_day(args.first_day)
        checks.check_output_dir(args.out)
        return
    if args.records is None:
        raise checks.UsageError("synth needs --records N (or --stats --days N for stats logs)")
    if args.days is not None or args.down or args.routers != 1:
        raise checks.UsageError("--days, --routers and --down are for synth --stats")
    checks.check_writable_parent(args.out)


def _log_to_stderr(level: str) -> None:
    """Progress lines of the pipeline's own loggers (Spark's bar is separate)."""
    log.setLevel(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log.handlers = [handler]
    log.propagate = False
    # py4j logs the Java side's failures with tracebacks; the run's failure line says it
    logging.getLogger("py4j").setLevel(logging.DEBUG if level == "DEBUG" else logging.CRITICAL)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "synth":
        _synth(args)
        return 0
    from pyspark.sql import SparkSession

    from .session import build_session, parse_conf

    # `main` called from a program that already runs a session (a notebook, the
    # tests) uses that session and leaves it running; the command builds its own
    running = SparkSession.getActiveSession()
    conf = parse_conf(args.conf)
    if getattr(args, "db", None):  # the JDBC driver must be on the JVM's class path at start
        conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), args.jdbc_jar]))
    spark = running or build_session(
        f"smp-pipeline {args.command}",
        args.master,
        conf,
        quiet=args.log_level != "DEBUG",
    )
    try:
        if args.command == "stats":
            _stats(spark, args)
        else:
            _compact(spark, args)
    finally:
        if running is None:
            spark.stop()
    return 0


def _synth(args: argparse.Namespace) -> None:
    if args.stats:
        from .synth_stats import write_synthetic_stats_logs

        write_synthetic_stats_logs(
            args.out,
            days=args.days,
            routers=args.routers,
            first_day=args.first_day,
            down=args.down,
            seed=args.seed,
        )
        return
    from .synth import write_synthetic_log

    write_synthetic_log(args.out, args.records, seed=args.seed)


def _stats(spark, args: argparse.Namespace) -> None:
    from .follow import parse_start
    from .stats_job import StatsOutput, follow_logs, run_stats

    output = StatsOutput.at(args.out, args.parquet)

    def read_stores() -> None:
        if args.db:
            _store(spark, args, output)

    if not args.follow:
        if args.inputs:
            run_stats(spark, args.inputs, output)
        read_stores()
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
        after_pass=read_stores,
    )


def _store(spark, args: argparse.Namespace, output) -> None:
    from .charts import write_store_chart
    from .schemas import STORE_DAILY_SCHEMA
    from .stats_io import write_csv
    from .store_job import STORE_TABLE, run_store
    from .store_source import parse_store_database

    databases = [parse_store_database(text) for text in args.db]
    rows = run_store(spark, databases, output.parquet, args.db_partitions)
    output.out_dir.mkdir(parents=True, exist_ok=True)
    path = output.out_dir / f"{STORE_TABLE}.csv"
    write_csv(rows, STORE_DAILY_SCHEMA.fieldNames(), path)
    chart = write_store_chart(output.out_dir / "charts", rows)
    log.info("stats: wrote %s (%d row(s)) and %s", path, len(rows), chart)


def _compact(spark, args: argparse.Namespace) -> None:
    from .compact_job import run_compact

    run_compact(spark, args.inputs, args.out, shards=args.shards, partitions=args.partitions)


if __name__ == "__main__":
    sys.exit(main())
