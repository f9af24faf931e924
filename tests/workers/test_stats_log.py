"""One stats log for the router of several workers (docs/workers.md#one-router-to-the-operator):
the supervisor writes it at the configured path, in one process's columns, from the
workers' figures; a worker that does not answer never stops a line."""

from __future__ import annotations

import csv
import json
import os
import signal
from contextlib import AsyncExitStack
from dataclasses import asdict, replace

import trio
from operated import ADMIN, control, workers_of
from supervised import serving

from pipeline.schemas import STATS_NUMBERS
from router.client import open_client
from router.server.core.counters import RouterStatistics
from router.server.ops.active_queues import HyperLogLog, queue_hash
from router.server.ops.stats_lines import COLUMNS
from router.server.workers.stats import COLLECT_PERIOD, ZERO, WorkersStatistics


def lines_of(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def interval_sum(lines: list[dict[str, str]], column: str) -> int:
    return sum(int(line[column]) for line in lines if line["period"] != "P1D")


async def test_two_workers_write_one_stats_log_in_the_columns_of_one_process(tmp_path):
    data = tmp_path / "data"
    ini = tmp_path / "r.ini"
    ini.write_text(f"[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                   f"[STORE_LOG]\ndata_dir = {data}\nstats_interval = 1\n")
    stats = data / "stats.csv"
    async with serving(tmp_path / "router.log", "--config", str(ini), "--workers", "2",
                       "--store", "memory", "--control-port", "0") as (process, address):
        log = (tmp_path / "router.log").read_text()
        control_port = int(log.split("control port on 127.0.0.1:")[1].split()[0])
        async with AsyncExitStack() as stack:
            clients = []
            for _ in range(40):  # clients on both workers, each counting its own figures
                clients.append(await stack.enter_async_context(open_client(address)))
                (listed,) = await control(control_port, "clients")
                if set(workers_of(listed)) == {0, 1} and len(clients) >= 3:
                    break
            else:
                raise AssertionError(f"every connection landed on one worker: {listed}")
            queues = [await client.create_queue(snd_secure=False) for client in clients]
            for client, queue in zip(clients, queues, strict=True):
                await client.subscribe(queue)
            for queue in queues:
                await clients[0].send(queue.sender_id, b"counted once")
            with trio.fail_after(30):  # lines of one second: the counts reach the file
                while not stats.exists() or interval_sum(lines_of(stats), "msgs_sent") < len(
                        queues) or int(lines_of(stats)[-1]["subscriptions"]) < len(queues):
                    await trio.sleep(0.2)
            lines = lines_of(stats)
            assert interval_sum(lines, "queues_created") == len(queues)
            assert interval_sum(lines, "msgs_sent") == len(queues)
            assert lines[-1]["clients"] == str(len(clients))
            assert int(lines[-1]["active_queues_day"]) >= len(queues) - 1  # a sketch's count
            # Killed, a worker is started again; the log goes on, its figures counted anew.
            pid = int(log.split("pids ")[1].split()[1])
            os.kill(pid, signal.SIGKILL)
            written = len(lines)
            with trio.fail_after(30):
                while len(lines_of(stats)) < written + 3:
                    await trio.sleep(0.2)
            assert interval_sum(lines_of(stats), "queues_created") == len(queues)
    with open(stats) as f:
        header = f.readline().strip().split(",")
    assert tuple(header) == COLUMNS and tuple(header[2:]) == STATS_NUMBERS  # the pipeline's
    assert sorted(p.name for p in data.glob("stats*")) == ["stats.csv", "stats.csv.state"]
    assert "Traceback" not in (tmp_path / "router.log").read_text()


def answer(pid: int, sketch: HyperLogLog | None = None, **figures: int) -> bytes:
    return json.dumps({"pid": pid, "statistics": asdict(replace(ZERO, **figures)),
                       "active": None if sketch is None else sketch.to_text()}).encode()


async def test_a_worker_that_does_not_answer_or_starts_again_is_counted_once():
    answers: list[bytes | None] = []
    merged: list[HyperLogLog] = []

    async def ask_all(request: str) -> list[bytes | None]:
        assert request == "stats"
        return answers

    figures = WorkersStatistics(2, ask_all, merged.append)
    answers[:] = [answer(10, messages_sent=3, subscriptions=2),
                  answer(20, messages_sent=5, subscriptions=1)]
    await figures.collect()
    assert (figures.statistics().messages_sent, figures.statistics().subscriptions) == (8, 3)
    # Worker 1 does not answer: its gauges are gone, its counts wait for its answer.
    answers[:] = [answer(10, messages_sent=4, subscriptions=2), None]
    await figures.collect()
    assert figures.unanswered == [1]
    assert (figures.statistics().messages_sent, figures.statistics().subscriptions) == (9, 2)
    answers[:] = [answer(10, messages_sent=4), answer(20, messages_sent=7)]
    await figures.collect()
    assert figures.statistics().messages_sent == 11 and figures.unanswered == []
    # Worker 1 started again (another pid): its totals count from zero, never backwards.
    answers[:] = [answer(10, messages_sent=4), answer(21, messages_sent=2)]
    await figures.collect()
    assert figures.statistics().messages_sent == 13
    # A pid used again, but totals lower than before: started again too.
    answers[:] = [answer(10, messages_sent=1), answer(21, messages_sent=2)]
    await figures.collect()
    assert figures.statistics().messages_sent == 14
    # An unreadable answer is a worker that did not answer.
    answers[:] = [b"garbage", answer(21, messages_sent=2)]
    await figures.collect()
    assert figures.unanswered == [0] and figures.statistics().messages_sent == 14
    # The active queues' sketches reach the log's.
    sketch = HyperLogLog()
    sketch.add_hash(queue_hash(b"q" * 24))
    answers[:] = [answer(10, sketch, messages_sent=1), answer(21, messages_sent=2)]
    await figures.collect()
    assert [s.estimate() for s in merged] == [1]
    assert isinstance(figures.statistics(), RouterStatistics)


async def test_a_workers_counts_are_collected_between_lines_so_a_kill_loses_few(
        autojump_clock):
    counted = 0

    async def ask_all(request: str) -> list[bytes | None]:
        return [answer(10, messages_sent=counted)]

    figures = WorkersStatistics(1, ask_all, lambda sketch: None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(figures.run)
        counted = 5
        await trio.sleep(COLLECT_PERIOD + 0.01)
        assert figures.statistics().messages_sent == 5  # no line written meanwhile
        counted = 7  # then the worker is killed: these are what it may lose
        await trio.sleep(COLLECT_PERIOD / 2)
        assert figures.statistics().messages_sent == 5
        nursery.cancel_scope.cancel()
    assert COLLECT_PERIOD <= 10  # docs/workers.md: a killed worker loses 10 s at most
