"""compare: the same scenarios against two source trees, interleaved, for one change.

    git archive HEAD~1 | tar -x -C /tmp/base
    rm -rf /tmp/base/bench && cp -r bench /tmp/base/
    python -m bench compare --base /tmp/base --repeats 4

runs the router from `--base` and from this checkout in turn (the load clients
always come from this checkout; the router's end of the bench, `bench/router_process.py`
and what it imports, from the tree it runs in: copy this checkout's `bench/` into an
older base, or its router may not speak to today's load) and prints the medians of:

- `sub_us`: router CPU time per SUB (one connection subscribing 10,000 queues);
- `drain_us`, `drain_rate`: router CPU per message and messages per second when
  those 10,000 queues get one message each and the connection drains them;
- `tput_us`, `tput_rate`, `blocks_in`, `blocks_out`, `p50_ms`: the throughput
  scenario (5 senders, 5 recipients): router CPU per delivered message, the
  rate, blocks the router received and sent per message, median latency.

CPU time per operation is the figure to trust on a shared machine: wall-clock
rates move with whatever else runs, CPU per message much less.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from router.server.settings.config import SINGLE_TASK

from .harness import RouterProcess, WorkerGroup, connect, log
from .throughput import RouterLoad

QUEUES = 10_000
PAIRS = 5
DURATION = 3.0


def drain(root: Path | None, mode: str) -> dict[str, float]:
    with RouterProcess(mode, root=root) as router, WorkerGroup(router.address, 1) as workers:
        router.call("preload", start=0, count=QUEUES)
        connect(workers, 1)
        cpu = router.cpu_seconds()
        workers.call_all({"op": "subscribe", "ranges": [[0, QUEUES]]})
        sub_us = (router.cpu_seconds() - cpu) / QUEUES * 1e6
        workers.call_all({"op": "drain_start", "expect": [QUEUES]})
        cpu = router.cpu_seconds()
        injected = router.call("inject", start=0, count=QUEUES)
        reply = workers.call_all({"op": "wait", "job": "drain"})[0]
        return {"sub_us": sub_us, "drain_us": (router.cpu_seconds() - cpu) / QUEUES * 1e6,
                "drain_rate": QUEUES / (reply["last_ack"] - injected["started"])}


def throughput(root: Path | None, mode: str) -> dict[str, float]:
    with RouterProcess(mode, root=root) as router, WorkerGroup(router.address, 2) as workers:
        load = RouterLoad(router, workers, PAIRS)
        load.setup()
        r = load.measure(DURATION)
        return {"tput_us": r["router_cpu_us_per_msg"], "tput_rate": r["msgs_per_s"],
                "blocks_in": r["blocks_in_per_msg"], "blocks_out": r["blocks_out_per_msg"],
                "p50_ms": r["latency_ms"]["p50"]}


SCENARIOS = {"drain": drain, "throughput": throughput}


def run(base: Path, repeats: int = 4, scenarios: tuple[str, ...] = ("drain", "throughput"),
        mode: str = SINGLE_TASK) -> dict[str, Any]:
    trees: dict[str, Path | None] = {"base": base, "this": None}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for rep in range(repeats):
        for name, root in trees.items():
            log(f"compare: {name} run {rep + 1}/{repeats}")
            figures: dict[str, float] = {}
            for scenario in scenarios:
                figures.update(SCENARIOS[scenario](root, mode))
            runs[name].append(figures)
            time.sleep(0.5)
    medians = {
        name: {k: statistics.median(r[k] for r in results) for k in results[0]}
        for name, results in runs.items()
    }
    log("compare: " + json.dumps(medians))
    return {"medians": medians, "runs": runs, "base": str(base), "mode": mode}
