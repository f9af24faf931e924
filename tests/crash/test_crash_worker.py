"""A worker of `serve --workers 2` killed with SIGKILL mid-load (docs/workers.md):
its supervisor starts it again, and nothing answered OK is lost on the durable stores.

One run: the router starts with two workers; queues are made on connections of
each worker (a NEW without link data belongs to the worker that got it, so its
recipient id names the worker the connection landed on), then `cycles` times:
subscribers on both workers (each subscribed to queues of both owners) and
several senders run, one worker is killed with SIGKILL at a random moment, and
once the supervisor says it serves again every client of the cycle leaves
(those of the killed worker, or with a shadow in it, were already cut off).
Finally one connection drains every queue with GET/ACK and the router stops on
SIGTERM. The history checker (crash_history.py) holds the router to its
promises over the whole run: nothing answered OK lost, nothing acknowledged
delivered again, nothing refused or invented delivered, order kept.

CI runs CYCLES cycles per durable store; the `stress` variant STRESS_CYCLES with
more senders and queues (`pytest -m stress tests/crash/test_crash_worker.py`).
`SMP_CRASH_SEED` replays the random choices of a run.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
from crash_history import History, Outcome, check
from postgres_server import postgres_store_options
from supervised import supervised  # tests/workers: the router under its supervisor
from test_crash_restart import sender

from router.client import ConnectionClosed, MessageEvent, RecipientQueue, SMPClient, open_client
from router.server.core.ownership import Ownership

CYCLES = 2
STRESS_CYCLES = 12
WORKERS = 2
PIDS = re.compile(r"(\d+) workers serving, pids ([\d ]+)")
SERVING_AGAIN = re.compile(r"worker (\d+) is serving again \(pid (\d+)\)")
owner_of = Ownership(WORKERS, 0).owner_of


@dataclass
class WorkerCrashRun:
    """What the clients of crash_test_restart's `sender` and `recipient` share."""

    rng: random.Random
    senders: int
    queues: list[RecipientQueue] = field(default_factory=list)
    history: History = field(default_factory=History)
    seqs: dict[int, Iterator[int]] = field(default_factory=dict)

    def next_body(self, sender: int) -> bytes:
        seq = self.seqs.setdefault(sender, itertools.count())
        return b"sender %d message %d" % (sender, next(seq))


def store_args(kind: str, data_dir: Path) -> list[str]:
    # The load makes its queues from one address faster than a worker's share of the
    # NEW budgets allows (docs/workers.md#one-router-to-the-operator): not what is tested.
    args = ["--store", kind, "--quota", "100000", "--log-level", "info", "--no-stats-log",
            "--new-queues-per-second-per-address", "off", "--new-queues-per-second-total", "off"]
    if kind == "postgres":
        options = postgres_store_options(data_dir)
        args += ["--db-connection", str(options["db_connection"]),
                 "--db-schema", str(options["db_schema"])]
    return args


def worker_pids(log: str) -> dict[int, int]:
    """Each worker's pid now: the one of the ready line, or of its last restart."""
    found = PIDS.search(log)
    assert found is not None, log
    pids = dict(enumerate(int(pid) for pid in found[2].split()))
    for index, pid in SERVING_AGAIN.findall(log):
        pids[int(index)] = int(pid)
    return pids


async def create_queues(run: WorkerCrashRun, address: str, per_worker: int) -> None:
    """`per_worker` queues in each worker, made on connections of that worker."""
    made: dict[int, list[RecipientQueue]] = {index: [] for index in range(WORKERS)}
    async with AsyncExitStack() as held:  # each kept open: see `_landed_on`
        for _ in range(200):
            if all(len(queues) >= per_worker for queues in made.values()):
                break
            client = await held.enter_async_context(open_client(address))
            queue = await client.create_queue()
            landed = owner_of(queue.recipient_id)
            while len(made[landed]) < per_worker:
                made[landed].append(queue)
                queue = await client.create_queue()
        else:
            raise AssertionError(f"connections landed on one worker only: {made}")
    run.queues = [queue for queues in made.values() for queue in queues]


async def subscribers_on_every_worker(run: WorkerCrashRun, address: str, router_run: int,
                                      nursery: trio.Nursery) -> None:
    """One subscriber on each worker, each of some queues of every owner: a connection
    is kept once its probe queue (made and deleted) shows where it landed."""
    shares = [run.queues[i::WORKERS] for i in range(WORKERS)]
    for index, share in enumerate(shares):
        await nursery.start(_subscriber_on, run, address, router_run, index, share)


