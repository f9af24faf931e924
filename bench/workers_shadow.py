"""workers_shadow: the Python memory a client's hand-offs cost, per connection (traced).

    python -m bench workers_shadow [--clients 400] [--out DIR]

Two workers in this process (`router/server/workers/in_process.py`: a port each,
so every client lands on worker 0, its front), the bench queues in their owners'
stores, and the clients in two `bench.loadgen` processes. Live Python bytes
(tracemalloc, after a full gc) of each worker are read:

1. after `--clients` idle connections to worker 0;
2. after each subscribed one queue of worker 0 (no hand-off: one subscription);
3. after each subscribed one queue of worker 1 (the first block for worker 1: a
   shadow connection there, the front's bookkeeping here, and one subscription);
4. after each subscribed `MORE` more queues of worker 1, one at a time (through
   the shadow: each should cost what a subscription costs in one process).

So (3) - (2) less one subscription is what a client whose queues spread over two
workers costs beyond one worker's (the front's bookkeeping and the shadow), and the
largest allocation sites are listed; and the trio tasks it adds (none while idle: a
shadow is served on demand, docs/workers.md#hand-offs-in-blocks).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import trio

from router.server import RouterConfig
from router.server.core.tasks import run_task_count
from router.server.workers.in_process import workers_in_process

from . import harness, identities
from .harness import WorkerGroup
from .workers_router import owner

CLIENTS = 400
QUICK_CLIENTS = 20
LOAD_PROCESSES = 2
SITES = 12
MORE = 10  # more subscriptions per client through its shadow, after the first
_ROOT = Path(__file__).resolve().parent.parent


def _queues_of(worker: int, count: int, start: int = 0) -> list[int]:
    found, i = [], start
    while len(found) < count:
        if owner(i, 2) == worker:
            found.append(i)
        i += 1
    return found


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def _sites(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, key: str,
           per: int) -> list[list[Any]]:
    """The largest growths from `before` to `after` by `key` ("lineno", "filename"),
    per connection."""
    stats = after.compare_to(before, key)
    return [[str(s.traceback[0]).removeprefix(str(_ROOT) + "/"), round(s.size_diff / per),
             round(s.count_diff / per, 2)] for s in stats[:SITES]]


async def _measure(clients: int) -> dict[str, Any]:
    # Every client comes from 127.0.0.1: the per-address cap is lifted to hold them all.
    config = RouterConfig(host="127.0.0.1", port=0, store="memory",
                          max_connections=clients + 64,
                          max_connections_per_address=clients + 64)
    mine, theirs = _queues_of(0, clients), _queues_of(1, clients * (1 + MORE))
    async with workers_in_process(config) as (front, other):
        for info, indices in ((front, mine), (other, theirs)):
            for i in indices:
                assert await info.router.queues.add_queue(
                    identities.queue_record(i, secured=True)) is None
        key_hash = front.address.removeprefix("smp://").split("@")[0]
        url = front.url.replace("ws://", f"ws://{key_hash}@", 1)

        def load() -> dict[str, Any]:
            with WorkerGroup(url, LOAD_PROCESSES) as group:
                per_worker = harness.connect(group, clients)
                figures: dict[str, Any] = {}
                figures["connected"] = trio.from_thread.run(_read)
                _subscribe_each(group, per_worker, mine)
                figures["own_subscribed"] = trio.from_thread.run(_read)
                _subscribe_each(group, per_worker, theirs[:clients])
                figures["other_subscribed"] = trio.from_thread.run(_read)
                for more in range(1, 1 + MORE):
                    _subscribe_each(group, per_worker,
                                    theirs[clients * more : clients * (more + 1)])
                figures["more_subscribed"] = trio.from_thread.run(_read)
                return figures

        async def _read() -> tuple[int, tracemalloc.Snapshot, int]:
            await trio.sleep(0.5)
            return _traced(), tracemalloc.take_snapshot(), run_task_count()

        figures = await trio.to_thread.run_sync(load)
    return figures


def _subscribe_each(group: WorkerGroup, per_worker: list[int], queues: list[int]) -> None:
    """Client k (of all the load processes' clients, in order) subscribes queues[k]."""
    requests, pos = [], 0
    for n in per_worker:
        requests.append({"op": "subscribe", "ranges": [[q, 1] for q in queues[pos:pos + n]]}
                        if n else None)
        pos += n
    errors = sum(r["errors"] for r in group.call(requests) if r)
    if errors:
        raise harness.BenchError(f"{errors} subscriptions failed")


def run(clients: int, out: Path | None = None) -> dict[str, Any]:
    tracemalloc.start(1)
    try:
        figures = trio.run(_measure, clients)
    finally:
        tracemalloc.stop()
    (connected, _, _), (own, own_snap, own_tasks), (other, other_snap, other_tasks), \
        (more, _, _) = (figures["connected"], figures["own_subscribed"],
                        figures["other_subscribed"], figures["more_subscribed"])
    tasks = (other_tasks - own_tasks) / clients
    subscription = (own - connected) / clients
    spread = (other - own) / clients
    through_shadow = (more - other) / (clients * MORE)
    result = {
        "clients": clients, "traced_connected": connected,
        "bytes_per_own_subscription": subscription,
        "bytes_per_other_workers_subscription": spread,
        "handoff_bytes_per_connection": spread - subscription,
        "bytes_per_subscription_through_shadow": through_shadow,
        "tasks_per_connection_with_a_shadow": tasks,
        "sites": _sites(own_snap, other_snap, "lineno", clients),
        "files": _sites(own_snap, other_snap, "filename", clients),
    }
    text = harness.md_table(
        ["clients (on worker 0)", "B: one subscription, own worker's queue",
         "B: one subscription of the other worker's queue (first)",
         "B of hand-off bookkeeping per connection (front + shadow)",
         f"B: each of {MORE} more subscriptions through the shadow",
         "tasks per connection with a shadow (idle)"],
        [[clients, f"{subscription:,.0f}", f"{spread:,.0f}",
          f"{spread - subscription:,.0f}", f"{through_shadow:,.0f}", f"{tasks:.2f}"]])
    text += "\n\n" + harness.md_table(["allocation site (the other worker's first SUB)",
                                       "B per connection", "blocks per connection"],
                                      result["sites"])
    text += "\n\n" + harness.md_table(["file", "B per connection", "blocks per connection"],
                                      result["files"])
    harness.write_results("workers_shadow", result, text, out)
    print(text)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench workers_shadow", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int)
    parser.add_argument("--quick", action="store_true", help="a few clients, scratch output")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results; "
                        "with --quick a new scratch directory)")
    args = parser.parse_args(argv)
    out = args.out
    if out is None and args.quick:
        out = Path(tempfile.mkdtemp(prefix="smp-bench-workers-shadow-"))
    try:
        run(args.clients or (QUICK_CLIENTS if args.quick else CLIENTS), out)
    except harness.BenchError as exc:
        print(f"python -m bench workers_shadow: error: {exc}", file=sys.stderr)
        return 1
    print(f"results: {out or harness.RESULTS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
