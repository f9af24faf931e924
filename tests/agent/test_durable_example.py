"""examples/durable_sqlite.py runs against a router started here, crashes
between commit and ACK, and applies every deposit exactly once on the next run."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import trio
from agent_helpers import restartable_router

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "durable_sqlite.py"


async def run_example(*args: str) -> subprocess.CompletedProcess:
    return await trio.run_process(
        [sys.executable, str(EXAMPLE), *args],
        capture_stdout=True, capture_stderr=True, check=False,
    )


async def test_the_sqlite_example_applies_each_deposit_once_across_a_crash_before_the_ack(
    tmp_path,
):
    db = str(tmp_path / "bank.db")
    with trio.fail_after(60):
        async with restartable_router(tmp_path / "router") as router:
            crashed = await run_example(router.address, "--db", db, "--send", "12",
                                        "--crash-after", "5")
            out = crashed.stdout.decode()
            assert crashed.returncode == 3, crashed.stderr.decode()
            assert out.count("applied deposit") == 5 and "crashing before the ACK" in out

            finished = await run_example(router.address, "--db", db)
            out = finished.stdout.decode()
            assert finished.returncode == 0, finished.stderr.decode()
            # The 5th came back, was found in the database, and was only acknowledged.
            assert "applied deposit 5\n" not in out
            assert out.count("applied deposit") == 7
            assert "redelivered and only acknowledged: 1" in out
            assert "deposits sent 12, applied 12, balance 78" in out

            with sqlite3.connect(db) as conn:
                [rid] = conn.execute("SELECT recipient_id FROM queue").fetchone()
                assert conn.execute("SELECT count(*) FROM processed").fetchone()[0] == 12
                assert conn.execute("SELECT balance FROM account").fetchone()[0] == 78
            # Every deposit, the last one included, was acknowledged.
            assert await router.info.router.messages.queue_size(rid) == 0
