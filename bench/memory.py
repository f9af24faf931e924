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

`storm` (`python -m bench memory --storm`, and the first part of `python -m bench
memory`) measures what a reconnect storm leaves beside quiet subscribing, per store
kind (its docstring and `storm_growth`'s).
"""

from __future__ import annotations

import time
from typing import Any

from router.server.settings.config import (
    DELIVERY_MODES,
    PER_QUEUE_TASK,
    SINGLE_TASK,
    STORE_KINDS,
)

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
    """Stats after a full gc, plus the RSS once glibc has returned its free heap; with
    tracing, the live bytes without tracemalloc's own (the source lines `linecache`
    reads when the loop-lag watcher formats a stall's stack would count otherwise)."""
    stats = router.call("stats", gc=True)
    if "traced" in stats:
        stats["traced"] = router.call("traced")["traced"]
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
    ) + "\n\n" + SMALL_SIZES_NOTE


# Said under the table: a figure below zero is not a fault of the measurement.
SMALL_SIZES_NOTE = (
    "B/sub and B/idle conn are differences between two phases divided by the units "
    "added: at small sizes (`--quick`) a few bytes per unit can come out below zero when "
    "the new objects reuse memory an earlier phase freed; read the large sizes."
)


# --- where an idle connection's and an idle subscription's bytes are -----------------

BREAKDOWN_CONNECTIONS = 200
BREAKDOWN_SUBSCRIPTIONS = 20_000
SITE_FRAMES = 16  # deep enough to reach the router's own line under trio's and the codec's


def breakdown(mode: str = SINGLE_TASK) -> dict[str, Any]:
    """Per idle connection and per idle subscription: the allocation sites that grew
    (tracemalloc with SITE_FRAMES frames, its own allocations left out, each site named
    by its innermost frame and by the router's own line that led to it), and the types
    that grew (a census of every object, the frozen ones included, in a second router
    process without tracing)."""
    c, n = BREAKDOWN_CONNECTIONS, BREAKDOWN_SUBSCRIPTIONS
    result: dict[str, Any] = {"mode": mode, "connections": c, "subscriptions": n}
    with RouterProcess(mode, tracemalloc=True,
                       extra=["--tracemalloc-frames", str(SITE_FRAMES)]) as router:
        router.call("preload", start=0, count=n)
        router.call("full_collection")
        router.call("sites")
        with WorkerGroup(router.address, WORKERS) as workers:
            per_worker = connect(workers, c)
            router.call("full_collection")
            connected = router.call("sites", limit=40)
            subscribe(workers, per_worker, 0, n)
            router.call("full_collection")
            subscribed = router.call("sites", limit=40)
            workers.call_all({"op": "websocket_ping"})
            router.call("full_collection")
            ping_sites = router.call("sites", limit=500)["sites"]
    result["change_per_connection_after_a_websocket_ping"] = (
        sum(t["size_diff"] for t in ping_sites) / c)
    with RouterProcess(mode) as router:
        router.call("preload", start=0, count=n)
        first = router.call("types", top=0)
        loaded = first["all_types"]
        with WorkerGroup(router.address, WORKERS) as workers:
            per_worker = connect(workers, c)
            census_connected = router.call("types", top=0)
            subscribe(workers, per_worker, 0, n)
            census_subscribed = router.call("types", top=0)["all_types"]
    result["frozen_objects"] = first["frozen_before"]  # what `serve` froze once loaded
    for name, grown, before, after, count in (
            ("connection", connected, loaded, census_connected["all_types"], c),
            ("subscription", subscribed, census_connected["all_types"], census_subscribed, n)):
        sites = grown["sites"]
        result[name] = {
            "total_bytes": grown["size_diff"] / count,
            "top_sites_bytes": sum(t["size_diff"] for t in sites) / count,
            "sites": [{**t, "bytes": t["size_diff"] / count, "objects": t["count_diff"] / count}
                      for t in sites[:15]],
            "by_router_line": _by_router_line(sites, count),
            "types": _type_diff(before, after, count),
        }
    write_results("memory-breakdown", result, breakdown_table(result))
    return result


def _by_router_line(sites: list[dict[str, Any]], count: int) -> list[list[Any]]:
    lines: dict[str, float] = {}
    for t in sites:
        lines[t["router_line"]] = lines.get(t["router_line"], 0.0) + t["size_diff"] / count
    return sorted(([k, v] for k, v in lines.items()), key=lambda kv: -abs(kv[1]))[:12]


