"""workers_steps: Trio's work per delivered message across two workers, counted.

    python -m bench workers_steps [--base TREE] [--repeats 3] [--messages 300] [--calls]

Two workers in one process (`router/server/workers/in_process.py`), four sender /
recipient pairs placed so that every kind of crossing happens (a SEND to the queue's
owner, a MSG to the recipient's front, an ACK to the owner), 16,000-byte messages,
two in flight per pair. A Trio instrument counts, while the messages flow, the tasks
started and the steps of each task (a step is a pass of the scheduler for it: a
wake-up), by kind of task: the links' readers and writers, the shadows' serving, the
connections' own tasks, and everything else (the clients, in this process too).
Counts, unlike CPU on a shared machine, are the same from run to run within a few
per cent. `--calls` counts the Python and C function calls too (`sys.setprofile`: the
CPU figure then is the profiler's, not the router's). With `--base TREE` (e.g. a
`git archive` of main) each repeat runs both trees, one after the other, each in a
process of its own.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent.parent
BODY = b"x" * 16_000
IN_FLIGHT = 2
# (owner of the queue, sender's worker, recipient's worker)
PAIRS = [(0, 1, 1), (0, 0, 1), (1, 0, 0), (1, 1, 0)]
KINDS = {"Links.": "links", "_ShadowServers": "shadows", "ShadowTransport": "shadows",
         "EdgeListener": "connections", "router.server": "router, other"}


def _kind(task_name: str) -> str:
    for mark, kind in KINDS.items():
        if mark in task_name:
            return kind
    return "clients"


class _Counts(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps: collections.Counter[str] = collections.Counter()
        self.spawned = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[_kind(task.name)] += 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


async def _count(messages: int, calls: bool) -> dict[str, float]:
    from router.client import MessageEvent, open_client
    from router.server import RouterConfig
    from router.server.workers.in_process import workers_in_process

    config = RouterConfig(host="127.0.0.1", port=0, store="memory", end_batch_interval=0.02)
    async with workers_in_process(config) as workers, AsyncExitStack() as stack:
        pairs = []
        for owner, sender_at, recipient_at in PAIRS:
            maker = await stack.enter_async_context(open_client(workers[owner].address))
            queue = await maker.create_queue(snd_secure=False)
            sender = await stack.enter_async_context(open_client(workers[sender_at].address))
            recipient = await stack.enter_async_context(
                open_client(workers[recipient_at].address))
            await recipient.subscribe(queue)
            pairs.append((queue, sender, recipient))

        async def send(queue, sender, n: int, window: trio.Semaphore) -> None:  # type: ignore[no-untyped-def]
            for _ in range(n):
                await window.acquire()
                await sender.send(queue.sender_id, BODY)

        async def receive(queue, recipient, n: int, window: trio.Semaphore) -> None:  # type: ignore[no-untyped-def]
            for _ in range(n):
                event = await recipient.next_event()
                assert isinstance(event, MessageEvent)
                await recipient.ack(queue, event.msg_id)
                window.release()

        async def flow(n: int) -> None:
            async with trio.open_nursery() as nursery:
                for queue, sender, recipient in pairs:
                    window = trio.Semaphore(IN_FLIGHT)
                    nursery.start_soon(send, queue, sender, n, window)
                    nursery.start_soon(receive, queue, recipient, n, window)

        await flow(20)  # every shadow and link made
        counts = _Counts()
        called: collections.Counter[str] = collections.Counter()

        def profile(frame: object, event: str, arg: object) -> None:
            called[event] += 1

        trio.lowlevel.add_instrument(counts)
        cpu = time.process_time()
        if calls:
            sys.setprofile(profile)
        await flow(messages)
        sys.setprofile(None)
        cpu = time.process_time() - cpu
        trio.lowlevel.remove_instrument(counts)
    delivered = messages * len(PAIRS)
    out = {f"steps: {kind}": n / delivered for kind, n in counts.steps.items()}
    out["steps: router"] = sum(n for kind, n in counts.steps.items()
                               if kind != "clients") / delivered
    out["tasks started"] = counts.spawned / delivered
    if calls:
        out["calls: Python"] = called["call"] / delivered
        out["calls: C"] = called["c_call"] / delivered
    out["CPU us (clients included)"] = cpu / delivered * 1e6
    return out


def _run_tree(tree: Path, messages: int, calls: bool) -> dict[str, float]:
    done = subprocess.run(
        # This file's counting, the tree's router (a base may have no such bench).
        [sys.executable, __file__, "--child", "--messages", str(messages),
         *(["--calls"] if calls else [])],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
        text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"workers_steps in {tree} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench workers_steps",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, help="another checkout, run beside this one")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--messages", type=int, default=300, help="per pair")
    parser.add_argument("--calls", action="store_true", help="count function calls too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(trio.run(_count, args.messages, args.calls)))
        return 0
    trees = {"this": HERE} | ({"base": args.base.resolve()} if args.base else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(_run_tree(tree, args.messages, args.calls))
    keys = sorted({key for tree_runs in runs.values() for run in tree_runs for key in run})
    names = list(trees)
    print(f"| per delivered message (median of {args.repeats}) | {' | '.join(names)} |")
    print("|---|" + "---|" * len(names))
    for key in keys:
        cells = [f"{statistics.median(run.get(key, 0.0) for run in runs[name]):.2f}"
                 for name in names]
        print(f"| {key} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