async def _subscriber_on(run: WorkerCrashRun, address: str, router_run: int, worker: int,
                         share: list[RecipientQueue], *,
                         task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    async with _landed_on(address, worker) as client:
        task_status.started()
        await _receive(run, client, share, router_run)


@asynccontextmanager
async def _landed_on(address: str, worker: int) -> AsyncIterator[SMPClient]:
    """A client whose connection landed on `worker`, shown by a probe queue (made and
    deleted). The others stay open until it is found: which idle worker accepts a
    connection is the kernel's choice, and the same one may take every connection
    opened and closed in turn, but no worker takes more than its share of the open
    ones by `SHARE_SLACK` (docs/workers.md "The listener")."""
    async with AsyncExitStack() as opened:
        others = []
        for _ in range(200):
            client = await opened.enter_async_context(open_client(address))
            probe = await client.create_queue()
            await client.delete(probe)
            if owner_of(probe.recipient_id) == worker:
                for other in others:
                    await other.aclose()
                yield client
                return
            others.append(client)
    raise AssertionError(f"no connection landed on worker {worker}")


async def _receive(run: WorkerCrashRun, client, share: list[RecipientQueue],
                   router_run: int) -> None:
    """Subscribed to `share`; records each MSG and acknowledges it, until cut off."""
    by_id = {q.recipient_id: q for q in share}
    try:
        errors = await client.subscribe_many(share)
        assert errors == [None] * len(share), errors  # every queue survived
        while True:
            event = await client.next_event()
            assert isinstance(event, MessageEvent), event
            run.history.delivered(event.recipient_id, event.msg_id, event.body, router_run)
            if run.rng.random() < 0.05:
                await trio.sleep(run.rng.uniform(0, 0.05))  # now and then, a backlog
            await client.ack(by_id[event.recipient_id], event.msg_id)
            run.history.acked(event.recipient_id, event.msg_id)
    except ConnectionClosed:
        return


async def kill_cycle(run: WorkerCrashRun, router, router_run: int) -> None:
    before = router.log()
    victim = run.rng.randrange(WORKERS)
    pid = worker_pids(before)[victim]
    restarts = len(SERVING_AGAIN.findall(before))
    async with trio.open_nursery() as nursery:
        await subscribers_on_every_worker(run, router.address, router_run, nursery)
        for number in range(run.senders):
            nursery.start_soon(sender, run, number, router.address, router_run)
        await trio.sleep(run.rng.uniform(0.1, 0.6))  # the random moment of the crash
        os.kill(pid, signal.SIGKILL)
        await router.until_logged(lambda log: len(SERVING_AGAIN.findall(log)) > restarts,
                                  f"worker {victim} started again")
        nursery.cancel_scope.cancel()  # the surviving clients of this cycle leave too


async def drain(run: WorkerCrashRun, address: str, router_run: int) -> None:
    async with open_client(address) as client:
        for queue in run.queues:
            while (event := await client.get(queue)) is not None:
                assert isinstance(event, MessageEvent), event
                run.history.delivered(queue.recipient_id, event.msg_id, event.body, router_run)
                await client.ack(queue, event.msg_id)
                run.history.acked(queue.recipient_id, event.msg_id)


async def kill_workers_and_check(kind: str, tmp_path: Path, *, cycles: int, senders: int,
                                 per_worker: int) -> None:
    seed = int(os.environ.get("SMP_CRASH_SEED", random.randrange(2**32)))
    run = WorkerCrashRun(random.Random(seed), senders)
    data_dir = tmp_path / "data"
    with trio.fail_after(90 + cycles * 30):
        async with supervised(data_dir, *store_args(kind, data_dir), workers=WORKERS) as router:
            await create_queues(run, router.address, per_worker)
            for router_run in range(1, cycles + 1):
                await kill_cycle(run, router, router_run)
            await drain(run, router.address, cycles + 1)
    h = run.history
    violations = check(h)
    summary = (f"seed {seed}: {cycles} workers killed, {h.count(Outcome.OK)} sends answered "
               f"OK, {h.count(Outcome.UNKNOWN)} unanswered, {len(h.deliveries)} deliveries")
    assert violations == [], f"{summary}; first violations: {violations[:10]}"
    assert h.count(Outcome.OK) >= cycles, summary  # the cycles did real work
    print(summary)


@pytest.mark.parametrize("kind", ["journal", "sqlite", "postgres"])
async def test_a_worker_killed_mid_load_loses_nothing_answered_ok(kind, tmp_path):
    await kill_workers_and_check(kind, tmp_path, cycles=CYCLES, senders=3, per_worker=3)


@pytest.mark.stress
@pytest.mark.parametrize("kind", ["journal", "sqlite", "postgres"])
async def test_workers_killed_many_times_lose_nothing(kind, tmp_path):
    await kill_workers_and_check(kind, tmp_path, cycles=STRESS_CYCLES, senders=6, per_worker=8)
