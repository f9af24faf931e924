"""transports: an idle connection's memory over WebSocket and over native TLS, in one run.

    python -m bench transports [--quick] [--repeats N]

For each repetition, C connections are opened (at the newest version, so with
block encryption) to a fresh router holding nothing else, once by WebSocket
(`ws://`) and once by native TLS (`smp://`, docs/protocol.md#native-tls); the
router's RSS (after a full gc and `malloc_trim`) and its live traced bytes are
read before and after, per connection. A TLS connection holds OpenSSL's state
of the session (its buffers, the keys) where a WebSocket holds its framing.
"""

from __future__ import annotations

from typing import Any

from router.server.settings.config import SINGLE_TASK

from .harness import RouterProcess, WorkerGroup, connect, log, md_table, median, write_results

TRANSPORTS = ("websocket", "tls")
WORKERS = 2
IDLE_CONNECTIONS = 1000
QUICK_IDLE_CONNECTIONS = 100
CONNECT_ROUND = 100


def idle_connection(transport: str, connections: int, traced: bool) -> dict[str, float]:
    with RouterProcess(SINGLE_TASK, tracemalloc=traced) as router:
        key = "traced" if traced else "trimmed"
        before = router.call("stats", gc=True)
        before["trimmed"] = router.call("malloc_trim")["rss"]
        address = router.address if transport == "websocket" else router.tls_address
        with WorkerGroup(address, WORKERS) as workers:
            # In rounds well below the router's cap on connections being opened from
            # one address (128): a round's last handshakes may still count as pending
            # when the next round begins.
            for start in range(0, connections, CONNECT_ROUND):
                connect(workers, min(CONNECT_ROUND, connections - start))
            after = router.call("stats", gc=True)
            after["trimmed"] = router.call("malloc_trim")["rss"]
    return {"bytes": (after[key] - before[key]) / connections,
            "tasks": (after["tasks"] - before["tasks"]) / connections}


def run(quick: bool = False, repeats: int = 1) -> dict[str, Any]:
    connections = QUICK_IDLE_CONNECTIONS if quick else IDLE_CONNECTIONS
    runs = []
    for rep in range(repeats):
        point: dict[str, Any] = {"repeat": rep}
        for transport in TRANSPORTS:
            log(f"transports: {transport}, {connections} idle connections, run {rep + 1}")
            rss = idle_connection(transport, connections, traced=False)
            traced = idle_connection(transport, connections, traced=True)
            point[transport] = {"idle_connection_rss": rss["bytes"],
                                "idle_connection_traced": traced["bytes"],
                                "tasks_per_connection": rss["tasks"]}
        point["rss_ratio"] = (point["tls"]["idle_connection_rss"]
                              / point["websocket"]["idle_connection_rss"])
        point["traced_ratio"] = (point["tls"]["idle_connection_traced"]
                                 / point["websocket"]["idle_connection_traced"])
        runs.append(point)
    summary: dict[str, Any] = {
        t: {k: median([r[t][k] for r in runs]) for k in runs[0][t]} for t in TRANSPORTS
    }
    summary["rss_ratio"] = median([r["rss_ratio"] for r in runs])
    summary["traced_ratio"] = median([r["traced_ratio"] for r in runs])
    parameters = {"idle_connections": connections, "repeats": repeats, "mode": SINGLE_TASK,
                  "workers": WORKERS}
    write_results("transports", {"parameters": parameters, "summary": summary, "runs": runs},
                  table(summary, parameters))
    return summary


def table(summary: dict[str, Any], parameters: dict[str, Any]) -> str:
    rows = [
        [name, summary["websocket"][key], summary["tls"][key],
         summary["tls"][key] / summary["websocket"][key] if summary["websocket"][key] else None]
        for name, key in (
            ("idle connection, B RSS (trimmed)", "idle_connection_rss"),
            ("idle connection, B live (traced)", "idle_connection_traced"),
            ("trio tasks per connection", "tasks_per_connection"),
        )
    ]
    head = ("### An idle connection's memory by transport\n\n"
            f"{parameters['idle_connections']} idle connections at the newest version, by "
            f"WebSocket and by native TLS, fresh router each, medians of "
            f"{parameters['repeats']}; ratios within each repetition: RSS "
            f"{summary['rss_ratio']:.2f}, live {summary['traced_ratio']:.2f}.\n\n")
    return head + md_table(["figure", "WebSocket", "TLS", "TLS / WebSocket"], rows)
