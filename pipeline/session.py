"""The one place a SparkSession is built.

`--master` passes straight through (default `local[*]`); under `spark-submit`
the master and deploy settings come from spark-submit unless `--master` is
given. Every session runs in UTC so that days, weeks and months are UTC ones,
whatever the time zone of the driver or the executors.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"


def build_session(
    app_name: str,
    master: str | None = DEFAULT_MASTER,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A session with the settings every job relies on; `master=None` keeps spark-submit's."""
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
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
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
