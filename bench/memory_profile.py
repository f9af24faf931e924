"""memory (default): where the router's memory goes, per store kind and delivery mode.

    python -m bench memory [--quick] [--stores memory,journal,sqlite]

For each store kind and each delivery mode, in one run, two router processes
(`bench.router_process --store KIND`) go through the same phases; one is
measured from outside and with the allocators' own figures (RSS, RSS after
`malloc_trim`, glibc malloc and pymalloc in use and free), the other with
tracemalloc on (live Python bytes, the component walk of `bench.census`, the
type census), because tracing costs memory of its own. Phases:

    started         the router, no queue
    queues          Q queue records loaded into the store
    messages_empty  M messages with empty bodies stored (into queues nobody holds)
    messages_16k    M more with 16,064-byte bodies (the largest a SEND may carry)
    connected       C idle connections
    subscribed      the other Q - 2M queues subscribed over them, idle
    traffic         senders and recipients at work (read while it runs, no gc)
    after_traffic   the same connections idle again
    storm           every client disconnects, reconnects and resubscribes (peak)
    after_storm     all settled again

Every idle phase is read after the collector policy's quiet-time pass (unfreeze,
full collection, freeze), so cyclic garbage that the policy had frozen is not
counted as live. Per-unit figures are differences of
consecutive phases: per stored queue (queues - started) / Q, per stored
message, per idle connection, per idle subscription. "RSS" is measured from
the previous phase's trimmed RSS, so free heap that an earlier phase left
behind is not charged to the next one.

How the figures relate (the gap between live bytes and RSS):
live (tracemalloc) ~ pymalloc in use + the Python part of malloc in use;
pymalloc free = slack in its pools (freed small objects, partly used pools);
malloc free = glibc's free heap, which `malloc_trim` partly hands back;
native = malloc in use + pymalloc in use - live: C allocations Python does not
trace (OpenSSL, libsodium, SQLite's page cache, the interpreter's own).
"""

from __future__ import annotations

import time
from typing import Any

from router.server.settings.config import DELIVERY_MODES, STORE_KINDS

from .census import COMPONENTS
from .harness import (
    PeakSampler,
    RouterProcess,
    WorkerGroup,
    connect,
    log,
    md_table,
    subscribe,
    write_results,
)

MODES = DELIVERY_MODES
STORES = STORE_KINDS
LARGE_BODY = 16_064  # MAX_MESSAGE_LENGTH (docs/protocol.md#limits)
WORKERS = 2
IDLE_PHASES = ("started", "queues", "messages_empty", "messages_16k", "connected",
               "subscribed", "after_traffic", "after_storm")
PHASES = ("started", "queues", "messages_empty", "messages_16k", "connected",
          "subscribed", "traffic", "after_traffic", "storm", "after_storm")


class Size:
    def __init__(self, queues: int, messages: int, connections: int, traffic_seconds: float):
        self.queues, self.messages, self.connections = queues, messages, connections
        self.traffic_seconds = traffic_seconds

    @property
    def subscriptions(self) -> int:
        return self.queues - 2 * self.messages

    def as_dict(self) -> dict[str, Any]:
        return {"queues": self.queues, "messages": self.messages,
                "connections": self.connections, "subscriptions": self.subscriptions,
                "traffic_seconds": self.traffic_seconds}


DEFAULT = Size(queues=12_000, messages=1_000, connections=1_000, traffic_seconds=3.0)
QUICK = Size(queues=1_400, messages=200, connections=100, traffic_seconds=1.5)

# --- one router through the phases --------------------------------------------------------


