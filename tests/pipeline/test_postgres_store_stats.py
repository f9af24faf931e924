"""`smp-pipeline stats --db` against a real router on a private PostgreSQL: the router
(`smp-router serve --store postgres`) gets known traffic from a plain client and from
a service by certificate, then the pipeline reads its stats log and, through Spark's
JDBC source, its store; every figure is checked against what was done."""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from postgres_server import schema_for, shared_server
from pyspark.sql import functions as F

from bench.service_client import chain_of_two
from pipeline.cli import main
from pipeline.schemas import STORE_FIGURE_NAMES
from pipeline.store_transforms import store_figures
from router.client import ServiceCertificate, SMPError, open_client
from router.protocol import crypto

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:\d+")
QUOTA = 3


def start_router(data_dir: Path, url: str, schema: str) -> tuple[subprocess.Popen, str]:
    command = [
        sys.executable, "-m", "router.server", "serve", "--workers", "1", "--host", "127.0.0.1",
        "--port", "0",
        "--store", "postgres", "--data-dir", str(data_dir), "--db-connection", url,
        "--db-schema", schema, "--quota", str(QUOTA), "--stats-interval", "1",
        "--log-level", "error",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's router, not another
    router = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    line = router.stdout.readline()
    match = ADDRESS.search(line)
    if match is None:
        router.kill()
        raise AssertionError(f"the router did not start: {line!r}")
    return router, match.group(0)


async def traffic(address: str, service: ServiceCertificate) -> None:
    """7 queues made (2 by the service), 2 secured, 1 suspended, 1 deleted, 1 with a
    notifier; 7 messages accepted and 1 refused for quota; 3 delivered and acknowledged."""
    async with open_client(address) as client:
        acked, full, one, off, gone = [await client.create_queue() for _ in range(5)]
        for n in range(QUOTA):
            await client.send(acked.sender_id, b"acked %d" % n)
        for n in range(QUOTA):
            await client.send(full.sender_id, b"kept %d" % n)
        with pytest.raises(SMPError, match="QUOTA"):
            await client.send(full.sender_id, b"refused")
        await client.send(one.sender_id, b"kept")
        for _ in range(QUOTA):
            message = await client.get(acked)
            await client.ack(acked, message.msg_id)
        for queue in (off, gone):
            await client.secure_queue(queue, crypto.new_ed25519()[1])
        await client.enable_notifications(one)
        await client.suspend(off)
        await client.delete(gone)
    async with open_client(address, service_cert=service) as serving:
        assert serving.service_id is not None
        for _ in range(2):  # NEW in a service session: associated with the service
            await serving.create_queue()


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def whole_lines(log: Path, copy: Path) -> None:
    """A copy of a log the router is appending to, up to its last complete line."""
    text = log.read_bytes()
    copy.parent.mkdir(parents=True)
    copy.write_bytes(text[: text.rfind(b"\n") + 1])


def test_stats_of_a_router_on_postgres_from_its_stats_log_and_its_database(spark, tmp_path):
    server = shared_server()
    data_dir = tmp_path / "router"
    schema = schema_for(data_dir)
    router, address = start_router(data_dir, server.url, schema)
    cert_file, key_file = chain_of_two().files()
    out = tmp_path / "report"
    try:
        trio.run(traffic, address, ServiceCertificate(cert_file, key_file))
        time.sleep(2.5)  # the stats log's 1-second lines cover the traffic
        # read while the router runs, as an operator's daily job does
        log = tmp_path / "logs" / "router" / "stats.csv"
        whole_lines(data_dir / "stats.csv", log)
        code = main([
            "stats", str(log), "--out", str(out),
            "--db", f"router={server.url}?schema={schema}", "--db-partitions", "3",
        ])  # fmt: skip
        assert code == 0
        assert router.poll() is None  # it served all along
    finally:
        router.terminate()
        assert router.wait(timeout=60) == 0
        shutil.rmtree(cert_file.parent, ignore_errors=True)

    assert (out / "charts" / "store.png").stat().st_size > 0
    [store] = read_csv(out / "store_daily.csv")
    assert store.pop("router") == "router"  # named as its stats log is, below
    assert store.pop("day") == store.pop("read_at")[:10]
    assert {k: int(v) for k, v in store.items()} == {
        "queues_stored": 6,
        "queues_secured": 1,  # of the two secured, one was deleted
        "queues_with_notifier": 1,
        "queues_with_link": 0,
        "queues_contact": 0,
        "queues_off": 1,
        "queues_deleted_kept": 1,  # until db_deleted_ttl has passed
        "msgs_stored": QUOTA + 1,  # the QUOTA marker is not a message
        "queues_with_msgs": 2,
        "queues_at_quota": 1,
        "services_messaging": 1,
        "services_notifier": 0,
        "services_proxy": 0,
        "service_queues_recipient": 2,
        "service_queues_notifier": 0,
    }

    [day] = read_csv(out / "router_daily.csv")  # the same router's stats log, by day
    assert day["router"] == "router"  # a stats.csv takes its directory's name
    assert {k: int(day[k]) for k in (
        "queues_created", "queues_secured", "queues_deleted", "msgs_sent", "msgs_delivered",
        "msgs_acknowledged", "msgs_quota_refused",
    )} == {  # fmt: skip
        "queues_created": 7,
        "queues_secured": 2,
        "queues_deleted": 1,
        "msgs_sent": 2 * QUOTA + 1,
        "msgs_delivered": QUOTA,
        "msgs_acknowledged": QUOTA,
        "msgs_quota_refused": 1,
    }


def test_store_figures_of_empty_tables_are_zeros_and_quota_markers_are_not_messages(spark):
    flags = spark.createDataFrame(
        [(True, True, False, True, True, False), (False, True, True, True, False, True)],
        "live boolean, secured boolean, with_notifier boolean, with_link boolean,"
        " contact boolean, off boolean",
    )
    counters = spark.createDataFrame(
        [(4, True), (0, False), (1, True)], "msg_queue_size int, msg_quota_reached boolean"
    )
    services = spark.createDataFrame([], "role string, rcv_queues long, ntf_queues long")
    [row] = store_figures(
        "r", F.lit("2024-05-01 10:00:00").cast("timestamp"), flags, counters, services
    ).collect()
    figures = row.asDict()
    assert (figures["router"], str(figures["day"])) == ("r", "2024-05-01")
    assert [figures[k] for k in STORE_FIGURE_NAMES] == [
        1, 1, 0, 1, 1, 0, 1,  # the deleted row counts only as kept
        3, 2, 2,  # 5 rows less 2 QUOTA markers; a queue holding only its marker holds one
        0, 0, 0, 0, 0,  # no services: zeros, not empty
    ]  # fmt: skip


def test_a_schema_without_a_router_store_is_one_line_and_exit_2(spark, tmp_path, capsys):
    url = shared_server().url
    code = main(["stats", "--out", str(tmp_path / "o"), "--db", f"{url}?schema=no_router_here"])
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and not any("Traceback" in line for line in lines)
    assert lines[-1] == (
        f"smp-pipeline: error: --db {url}?schema=no_router_here: schema no_router_here holds "
        "no router store (no msg_queues); give the router's db_schema as ?schema=NAME"
    )
