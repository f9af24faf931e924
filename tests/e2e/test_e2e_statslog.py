"""The router writes its stats log (docs/stats-log.md): header, counts fed from the
router's statistics, gauges, active queues; the counts of a stopped router are
kept for its next start."""

from __future__ import annotations

import csv
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from worker_count import serve_router_under_test

from router.client import SMPClient, open_client
from router.protocol import crypto
from router.server import RouterConfig, RouterInfo
from router.server.ops.stats_lines import COUNTER_FIELDS, HEADER

EXPECTED = {
    "queues_created": 2,
    "queues_secured": 1,
    "queues_deleted": 1,
    "msgs_sent": 3,
    "msgs_delivered": 2,
    "msgs_acknowledged": 2,
    "msgs_expired": 1,
    "msgs_quota_refused": 0,
}


@asynccontextmanager
async def running_router(stats_log: Path) -> AsyncIterator[RouterInfo]:
    config = RouterConfig(port=0, stats_log=stats_log, stats_interval=1)
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_router_under_test, config)
        nursery.cancel_scope.cancel()


async def do_things(info: RouterInfo, client: SMPClient) -> None:
    """Everything counted in EXPECTED, on two queues."""
    q1 = await client.create_queue()
    await client.send(q1.sender_id, b"a")
    await client.send(q1.sender_id, b"b")
    await client.subscribe(q1)
    await client.ack(q1, (await client.next_event()).msg_id)
    await client.ack(q1, (await client.next_event()).msg_id)
    q2 = await client.create_queue(snd_secure=False)
    seed, key = crypto.new_ed25519()
    await client.secure_queue(q2, key)
    await client.send(q2.sender_id, b"c", sender_seed=seed)
    expirer = info.router.expirer
    expirer.wall_clock = lambda: time.time() + expirer.ttl + 2
    assert await expirer.expire_all() == 1
    await client.delete(q2)


def read_rows(path: Path) -> tuple[str, list[dict[str, str]]]:
    text = path.read_text()
    return text.splitlines()[0], list(csv.DictReader(text.splitlines()))


def summed(rows: list[dict[str, str]]) -> dict[str, int]:
    return {name: sum(int(r[name]) for r in rows) for name in COUNTER_FIELDS}


async def test_a_router_writes_the_header_and_lines_with_its_counts(tmp_path):
    path = tmp_path / "stats.csv"
    with trio.fail_after(20):
        async with running_router(path) as info, open_client(info.address) as client:
            stats = info.router.stats_log
            assert stats is not None
            await stats.wait_lines_written(1)  # just after a boundary: a second to act
            await do_things(info, client)
            await stats.wait_lines_written(stats.statistics().lines_written + 1)
            header, rows = read_rows(path)
    assert header == HEADER
    assert all(r["period"] == "PT1S" for r in rows)
    assert summed(rows) == EXPECTED
    # Normally every count falls into one line; the boundary may split them in two.
    busy = [r for r in rows if int(r["msgs_sent"]) or int(r["queues_created"])]
    assert 1 <= len(busy) <= 2
    last = rows[-1]
    assert (last["clients"], last["subscriptions"]) == ("1", "1")
    assert last["active_queues_day"] == "2"


async def test_counts_of_a_stopped_router_reach_the_log_after_its_next_start(tmp_path):
    path = tmp_path / "stats.csv"
    with trio.fail_after(20):
        async with running_router(path) as info, open_client(info.address) as client:
            await do_things(info, client)
        # stopped right away: the counts wait in the state file
        async with running_router(path) as info:
            stats = info.router.stats_log
            assert stats is not None
            await stats.wait_lines_written(1)
    header, rows = read_rows(path)
    assert header == HEADER
    assert summed(rows) == EXPECTED