def measure(store: str, mode: str, size: Size, traced: bool) -> dict[str, Any]:
    """The phases of one router process (traced: tracemalloc's view, else the OS's)."""
    extra = ["--store", store, "--fsync", "never"]
    read = _read_traced if traced else _read_plain
    phases: dict[str, Any] = {}
    m, q = size.messages, size.queues
    with RouterProcess(mode, tracemalloc=traced, extra=extra) as router:
        _warm_up(router, traced)
        phases["started"] = read(router)
        router.call("preload", start=0, count=q)
        phases["queues"] = read(router)
        router.call("inject", start=0, count=m, body_size=0, distinct_bodies=True)
        phases["messages_empty"] = read(router)
        router.call("inject", start=m, count=m, body_size=LARGE_BODY, distinct_bodies=True)
        phases["messages_16k"] = read(router)
        with WorkerGroup(router.address, WORKERS) as workers:
            per_worker = connect(workers, size.connections)
            phases["connected"] = read(router)
            _, plan = subscribe(workers, per_worker, 2 * m, size.subscriptions)
            phases["subscribed"] = read(router)
            phases["traffic"] = _traffic(router, workers, plan, size, traced)
            phases["after_traffic"] = read(router)
            phases["storm"] = _storm(router, workers, size, traced)
            phases["after_storm"] = read(router)
    return phases


def _read_plain(router: RouterProcess) -> dict[str, Any]:
    router.call("full_collection")
    stats = router.call("stats", gc=True)
    allocator = router.call("allocator")
    trimmed = router.call("malloc_trim")["rss"]
    return {"rss": stats["rss"], "trimmed": trimmed, "tasks": stats["tasks"],
            **{k: v for k, v in allocator.items() if k != "rss"}}


def _read_traced(router: RouterProcess) -> dict[str, Any]:
    """Live bytes; by component and, within each, by type (the walk follows references,
    so it sees frozen objects, which `gc.get_objects()` would not list)."""
    router.call("full_collection")
    traced = router.call("traced")
    components = router.call("components", top_types=0)
    types: dict[str, list[int]] = {}
    for name in COMPONENTS:
        for t, (count, size) in components[name]["types"].items():
            entry = types.setdefault(t, [0, 0])
            entry[0] += count
            entry[1] += size
    return {"traced": traced["traced"],
            "components": {n: components[n]["bytes"] for n in COMPONENTS},
            "types": types}


def _warm_up(router: RouterProcess, traced: bool) -> None:
    """Run every measuring request once, so that the imports and caches they bring
    into the router process are there before the first phase is read."""
    router.call("stats", gc=True)
    if traced:
        router.call("traced")
        router.call("components")
    else:
        router.call("allocator")


def _traffic(router: RouterProcess, workers: WorkerGroup, plan: list, size: Size,
             traced: bool) -> dict[str, Any]:
    """In each worker client 0 sends (a window of 4) to the queues its other clients
    hold, which read and ACK; memory is read in the middle, without a gc."""
    start = time.monotonic() + 0.5
    stop = start + size.traffic_seconds
    requests = []
    for ranges in plan:
        targets = [q for first, count in ranges[1:] for q in range(first, first + count)]
        if not targets:
            requests.append(None)
            continue
        requests.append({"op": "load_start", "body_size": 1024, "t_start": start,
                         "t_end": stop, "stop": stop, "receivers": list(range(1, len(ranges))),
                         "senders": [{"client": 0, "targets": targets[:2000], "window": 4}]})
    workers.call(requests)
    if traced:
        router.call("trace_reset_peak")
    time.sleep(max(0.0, start - time.monotonic()) + size.traffic_seconds / 2)
    if traced:
        during = {"traced": router.call("traced", gc=False)["traced"]}
    else:
        stats = router.call("stats")
        during = {"rss": stats["rss"], "tasks": stats["tasks"]}
    results = workers.call([{"op": "wait", "job": "load"} if r else None for r in requests])
    during["delivered"] = sum(r["received_total"] for r in results if r)
    during["seconds"] = size.traffic_seconds
    return during


