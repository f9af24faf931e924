"""scale: subscribe time, memory and delivery rate from 1k to 200k subscriptions.

For each size N and delivery mode, a fresh router loads N queues; one client
connection subscribes all N (SUB/s on one connection); the router's RSS, the
time of a full gc pass and its trio task count are read; then every queue
gets one message at once (as in `burst`) and the same connection drains them
(MSG in, ACK out: messages per second). Per-queue-task mode drains only up
to `PER_QUEUE_DRAIN_LIMIT` queues: each of its tasks holds a 16 KB MSG while
it waits for the connection, so 200k of them would need over 3 GB.

The idle-connection cost for the projection is measured here too: at the
smallest size, `IDLE_CONNECTIONS` extra connections are opened and left idle.

From the curve, a least-squares line of RSS against N (sizes >= 10k) gives
the bytes per subscribed queue (queue record plus subscription), and the
projection for `PROJECT_SUBSCRIPTIONS` over `PROJECT_CONNECTIONS` follows,
along with subscribe and drain times at the measured rates and the full gc
pause scaled linearly. Output: scale.json, scale.md and scale.png.
"""

from __future__ import annotations

from typing import Any

from router.server.settings.config import DELIVERY_MODES, PER_QUEUE_TASK, SINGLE_TASK

from . import harness
from .harness import (
    RouterProcess,
    WorkerGroup,
    connect,
    log,
    md_table,
    median,
    write_results,
)

MODES = DELIVERY_MODES
SIZES = (1_000, 10_000, 50_000, 100_000, 200_000)
QUICK_SIZES = (1_000, 5_000)
PER_QUEUE_DRAIN_LIMIT = 100_000
IDLE_CONNECTIONS = 500
PROJECT_SUBSCRIPTIONS = 1_400_000
PROJECT_CONNECTIONS = 22_000


def scale_once(mode: str, size: int, idle_connections: int = 0) -> dict[str, Any]:
    with RouterProcess(mode) as router, WorkerGroup(router.address, 1) as workers:
        router.call("preload", start=0, count=size)
        empty = router.call("stats", gc=True)
        connect(workers, 1)
        sub = workers.call_all({"op": "subscribe", "ranges": [[0, size]]})[0]
        loaded = router.call("stats", gc=True)
        out: dict[str, Any] = {
            "subscribe_seconds": sub["seconds"],
            "subs_per_s": size / sub["seconds"],
            "rss_empty": empty["rss"],
            "full_gc_ms_records": empty["full_gc_ms"],
            "rss": loaded["rss"],
            "full_gc_ms": loaded["full_gc_ms"],
            "tasks": loaded["tasks"],
        }
        if mode == SINGLE_TASK or size <= PER_QUEUE_DRAIN_LIMIT:
            workers.call_all({"op": "drain_start", "expect": [size]})
            cpu0 = router.cpu_seconds()
            injected = router.call("inject", start=0, count=size)
            reply = workers.call_all({"op": "wait", "job": "drain", "timeout": 900})[0]
            out["drain_seconds"] = reply["last_ack"] - injected["started"]
            out["drain_msgs_per_s"] = size / out["drain_seconds"]
            out["drain_router_cpu_us_per_msg"] = (router.cpu_seconds() - cpu0) / size * 1e6
        if idle_connections:
            before = router.call("stats", gc=True)["rss"]
            connect(workers, idle_connections)
            after = router.call("stats", gc=True)["rss"]
            out["rss_per_idle_connection"] = (after - before) / idle_connections
        router.call("gc_freeze")
        out["full_gc_ms_frozen"] = router.call("stats", gc=True)["full_gc_ms"]
    return out


def loaded_at_start(size: int) -> dict[str, Any]:
    """A router started on a memory snapshot of `size` queues, as `smp-router serve`
    would be: the full gc pass right after start (the CLI freezes what it loaded)."""
    with RouterProcess(SINGLE_TASK, extra=["--snapshot-queues", str(size)]) as router:
        stats = router.call("stats", gc=True)
    return {"full_gc_ms": stats["full_gc_ms"], "rss": stats["rss"]}


