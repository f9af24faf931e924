"""`smp-pipeline` end to end: the console entry builds its own session, runs, stops it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from statslog_driver import CountingRouter, jump_to

import pipeline
from pipeline.cli import main
from pipeline.synth import write_synthetic_log
from router.server.ops.statslog import StatsLog
from store.journal.storelog import compact_records

pytestmark = pytest.mark.spark

# The last two as the tests' session has them (conftest.py INTERPRETED): a session this
# test's process starts compiles no Java for its tiny tables either.
SPARK = ["--master", "local[2]", "--conf", "spark.ui.enabled=false", "--conf",
         "spark.sql.shuffle.partitions=2", "--conf", "spark.sql.codegen.wholeStage=false",
         "--conf", "spark.sql.codegen.factoryMode=NO_CODEGEN"]  # fmt: skip


def test_compact_from_the_command_line_writes_the_routers_snapshot(spark, tmp_path):
    # `spark`: main finds the tests' session running and uses it (no start-up of its own)
    log = tmp_path / "queues.log"
    write_synthetic_log(log, 2000, seed=11)
    out = tmp_path / "compacted.log"
    assert main([*SPARK, "compact", str(log), "--out", str(out)]) == 0
    assert out.read_text().splitlines() == compact_records(log.read_text().splitlines())
    assert not spark.sparkContext._jsc.sc().isStopped()  # left running for the next test


async def test_stats_from_the_command_line_reports_a_running_stats_log(
    spark, tmp_path, mock_clock
):
    start = 1714521600 - trio.current_time()  # 2024-05-01T00:00:00Z
    wall = lambda: start + trio.current_time()  # noqa: E731 - the mock clock in UTC
    router = CountingRouter()
    stats = StatsLog(tmp_path / "logs" / "eu-1" / "stats.csv", router.statistics, wall_clock=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(stats.run)
        for hour in range(30):
            router.counters.messages_sent += hour
            router.counters.messages_acked += hour // 2
            stats.record_active_queue(bytes([hour % 5]) * 24)
            await jump_to(mock_clock, wall, 1714521600 + 3600 * (hour + 1))
        await stats.wait_lines_written(31)
        nursery.cancel_scope.cancel()
    out = tmp_path / "report"
    assert main([*SPARK, "stats", str(tmp_path / "logs"), "--out", str(out)]) == 0
    rows = (out / "total_daily.csv").read_text().splitlines()
    assert rows[0].startswith("day,routers,complete,")
    assert rows[1].split(",")[:3] == ["2024-05-01", "1", "true"]
    assert rows[2].split(",")[:3] == ["2024-05-02", "1", "false"]
    assert (out / "charts" / "messages_per_day.png").exists()


def _command(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`smp-pipeline ARGS` in a process of its own: what an operator's terminal shows."""
    root = str(Path(pipeline.__file__).resolve().parent.parent)
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": root},
        timeout=600,
    )


def test_synthetic_stats_logs_through_stats_with_no_spark_noise(tmp_path):
    made = _command(
        ["synth", "--stats", "--days", "2", "--routers", "2", "--out", "logs"], tmp_path
    )
    assert made.returncode == 0, made.stderr
    ran = _command([*SPARK, "--log-level", "WARNING", "stats", "logs", "--out", "report"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    for noise in ("Traceback", " WARN ", "log4j", "Setting default log level", "Exception"):
        assert noise not in ran.stderr
    rows = (tmp_path / "report" / "total_daily.csv").read_text().splitlines()
    assert [r.split(",")[:3] for r in rows[1:]] == [
        ["2024-05-01", "2", "true"],
        ["2024-05-02", "2", "true"],
    ]
    assert len(list((tmp_path / "report" / "charts").glob("*.png"))) == 6


def test_a_spark_that_cannot_start_ends_in_one_line(tmp_path):
    (tmp_path / "eu-1.csv").write_text("time,period\n")
    result = _command(
        ["--master", "local[1]", "--conf", "spark.driver.memory=lots", "stats", "eu-1.csv",
         "--out", "report"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "smp-pipeline: error: Spark: [JAVA_GATEWAY_EXITED] "
        "Java gateway process exited before sending its port number."
    )


def test_stats_over_a_fresh_routers_header_only_log_warns_on_stderr(spark, tmp_path, capsys):
    from router.server.ops.stats_lines import HEADER

    log = tmp_path / "logs" / "eu-1" / "stats.csv"
    log.parent.mkdir(parents=True)
    log.write_text(HEADER + "\n")  # what a router that started less than an hour ago has
    out = tmp_path / "report"
    assert main([*SPARK, "stats", str(tmp_path / "logs"), "--out", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("smp-pipeline: warning: ")
    assert "no statistics lines yet" in warnings[0] and "tables and charts are empty" in warnings[0]
    assert (out / "total_daily.csv").read_text().splitlines()[1:] == []
