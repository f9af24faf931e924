"""memory: what an idle subscription and an idle connection cost the router.

For each size N and each delivery mode, in one run: a fresh router process
gets N queues loaded into its store; then C client connections are opened
(idle), then the N queues are subscribed over those connections (idle). The
router's RSS, live Python bytes (tracemalloc, in a second router process with
tracing on, because tracing itself costs memory) and trio task count are read
after each phase, after a full gc:

- bytes per idle connection = (after connect - loaded) / C
- bytes per idle subscription = (after subscribe - after connect) / N

The two modes run back to back at every size and repetition, so their ratio
is taken from one run; figures are medians over the repetitions.
"""

from __future__ import annotations

from typing import Any

from router.server.settings.config import DELIVERY_MODES, PER_QUEUE_TASK, SINGLE_TASK

from .harness import (
    RouterProcess,
    WorkerGroup,
    connect,
    log,
    md_table,
    median,
    subscribe,
    write_results,
)

MODES = DELIVERY_MODES
SIZES = (1_000, 10_000, 100_000, 200_000)
QUICK_SIZES = (1_000, 10_000)
WORKERS = 2


def connections_for(size: int, max_connections: int) -> int:
    return max(1, min(max_connections, size // 10))


def measure_once(mode: str, size: int, connections: int, traced: bool) -> dict[str, Any]:
    """One router, three phases; the figures of one (mode, size) point."""
    with RouterProcess(mode, tracemalloc=traced) as router:
        router.call("preload", start=0, count=size)
        loaded = _phase(router)
        with WorkerGroup(router.address, WORKERS) as workers:
            per_worker = connect(workers, connections)
            connected = _phase(router)
            seconds, _ = subscribe(workers, per_worker, 0, size)
            subscribed = _phase(router)
    key = "traced" if traced else "rss"
    # Each phase is measured from the previous one's trimmed RSS: free C heap left
    # behind by earlier phases is not charged to the next one.
    base = "trimmed" if key == "rss" else key
    return {
        "loaded": loaded[key],
        "connected": connected[key],
        "subscribed": subscribed[key],
        "per_connection": (connected[key] - loaded[base]) / connections,
        "per_subscription": (subscribed[key] - connected[base]) / size,
        "per_connection_trimmed": (connected["trimmed"] - loaded["trimmed"]) / connections,
        "per_subscription_trimmed": (subscribed["trimmed"] - connected["trimmed"]) / size,
        "tasks_connected": connected["tasks"],
        "tasks_subscribed": subscribed["tasks"],
        "subscribe_seconds": seconds,
        "subscriptions": subscribed["statistics"]["subscriptions"],
    }


def _phase(router: RouterProcess) -> dict[str, Any]:
    """Stats after a full gc, plus the RSS once glibc has returned its free heap."""
    stats = router.call("stats", gc=True)
    stats["trimmed"] = router.call("malloc_trim")["rss"]
    return stats


def run(
    sizes: tuple[int, ...] = SIZES,
    repeats: int = 3,
    max_connections: int = 1000,
    traced_runs: int = 1,
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for rep in range(repeats):
        for size in sizes:
            c = connections_for(size, max_connections)
            point: dict[str, Any] = {"size": size, "connections": c, "repeat": rep}
            for mode in MODES:
                log(f"memory: {mode} N={size} C={c} run {rep + 1}/{repeats}")
                point[mode] = measure_once(mode, size, c, traced=False)
                if rep < traced_runs:
                    point[mode]["traced"] = measure_once(mode, size, c, traced=True)
            point["ratio_per_subscription"] = (
                point[PER_QUEUE_TASK]["per_subscription"]
                / point[SINGLE_TASK]["per_subscription"]
            )
            runs.append(point)
    summary = summarize(runs, sizes)
    write_results("memory", {"parameters": {"sizes": sizes, "repeats": repeats,
                                            "max_connections": max_connections},
                             "summary": summary, "runs": runs}, table(summary))
    return summary


def summarize(runs: list[dict[str, Any]], sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        points = [p for p in runs if p["size"] == size]
        row: dict[str, Any] = {"size": size, "connections": points[0]["connections"]}
        for mode in MODES:
            plain = [p[mode] for p in points]
            traced = [p[mode]["traced"] for p in points if "traced" in p[mode]]
            row[mode] = {
                "rss_subscribed": median(x["subscribed"] for x in plain),
                "rss_per_subscription": median(x["per_subscription"] for x in plain),
                "rss_per_connection": median(x["per_connection"] for x in plain),
                "trimmed_per_subscription": median(x["per_subscription_trimmed"] for x in plain),
                "trimmed_per_connection": median(x["per_connection_trimmed"] for x in plain),
                "traced_per_subscription": median(x["per_subscription"] for x in traced),
                "traced_per_connection": median(x["per_connection"] for x in traced),
                "tasks": median(x["tasks_subscribed"] for x in plain),
                "subscribe_seconds": median(x["subscribe_seconds"] for x in plain),
            }
        row["ratio_rss"] = median(p["ratio_per_subscription"] for p in points)
        row["ratio_trimmed"] = median(
            p[PER_QUEUE_TASK]["per_subscription_trimmed"]
            / p[SINGLE_TASK]["per_subscription_trimmed"] for p in points)
        single, per_queue = row[SINGLE_TASK], row[PER_QUEUE_TASK]
        if single["traced_per_subscription"] and per_queue["traced_per_subscription"]:
            row["ratio_traced"] = (
                per_queue["traced_per_subscription"] / single["traced_per_subscription"]
            )
        else:
            row["ratio_traced"] = None
        out.append(row)
    return out


def table(summary: list[dict[str, Any]]) -> str:
    rows = []
    for r in summary:
        s, q = r[SINGLE_TASK], r[PER_QUEUE_TASK]
        rows.append([
            r["size"], r["connections"],
            s["rss_per_subscription"], s["trimmed_per_subscription"],
            s["traced_per_subscription"],
            q["rss_per_subscription"], q["trimmed_per_subscription"],
            q["traced_per_subscription"],
            r["ratio_rss"], r["ratio_trimmed"], r["ratio_traced"],
            s["tasks"], q["tasks"],
            s["rss_per_connection"], s["traced_per_connection"],
            (s["rss_subscribed"] or 0) / 2**20, (q["rss_subscribed"] or 0) / 2**20,
        ])
    return md_table(
        ["subscriptions", "connections",
         "single B/sub RSS", "single B/sub RSS trimmed", "single B/sub traced",
         "per-queue B/sub RSS", "per-queue B/sub RSS trimmed", "per-queue B/sub traced",
         "ratio RSS", "ratio RSS trimmed", "ratio traced",
         "tasks single", "tasks per-queue",
         "B/idle conn RSS", "B/idle conn traced",
         "RSS single MiB", "RSS per-queue MiB"],
        rows,
    )


# --- where an idle connection's and an idle subscription's bytes are -----------------

FRAME_SIZE = 16_384
BREAKDOWN_CONNECTIONS = 200
BREAKDOWN_SUBSCRIPTIONS = 20_000

_OWNERS = (
    ("trio_websocket/", "trio-websocket"),
    ("wsproto/", "wsproto"),
    ("h11/", "h11"),
    ("websockets/", "websockets"),
    ("trio/", "trio"),
    ("<attrs generated methods trio.", "trio"),
    ("router/server/", "router.server"),
    ("router/protocol/", "router.protocol"),
    ("store/", "store"),
    ("sortedcontainers/", "sortedcontainers"),
)


def _owner(where: str) -> str:
    for marker, name in _OWNERS:
        if marker in where:
            return name
    return "other"


def breakdown(mode: str = SINGLE_TASK) -> dict[str, Any]:
    """Live bytes per idle connection and per idle subscription, by source line and by
    package (tracemalloc snapshots of one router, before and after each phase)."""
    c, n = BREAKDOWN_CONNECTIONS, BREAKDOWN_SUBSCRIPTIONS
    with RouterProcess(mode, tracemalloc=True) as router:
        router.call("preload", start=0, count=n)
        router.call("snapshot")
        with WorkerGroup(router.address, 1) as workers:
            per_worker = connect(workers, c)
            per_connection = router.call("snapshot", limit=500)["top"]
            subscribe(workers, per_worker, 0, n)
            per_subscription = router.call("snapshot", limit=500)["top"]
            # A WebSocket ping from each client: its pong-sized frame replaces the last
            # 16 KB frame the router's WebSocket reader was still holding.
            workers.call_all({"op": "websocket_ping"})
            after_ping = router.call("snapshot", limit=500)["top"]
    result: dict[str, Any] = {"mode": mode, "connections": c, "subscriptions": n,
                              "freed_per_connection_by_a_websocket_ping":
                                  -sum(t["size_diff"] for t in after_ping) / c}
    for name, top, count in (("connection", per_connection, c),
                             ("subscription", per_subscription, n)):
        owners: dict[str, float] = {}
        for t in top:
            owners[_owner(t["where"])] = owners.get(_owner(t["where"]), 0.0) + t["size_diff"]
        result[name] = {
            "total_bytes": sum(t["size_diff"] for t in top) / count,
            # Whole frames still referenced (trio-websocket's reader keeps the last
            # chunk it read and the last message it parsed while it waits).
            "frame_buffers": sum(t["size_diff"] for t in top
                                 if t["size_diff"] / count >= 0.9 * FRAME_SIZE) / count,
            "by_package": {k: v / count for k, v in sorted(owners.items(), key=lambda kv: -kv[1])},
            "top_lines": [{"where": t["where"], "bytes": t["size_diff"] / count,
                           "objects": t["count_diff"] / count} for t in top[:12]],
        }
    write_results("memory-breakdown", result, breakdown_table(result))
    return result


def breakdown_table(result: dict[str, Any]) -> str:
    out = ["### Live bytes of idle connections and subscriptions, by source", "",
           f"One WebSocket ping from each idle client afterwards frees "
           f"{result['freed_per_connection_by_a_websocket_ping']:,.0f} B per connection "
           "in the router (negative: it grew). A WebSocket reader that keeps the last "
           "frame it read alive would free about 16 KB here.", ""]
    for name in ("connection", "subscription"):
        r = result[name]
        out += [f"### Per idle {name}: {r['total_bytes']:,.0f} B live ({result['mode']}, "
                f"{result['connections']} connections, {result['subscriptions']:,} "
                "subscriptions)", "",
                f"Of which whole 16 KB frames still referenced: {r['frame_buffers']:,.0f} B.", "",
                md_table(["package", "bytes"], list(r["by_package"].items())), "",
                md_table(["source line", "bytes", "objects"],
                         [[t["where"].split("site-packages/")[-1].split("/work/main/")[-1],
                           t["bytes"], t["objects"]] for t in r["top_lines"]]), ""]
    return "\n".join(out)