def _storm(router: RouterProcess, workers: WorkerGroup, size: Size, traced: bool) -> dict:
    """Every client closes, then all reconnect and resubscribe: the peak while it lasts."""
    began = time.monotonic()
    if traced:
        base = router.call("traced")
        router.call("trace_reset_peak")
        run_storm(workers, size)
        peak = router.call("traced", gc=False)["traced_peak"]
        # the peak is of everything traced, tracemalloc's own snapshots included
        return {"traced": base["traced"] + peak - base["traced_unfiltered"],
                "seconds": time.monotonic() - began}
    with PeakSampler(router.ps) as sampler:
        run_storm(workers, size)
    return {"rss": sampler.peak, "seconds": time.monotonic() - began}


def run_storm(workers: WorkerGroup, size: Size) -> None:
    workers.call_all({"op": "close_clients"})
    per_worker = connect(workers, size.connections)
    subscribe(workers, per_worker, 2 * size.messages, size.subscriptions)


# --- figures ----------------------------------------------------------------------------


def per_unit(plain: dict[str, Any], traced: dict[str, Any], size: Size) -> dict[str, Any]:
    """Bytes per stored queue, stored message, idle connection and idle subscription,
    and the growth during traffic and a storm, in every measure."""
    steps = {
        "queue": ("started", "queues", size.queues),
        "message_empty": ("queues", "messages_empty", size.messages),
        "message_16k": ("messages_empty", "messages_16k", size.messages),
        "connection": ("messages_16k", "connected", size.connections),
        "subscription": ("connected", "subscribed", size.subscriptions),
        "traffic_per_connection": ("subscribed", "traffic", size.connections),
        "after_traffic_per_connection": ("subscribed", "after_traffic", size.connections),
        "storm_per_connection": ("subscribed", "storm", size.connections),
        "after_storm_per_connection": ("subscribed", "after_storm", size.connections),
    }
    out: dict[str, Any] = {}
    for name, (before, after, n) in steps.items():
        a, b = plain[before], plain[after]
        ta, tb = traced[before], traced[after]
        row: dict[str, Any] = {
            "live": (tb["traced"] - ta["traced"]) / n,
            "rss": (b["rss"] - a["trimmed"]) / n,
            "trimmed": (b["trimmed"] - a["trimmed"]) / n if "trimmed" in b else None,
        }
        if "components" in tb:
            row["components"] = {c: (tb["components"][c] - ta["components"][c]) / n
                                 for c in COMPONENTS}
            row["types"] = _type_growth(ta["types"], tb["types"], n)
        for key in ("pymalloc_in_use", "pymalloc_free", "malloc_in_use", "malloc_free"):
            if b.get(key) is not None and a.get(key) is not None:
                row[key] = (b[key] - a[key]) / n
        if "pymalloc_in_use" in row and "malloc_in_use" in row:
            row["native"] = row["pymalloc_in_use"] + row["malloc_in_use"] - row["live"]
        out[name] = row
    return out


def _type_growth(before: dict[str, list[int]], after: dict[str, list[int]], n: int,
                 top: int = 8) -> list[list[Any]]:
    """[type, objects per unit, bytes per unit] of the types that grew most."""
    rows = []
    for name, (count, size) in after.items():
        c0, s0 = before.get(name, (0, 0))
        if size - s0 > 0:
            rows.append([name, (count - c0) / n, (size - s0) / n])
    rows.sort(key=lambda r: -r[2])
    return rows[:top]


def run(size: Size = DEFAULT, stores: tuple[str, ...] = STORES,
        name: str = "memory-profile") -> dict[str, Any]:
    points: dict[str, dict[str, Any]] = {}
    for store in stores:
        for mode in MODES:
            log(f"memory: {store} store, {mode}: RSS run")
            plain = measure(store, mode, size, traced=False)
            log(f"memory: {store} store, {mode}: traced run")
            traced = measure(store, mode, size, traced=True)
            points[f"{store} {mode}"] = {
                "store": store, "mode": mode, "plain": plain, "traced": traced,
                "per_unit": per_unit(plain, traced, size)}
    result = {"parameters": size.as_dict(), "points": points}
    write_results(name, result, table(result))
    return result


