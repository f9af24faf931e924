"""The one place a SparkSession is built.

`--master` passes straight through (default `local[*]`); under `spark-submit`
the master and deploy settings come from spark-submit unless `--master` is
given. Every session runs in UTC so that days, weeks and months are UTC ones,
whatever the time zone of the driver or the executors.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import tempfile

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"

# Spark's default log4j profile prints start-up notes and WARN lines (host name,
# native Hadoop libraries, stack traces of paths it probes) that say nothing to
# an operator. Errors still show, without their Java stack trace: the pipeline
# ends a failed run with one line of its own.
QUIET_LOG4J2 = """\
# the root at WARN, the level Spark's shell defaults to, so that it does not announce
# a level change; the console prints errors only
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
appender.console.layout.alwaysWriteExceptions = false
"""


def build_session(
    app_name: str,
    master: str | None = DEFAULT_MASTER,
    conf: dict[str, str] | None = None,
    *,
    quiet: bool = True,
) -> SparkSession:
    """A session with the settings every job relies on; `master=None` keeps spark-submit's.

    `quiet` gives the driver the log4j configuration above (it applies when this call
    starts the JVM, not under spark-submit, whose JVM is already running).
    """
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        # outputs are partitioned by period; an incremental run replaces only its periods
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
        "spark.ui.showConsoleProgress": "true",
    }
    settings.update(conf or {})
    if quiet and "log4j2.configurationFile" not in settings[DRIVER_OPTIONS]:
        settings[DRIVER_OPTIONS] += f" -Dlog4j2.configurationFile=file:{_quiet_log4j2_file()}"
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    log.info("spark %s, master %s", spark.version, spark.sparkContext.master)
    return spark


def parse_conf(pairs: list[str]) -> dict[str, str]:
    """`--conf key=value` pairs, as spark-submit takes them."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf takes key=value, got {pair!r}")
        conf[key] = value
    return conf


_quiet_file: str | None = None


def _quiet_log4j2_file() -> str:
    """The quiet configuration in a private temporary file (removed at exit)."""
    global _quiet_file
    if _quiet_file is None:
        fd, path = tempfile.mkstemp(prefix="smp-pipeline-log4j2-", suffix=".properties")
        with os.fdopen(fd, "w") as f:
            f.write(QUIET_LOG4J2)
        atexit.register(_remove, path)
        _quiet_file = path
    return _quiet_file


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