def _type_diff(before: dict[str, list[int]], after: dict[str, list[int]],
               count: int) -> list[list[Any]]:
    rows = []
    for name, (objects, size) in after.items():
        o0, s0 = before.get(name, (0, 0))
        if size != s0:
            rows.append([name, (objects - o0) / count, (size - s0) / count])
    rows.sort(key=lambda r: -abs(r[2]))
    return rows[:15]


def breakdown_table(result: dict[str, Any]) -> str:
    change = result["change_per_connection_after_a_websocket_ping"]
    out = ["### Live bytes of idle connections and subscriptions, by allocation site and type",
           "",
           f"One WebSocket ping from each idle client afterwards changes the router's live "
           f"memory by {change:+,.0f} B per connection ({'it grew' if change > 0 else 'freed'}"
           "; a connection that kept its last 16 KB frame alive would free about 16 KB here).",
           f"Objects frozen by the router (`gc.freeze()`), counted in the census: "
           f"{result['frozen_objects']:,}.", ""]
    for name in ("connection", "subscription"):
        r = result[name]
        total = r.get("total_bytes") if "top_sites_bytes" in r else None
        top = r.get("top_sites_bytes", r["total_bytes"])
        out += [f"### Per idle {name} ({result['mode']}, {result['connections']} "
                f"connections, {result['subscriptions']:,} subscriptions)", "",
                f"Live bytes: {'not recorded' if total is None else f'{total:,.0f} B'}; "
                f"the {len(r['sites'])} largest sites below and the others up to 40: "
                f"{top:,.0f} B.", "",
                md_table(["the router's own line", "bytes"], r["by_router_line"]), "",
                md_table(["allocated at", "the router's own line", "bytes", "objects"],
                         [[t["allocated_at"], t["router_line"], t["bytes"], t["objects"]]
                          for t in r["sites"]]), "",
                md_table(["type", "objects", "bytes"], r["types"]), ""]
    return "\n".join(out)


# --- what a reconnect storm leaves -----------------------------------------------------

class StormSize:
    def __init__(self, queues: int, connections: int, quiet_subscriptions: int,
                 quiet_connections: int) -> None:
        self.queues, self.connections = queues, connections
        self.quiet_subscriptions, self.quiet_connections = quiet_subscriptions, quiet_connections

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


# As a relay's reconnection: every connection sends its ~100 signed SUBs in one block,
# all at once; beside it the same kind of subscriptions made by a few connections.
STORM = StormSize(queues=100_000, connections=1_000, quiet_subscriptions=20_000,
                  quiet_connections=4)
QUICK_STORM = StormSize(queues=10_000, connections=100, quiet_subscriptions=2_000,
                        quiet_connections=4)
SETTLE_TIMEOUT = 30.0  # the collector policy ends a wave 10 s after it stops growing


def storm_growth(store: str, queues: int, connections: int, subscriptions: int,
                 settle_timeout: float = SETTLE_TIMEOUT) -> dict:
    """RSS growth per subscription when `connections` connections subscribe
    `subscriptions` of `queues` stored queues at once (each its share in blocks of
    about 100 SUBs), from the trimmed RSS before: just after (a full gc), once the
    router's collector policy has ended the wave (its own `malloc_trim`, gc_policy.py;
    None if it did not within `settle_timeout` seconds), and after one more
    `malloc_trim`; with pymalloc's arenas and bytes in use beside it."""
    extra = ["--store", store, "--fsync", "never"]
    with RouterProcess(SINGLE_TASK, extra=extra) as router:
        router.call("preload", start=0, count=queues)
        with WorkerGroup(router.address, WORKERS) as workers:
            per_worker = connect(workers, connections)
            router.call("full_collection")
            before = {**router.call("allocator"), "rss": router.call("malloc_trim")["rss"]}
            seconds, _ = subscribe(workers, per_worker, 0, subscriptions)
            trims = router.call("gc_policy").get("trims", 0)
            router.call("full_collection")
            after = router.call("allocator")
            settled = _settled_rss(router, trims, settle_timeout)
            trimmed = router.call("malloc_trim")["rss"]
            answered = router.call("stats")["statistics"]["subscriptions"]
            threads = router.ps.num_threads()

    def per(value_after: int | None, key: str) -> float | None:
        if value_after is None or before.get(key) is None:
            return None
        return (value_after - before[key]) / subscriptions

    return {
        "store": store, "queues": queues, "connections": connections,
        "subscriptions": subscriptions, "subscribed": answered, "seconds": seconds,
        "threads": threads,
        "rss_before": before["rss"], "rss_after": after["rss"],
        "per_subscription_rss": per(after["rss"], "rss"),
        "per_subscription_settled": per(settled, "rss"),
        "per_subscription_trimmed": per(trimmed, "rss"),
        "per_subscription_pymalloc_arenas": per(after.get("pymalloc_arenas"), "pymalloc_arenas"),
        "per_subscription_pymalloc_in_use": per(after.get("pymalloc_in_use"), "pymalloc_in_use"),
        "per_subscription_malloc_free": per(after.get("malloc_free"), "malloc_free"),
    }


