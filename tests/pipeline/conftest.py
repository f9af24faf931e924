"""One small local Spark session for the whole test run (Spark start-up is the slow part).

`pipeline.cli.main` run in-process uses it too, and leaves it running. It has the
PostgreSQL JDBC driver (Debian's libpostgresql-jdbc-java, installed by
scripts/install-test-deps.sh) on its class path for `stats --db`."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from pipeline.session import build_session
    from pipeline.store_source import DEFAULT_DRIVER_JAR, check_driver_jar

    check_driver_jar(DEFAULT_DRIVER_JAR)  # missing: every test says how to install it

    session = build_session(
        "smp-pipeline tests",
        "local[2]",
        {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.jars": DEFAULT_DRIVER_JAR,
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