def run(sizes: tuple[int, ...] = SIZES, repeats: int = 2) -> dict[str, Any]:
    runs = []
    for rep in range(repeats):
        for size in sizes:
            point: dict[str, Any] = {"size": size, "repeat": rep}
            for mode in MODES:
                log(f"scale: {mode} N={size} run {rep + 1}/{repeats}")
                idle = IDLE_CONNECTIONS if size == sizes[0] else 0
                point[mode] = scale_once(mode, size, idle)
            point["loaded_at_start"] = loaded_at_start(size)
            runs.append(point)
    summary = summarize(runs, sizes)
    projection = project(summary)
    write_results("scale", {"parameters": {"sizes": sizes, "repeats": repeats},
                            "summary": summary, "projection": projection, "runs": runs},
                  table(summary, projection))
    plot(summary, projection)
    return {"summary": summary, "projection": projection}


FIELDS = ("subs_per_s", "rss", "rss_empty", "full_gc_ms", "full_gc_ms_records",
          "full_gc_ms_frozen", "tasks",
          "drain_msgs_per_s",
          "drain_router_cpu_us_per_msg", "rss_per_idle_connection")


def summarize(runs: list[dict[str, Any]], sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        points = [p for p in runs if p["size"] == size]
        row: dict[str, Any] = {"size": size}
        for mode in MODES:
            row[mode] = {f: median(p[mode].get(f) for p in points) for f in FIELDS}
        row["loaded_at_start_full_gc_ms"] = median(
            p["loaded_at_start"]["full_gc_ms"] for p in points)
        out.append(row)
    return out


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def project(summary: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"subscriptions": PROJECT_SUBSCRIPTIONS,
                           "connections": PROJECT_CONNECTIONS}
    fit_rows = [r for r in summary if r["size"] >= 10_000] or summary
    if len(fit_rows) < 2:
        return out
    for mode in MODES:
        xs = [r["size"] for r in fit_rows]
        intercept, slope = _fit(xs, [r[mode]["rss"] for r in fit_rows])
        _, gc_slope = _fit(xs, [r[mode]["full_gc_ms"] or 0.0 for r in fit_rows])
        _, frozen_slope = _fit(xs, [r[mode]["full_gc_ms_frozen"] or 0.0 for r in fit_rows])
        # What is left once the records loaded at start are frozen (`smp-router serve`):
        # the subscriptions made since.
        _, subs_slope = _fit(xs, [(r[mode]["full_gc_ms"] or 0.0)
                                  - (r[mode]["full_gc_ms_records"] or 0.0) for r in fit_rows])
        per_conn = summary[0][mode]["rss_per_idle_connection"] or 0.0
        big = fit_rows[-1][mode]
        memory = intercept + slope * PROJECT_SUBSCRIPTIONS + per_conn * PROJECT_CONNECTIONS
        out[mode] = {
            "bytes_per_subscribed_queue": slope,
            "bytes_per_idle_connection": per_conn,
            "base_bytes": intercept,
            "memory_gib": memory / 2**30,
            "subscriptions_memory_gib": slope * PROJECT_SUBSCRIPTIONS / 2**30,
            "connections_memory_gib": per_conn * PROJECT_CONNECTIONS / 2**30,
            "subscribe_all_seconds": PROJECT_SUBSCRIPTIONS / big["subs_per_s"],
            "full_gc_ms": max(0.0, gc_slope * PROJECT_SUBSCRIPTIONS),
            "full_gc_ms_after_freeze": max(0.0, frozen_slope * PROJECT_SUBSCRIPTIONS),
            "full_gc_ms_records_frozen": max(0.0, subs_slope * PROJECT_SUBSCRIPTIONS),
            "trio_tasks": (PROJECT_SUBSCRIPTIONS + 5 * PROJECT_CONNECTIONS
                           if mode == PER_QUEUE_TASK else 5 * PROJECT_CONNECTIONS),
        }
        drain = [r[mode]["drain_msgs_per_s"] for r in fit_rows if r[mode]["drain_msgs_per_s"]]
        out[mode]["drain_all_seconds"] = PROJECT_SUBSCRIPTIONS / drain[-1] if drain else None
    return out


def table(summary: list[dict[str, Any]], projection: dict[str, Any]) -> str:
    rows = []
    for r in summary:
        for mode in MODES:
            m = r[mode]
            rows.append([r["size"], mode, m["subs_per_s"], m["rss"] / 2**20,
                         (m["rss"] - m["rss_empty"]) / r["size"], m["full_gc_ms_records"],
                         m["full_gc_ms"], m["full_gc_ms_frozen"], m["tasks"],
                         m["drain_msgs_per_s"], m["drain_router_cpu_us_per_msg"]])
    text = md_table(["subscriptions", "mode", "SUB/s (1 conn)", "RSS MiB",
                     "RSS of subscribing / sub (B)", "full gc ms, records only",
                     "full gc ms, subscribed", "full gc ms after gc.freeze()", "trio tasks",
                     "drain msg/s (1 conn)", "router CPU us/msg (drain)"], rows)
    text += "\n\nFull gc pass right after a start on a memory snapshot of N queues " \
        "(`smp-router serve` freezes what it loaded): " + ", ".join(
            f"N={r['size']:,}: {r['loaded_at_start_full_gc_ms']:.2f} ms" for r in summary)
    lines = [text, "", f"Projection to {PROJECT_SUBSCRIPTIONS:,} subscriptions over "
             f"{PROJECT_CONNECTIONS:,} connections (linear fit of RSS for N >= 10k):", ""]
    for mode in MODES:
        p = projection.get(mode)
        if not p:
            continue
        lines.append(
            f"- {mode}: {p['memory_gib']:.2f} GiB "
            f"({p['bytes_per_subscribed_queue']:.0f} B per subscribed queue incl. its record = "
            f"{p['subscriptions_memory_gib']:.2f} GiB, {p['bytes_per_idle_connection'] / 1024:.0f}"
            f" KiB per idle connection = {p['connections_memory_gib']:.2f} GiB), "
            f"{p['trio_tasks']:,} trio tasks, full gc pass ~{p['full_gc_ms']:.0f} ms "
            f"(~{p['full_gc_ms_records_frozen']:.0f} ms when the records were loaded at start "
            f"and frozen, ~{p['full_gc_ms_after_freeze']:.0f} ms right after a gc.freeze() "
            "of everything), "
            f"all {PROJECT_SUBSCRIPTIONS:,} SUBs ~{p['subscribe_all_seconds']:.0f} s at the "
            "one-connection SUB rate"
            + (f", one message for every queue drained in ~{p['drain_all_seconds']:.0f} s at "
               "the one-connection drain rate" if p.get("drain_all_seconds") else ""))
    return "\n".join(lines)


def plot(summary: list[dict[str, Any]], projection: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] for r in summary]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for mode, style in zip(MODES, ("o-", "s--"), strict=True):
        axes[0].plot(sizes, [r[mode]["subs_per_s"] for r in summary], style, label=mode)
        axes[1].plot(sizes, [r[mode]["rss"] / 2**20 for r in summary], style, label=mode)
        drained = [(r["size"], r[mode]["drain_msgs_per_s"]) for r in summary
                   if r[mode]["drain_msgs_per_s"]]
        axes[2].plot([d[0] for d in drained], [d[1] for d in drained], style, label=mode)
    axes[0].set_title("SUB/s on one connection")
    axes[1].set_title("router RSS (MiB), N queues loaded and subscribed")
    axes[2].set_title("drain: MSG+ACK per second, one connection")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("subscriptions")
        ax.grid(True, alpha=0.3)
        ax.legend()
    for ax in (axes[0], axes[2]):
        ax.axhline(10_000, color="grey", lw=0.8, ls=":", label="target 10k/s")
        ax.set_ylim(bottom=0, top=12_000)
        ax.legend()
    fig.suptitle("smp-router scale (2-core shared machine; see RESULTS.md)")
    fig.tight_layout()
    harness.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    fig.savefig(harness.RESULTS_DIR / "scale.png", dpi=90)
    plt.close(fig)
