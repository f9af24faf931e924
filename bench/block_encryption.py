"""block_encryption: what v11's block encryption costs the router, side by side in one run.

    python -m bench block-encryption [--quick] [--repeats N]

For each repetition, the same two measurements with the clients at v10 (plain
blocks) and at v19 (every block encrypted, docs/protocol.md#block-encryption):

1. CPU per delivered message: `throughput`'s closed loop (C/2 senders, C/2
   recipients, full-block SENDs, ACKs), the router's CPU seconds over the window
   divided by the messages delivered;
2. an idle connection's memory: C connections opened to a router holding nothing
   else, the router's RSS (after a full gc and `malloc_trim`) and its live traced
   bytes, per connection. At v19 each connection also holds the router's X25519
   key of the connection and the two chain keys.

Both versions run in fresh router processes, one after the other, in every
repetition; the ratios are taken within a repetition, then the median.
"""

from __future__ import annotations

from typing import Any

from router.server.settings.config import SINGLE_TASK

from .harness import RouterProcess, WorkerGroup, log, md_table, median, split, write_results
from .throughput import WORKERS, RouterLoad

VERSIONS = (10, 19)
CLIENTS = 10
QUICK_CLIENTS = 4
DURATION = 5.0
IDLE_CONNECTIONS = 1000
QUICK_IDLE_CONNECTIONS = 100
CONNECT_STEP = 100


def cpu_per_message(version: int, clients: int, duration: float) -> dict[str, Any]:
    with RouterProcess(SINGLE_TASK) as router, WorkerGroup(router.address, WORKERS) as workers:
        load = RouterLoad(router, workers, max(1, clients // 2), max_version=version)
        load.setup()
        return load.measure(duration)


def idle_connection(version: int, connections: int, traced: bool) -> float:
    with RouterProcess(SINGLE_TASK, tracemalloc=traced) as router:
        key = "traced" if traced else "trimmed"
        before = router.call("stats", gc=True)
        before["trimmed"] = router.call("malloc_trim")["rss"]
        with WorkerGroup(router.address, WORKERS) as workers:
            opened = _open_idle(workers, connections, version)
            after = router.call("stats", gc=True)
            after["trimmed"] = router.call("malloc_trim")["rss"]
    return (after[key] - before[key]) / opened


def _open_idle(workers: WorkerGroup, connections: int, version: int) -> int:
    """Open `connections` idle connections in steps of CONNECT_STEP, opening again the
    few a busy machine fails to open in time; how many are open."""
    opened = attempts = 0
    while opened < connections:
        attempts += 1
        if attempts > 3 * connections // CONNECT_STEP + 3:
            raise RuntimeError(f"only {opened} of {connections} connections opened")
        step = min(CONNECT_STEP, connections - opened)
        replies = workers.call([{"op": "connect", "count": n, "max_version": version}
                                if n else None for n in split(step, WORKERS)])
        opened += step - sum(r["errors"] for r in replies if r)
    return opened


def run(quick: bool = False, repeats: int = 3, duration: float | None = None) -> dict[str, Any]:
    duration = duration or (2.0 if quick else DURATION)
    clients = QUICK_CLIENTS if quick else CLIENTS
    idle = QUICK_IDLE_CONNECTIONS if quick else IDLE_CONNECTIONS
    runs = []
    for rep in range(repeats):
        point: dict[str, Any] = {"repeat": rep}
        for v in VERSIONS:
            log(f"block-encryption: v{v}, {clients} clients, run {rep + 1}/{repeats}")
            load = cpu_per_message(v, clients, duration)
            log(f"block-encryption: v{v}, {idle} idle connections")
            point[f"v{v}"] = {
                "msgs_per_s": load["msgs_per_s"],
                "router_cpu_us_per_msg": load["router_cpu_us_per_msg"],
                "idle_connection_rss": idle_connection(v, idle, traced=False),
                "idle_connection_traced": idle_connection(v, idle, traced=True),
            }
        point["cpu_ratio"] = (point["v19"]["router_cpu_us_per_msg"]
                              / point["v10"]["router_cpu_us_per_msg"])
        runs.append(point)
    summary = {
        v: {k: median([r[v][k] for r in runs]) for k in runs[0][v]} for v in ("v10", "v19")
    }
    summary["cpu_ratio"] = median([r["cpu_ratio"] for r in runs])
    parameters = {"clients": clients, "duration": duration, "repeats": repeats,
                  "idle_connections": idle, "mode": SINGLE_TASK}
    write_results("block-encryption", {"parameters": parameters, "summary": summary,
                                       "runs": runs}, table(summary, parameters))
    return summary


def table(summary: dict[str, Any], parameters: dict[str, Any]) -> str:
    rows = [
        [name, summary["v10"][key], summary["v19"][key],
         summary["v19"][key] / summary["v10"][key] if summary["v10"][key] else None]
        for name, key in (
            ("router CPU µs per delivered message", "router_cpu_us_per_msg"),
            ("delivered messages per second", "msgs_per_s"),
            ("idle connection, B RSS (trimmed)", "idle_connection_rss"),
            ("idle connection, B live (traced)", "idle_connection_traced"),
        )
    ]
    head = (f"Clients at v10 (plain blocks) and v19 (block encryption), {parameters['clients']} "
            f"clients, {parameters['duration']:g} s windows, {parameters['idle_connections']} "
            f"idle connections, medians of {parameters['repeats']}; CPU ratio within each "
            f"repetition: {summary['cpu_ratio']:.2f}.\n\n")
    return head + md_table(["figure", "v10", "v19", "v19 / v10"], rows)