def storm_traced(store: str, queues: int, connections: int, subscriptions: int) -> dict:
    """The same storm in a router with tracemalloc on: live bytes per subscription
    after it, and the peak of live bytes during it per connection (what the blocks
    being worked on hold at once, among which the subscriptions are allocated)."""
    extra = ["--store", store, "--fsync", "never"]
    with RouterProcess(SINGLE_TASK, tracemalloc=True, extra=extra) as router:
        router.call("preload", start=0, count=queues)
        with WorkerGroup(router.address, WORKERS) as workers:
            per_worker = connect(workers, connections)
            router.call("full_collection")
            before = router.call("traced")
            router.call("trace_reset_peak")
            subscribe(workers, per_worker, 0, subscriptions)
            peak = router.call("traced", gc=False)["traced_peak"]
            router.call("full_collection")
            after = router.call("traced")["traced"]
    return {"live_per_subscription": (after - before["traced"]) / subscriptions,
            # the peak counts tracemalloc's own snapshots too: its unfiltered total
            "peak_per_connection": (peak - before["traced_unfiltered"]) / connections}


def _settled_rss(router: RouterProcess, trims_before: int, timeout: float) -> int | None:
    """RSS once the collector policy has trimmed the heap after the storm (it does
    when a wave has settled); None if it did not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        policy = router.call("gc_policy")
        if not policy.get("running"):
            return None
        if policy.get("trims", 0) > trims_before:
            return router.call("stats")["rss"]
        time.sleep(0.5)
    return None


def storm(size: StormSize = STORM, stores: tuple[str, ...] = STORE_KINDS,
          name: str = "memory-storm", settle_timeout: float = SETTLE_TIMEOUT) -> dict[str, Any]:
    """Per store kind, in one run: the storm and the quiet case, each in a router of its
    own holding the same queues."""
    rows = []
    for store in stores:
        log(f"memory: {store} store, storm of {size.queues:,} SUBs over "
            f"{size.connections:,} connections")
        stormy = storm_growth(store, size.queues, size.connections, size.queues,
                              settle_timeout)
        log(f"memory: {store} store, {size.quiet_subscriptions:,} SUBs over "
            f"{size.quiet_connections} connections")
        quiet = storm_growth(store, size.queues, size.quiet_connections,
                             size.quiet_subscriptions, settle_timeout)
        log(f"memory: {store} store, the storm traced")
        stormy.update(storm_traced(store, size.queues, size.connections, size.queues))
        rows.append({"store": store, "storm": stormy, "quiet": quiet})
    result = {"parameters": size.as_dict(), "stores": rows}
    write_results(name, result, storm_table(result))
    return result


def storm_table(result: dict[str, Any]) -> str:
    p = result["parameters"]
    out = [f"### RSS growth per subscription: a storm ({p['queues']:,} SUBs over "
           f"{p['connections']:,} connections at once) beside quiet subscribing "
           f"({p['quiet_subscriptions']:,} over {p['quiet_connections']} connections)", "",
           "From the trimmed RSS before: just after = after a full gc; settled = once "
           "the router's collector policy has ended the wave (its own malloc_trim; – "
           "if not within 30 s); trimmed = after one more malloc_trim(0); pymalloc = "
           "its arenas' growth and its bytes in use, just after; live "
           "and peak from a third router with tracemalloc on (storm only).", ""]
    rows = []
    for row in result["stores"]:
        for case in ("storm", "quiet"):
            r = row[case]
            rows.append([row["store"], case, r["subscribed"], r["per_subscription_rss"],
                         r.get("per_subscription_settled"), r["per_subscription_trimmed"],
                         r["per_subscription_pymalloc_arenas"],
                         r["per_subscription_pymalloc_in_use"],
                         r["per_subscription_malloc_free"], r.get("live_per_subscription"),
                         r.get("peak_per_connection"), r["threads"], r["seconds"]])
    out.append(md_table(["store", "case", "subscribed", "B/sub just after", "B/sub settled",
                         "B/sub trimmed",
                         "pymalloc arenas B/sub", "pymalloc in use B/sub",
                         "malloc free B/sub", "live B/sub (traced)",
                         "peak live B/conn during it (traced)", "threads", "seconds"], rows))
    return "\n".join(out)