# Said under the table whose columns can go below zero, so that a reader does not
# take `malloc free -1,319` for a fault of the measurement.
NEGATIVE_FIGURES = (
    "Every figure is a change between two phases divided by the units added, not an "
    "amount: a free-space column (pymalloc free, malloc free) is negative when the new "
    "objects were put in space an earlier phase had freed, i.e. the free heap shrank by "
    "that much per unit; native can be a little below zero because live comes from "
    "another run (the traced one) than the allocator figures."
)


def table(result: dict[str, Any]) -> str:
    p = result["parameters"]
    points = result["points"]
    out = [f"### Bytes per unit, by store kind and delivery mode "
           f"({p['queues']:,} queues, {p['messages']:,} + {p['messages']:,} messages, "
           f"{p['connections']:,} connections, {p['subscriptions']:,} subscriptions)", "",
           "live = tracemalloc (a second process); RSS from the previous phase's trimmed "
           "RSS; trimmed = after malloc_trim(0).", ""]
    units = (("queue", "stored queue"), ("message_empty", "stored message, empty body"),
             ("message_16k", "stored message, 16 KB body"), ("connection", "idle connection"),
             ("subscription", "idle subscription"),
             ("traffic_per_connection", "during traffic, per connection"),
             ("after_traffic_per_connection", "after traffic, per connection"),
             ("storm_per_connection", "storm peak, per connection"),
             ("after_storm_per_connection", "after the storm, per connection"))
    headers = ["per", *[f"{k} live / RSS / trimmed" for k in points]]
    rows = []
    for key, label in units:
        cells = []
        for point in points.values():
            u = point["per_unit"][key]
            cells.append(" / ".join("–" if v is None else f"{v:,.0f}"
                                    for v in (u["live"], u["rss"], u["trimmed"])))
        rows.append([label, *cells])
    out += [md_table(headers, rows), ""]
    out += ["### Where the RSS goes (bytes per unit, RSS run): pymalloc in use and its "
            "free slack, malloc in use and free, native = pymalloc + malloc in use - live",
            "", NEGATIVE_FIGURES, ""]
    rows = []
    for key, label in units[:5]:
        for name, point in points.items():
            u = point["per_unit"][key]
            rows.append([label, name, u["live"], u.get("pymalloc_in_use"),
                         u.get("pymalloc_free"), u.get("malloc_in_use"), u.get("malloc_free"),
                         u.get("native"), u["trimmed"], u["rss"]])
    out += [md_table(["per", "store / mode", "live", "pymalloc in use", "pymalloc free",
                      "malloc in use", "malloc free", "native", "RSS trimmed", "RSS"], rows), ""]
    out += ["### Live bytes by component (traced run, component walk of bench.census), "
            "per unit, against tracemalloc's total", ""]
    rows = []
    for key, label in units[:5]:
        for name, point in points.items():
            u = point["per_unit"][key]
            comps = u["components"]
            total = sum(comps.values())
            rows.append([label, name, *[comps[c] for c in COMPONENTS], total, u["live"],
                         total / u["live"] if u["live"] else None])
    out += [md_table(["per", "store / mode", *COMPONENTS, "sum", "live (traced)",
                      "sum / live"], rows), ""]
    out += ["### Types that grew most, per idle connection and per idle subscription "
            "(objects and bytes per unit, in the component walk: frozen objects included)", ""]
    for key, label in (("connection", "idle connection"), ("subscription", "idle subscription")):
        for name, point in points.items():
            grown = point["per_unit"][key]["types"]
            out.append(f"- {label}, {name}: " + ", ".join(
                f"{t} {c:,.1f} ({b:,.0f} B)" for t, c, b in grown))
    return "\n".join(out)
