"""`smp-pipeline` end to end: the console entry builds its own session, runs, stops it."""

from __future__ import annotations

import pytest
import trio

from pipeline.cli import main
from pipeline.synth import write_synthetic_log
from router.server.statslog import RouterCounters, StatsLog
from store.storelog import compact_records

pytestmark = pytest.mark.spark

SPARK = ["--master", "local[2]", "--conf", "spark.ui.enabled=false", "--conf",
         "spark.sql.shuffle.partitions=2"]  # fmt: skip


def test_compact_from_the_command_line_writes_the_routers_snapshot(tmp_path):
    log = tmp_path / "queues.log"
    write_synthetic_log(log, 2000, seed=11)
    out = tmp_path / "compacted.log"
    assert main([*SPARK, "compact", str(log), "--out", str(out)]) == 0
    assert out.read_text().splitlines() == compact_records(log.read_text().splitlines())


async def test_stats_from_the_command_line_reports_a_running_stats_log(tmp_path, autojump_clock):
    start = 1714521600 - trio.current_time()  # 2024-05-01T00:00:00Z
    counters = RouterCounters()
    stats = StatsLog(
        tmp_path / "logs" / "eu-1" / "stats.csv",
        counters,
        wall_clock=lambda: start + trio.current_time(),
        file_io_in_thread=False,
    )
    with trio.fail_after(3 * 86400):
        async with trio.open_nursery() as nursery:
            await nursery.start(stats.run)
            for hour in range(30):
                counters.msgs_sent += hour
                counters.msgs_acknowledged += hour // 2
                counters.record_active_queue(bytes([hour % 5]) * 24)
                await trio.sleep(3600)
            await stats.wait_lines_written(31)
            nursery.cancel_scope.cancel()
    out = tmp_path / "report"
    assert main([*SPARK, "stats", str(tmp_path / "logs"), "--out", str(out)]) == 0
    rows = (out / "total_daily.csv").read_text().splitlines()
    assert rows[0].startswith("day,routers,complete,")
    assert rows[1].split(",")[:3] == ["2024-05-01", "1", "true"]
    assert rows[2].split(",")[:3] == ["2024-05-02", "1", "false"]
    assert (out / "charts" / "messages_per_day.png").exists()
