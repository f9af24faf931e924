"""One small local Spark session for the whole test run (Spark start-up is the slow part).

`pipeline.cli.main` run in-process uses it too, and leaves it running."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from pipeline.session import build_session

    session = build_session(
        "smp-pipeline tests",
        "local[2]",
        {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
