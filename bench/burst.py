"""burst: one client subscribed to 10,000 queues, and every queue gets a message at once.

This is the case the single delivery task is for. For each delivery mode:
the router loads N queues, one client connection subscribes all of them,
then the router's control pipe puts one message into every queue in one
scheduler turn, through the store write and delivery trigger that a verified
SEND uses (so the burst really arrives "at the same moment", without N
signature checks spreading it out). The client reads every MSG and ACKs it.

Reported: time from the injection until the client has the router's answer
to its last ACK, i.e. every queue is empty again (drain time), messages per
second, when the first and the last MSG arrived, the router's peak RSS during the burst (sampled
from outside every 5 ms, and the kernel's VmHWM), its RSS and trio task
count before, and its CPU time.
"""

from __future__ import annotations

import time
from typing import Any

from router.server.settings.config import DELIVERY_MODES, PER_QUEUE_TASK, SINGLE_TASK

from .harness import (
    PeakSampler,
    RouterProcess,
    WorkerGroup,
    connect,
    log,
    md_table,
    median,
    write_results,
)

MODES = DELIVERY_MODES
SIZES = (10_000,)
BODY_SIZE = 256


def burst_once(mode: str, size: int, body_size: int = BODY_SIZE) -> dict[str, Any]:
    with RouterProcess(mode) as router, WorkerGroup(router.address, 1) as workers:
        router.call("preload", start=0, count=size)
        connect(workers, 1)
        sub = workers.call_all({"op": "subscribe", "ranges": [[0, size]]})[0]
        before = router.call("stats", gc=True)
        workers.call_all({"op": "drain_start", "expect": [size]})
        router.call("reset_hwm")
        cpu0 = router.cpu_seconds()
        with PeakSampler(router.ps) as peak:
            injected = router.call("inject", start=0, count=size, body_size=body_size)
            reply = workers.call_all({"op": "wait", "job": "drain", "timeout": 600})[0]
            time.sleep(0.05)
        cpu1 = router.cpu_seconds()
        after = router.call("stats")
    drain = reply["last_ack"] - injected["started"]
    return {
        "drain_seconds": drain,
        "msgs_per_s": size / drain,
        "last_msg_seconds": reply["last"] - injected["started"],
        "first_message_ms": (reply["first"] - injected["started"]) * 1000,
        "inject_seconds": injected["seconds"],
        "rss_before": before["rss"],
        "rss_peak_sampled": peak.peak,
        "rss_peak_hwm": after["hwm"],
        "rss_after": after["rss"],
        "peak_over_before": max(peak.peak, after["hwm"] or 0) - before["rss"],
        "tasks": before["tasks"],
        "router_cpu_seconds": cpu1 - cpu0,
        "subscribe_seconds": sub["seconds"],
        "received": reply["received"],
        "ack_errors": reply["errors"],
        "delivered": after["statistics"]["messages_delivered"],
    }


def run(sizes: tuple[int, ...] = SIZES, repeats: int = 3) -> dict[str, Any]:
    runs = []
    for rep in range(repeats):
        for size in sizes:
            point: dict[str, Any] = {"size": size, "repeat": rep}
            for mode in MODES:
                log(f"burst: {mode} N={size} run {rep + 1}/{repeats}")
                point[mode] = burst_once(mode, size)
            point["drain_ratio"] = (point[PER_QUEUE_TASK]["drain_seconds"]
                                    / point[SINGLE_TASK]["drain_seconds"])
            point["peak_ratio"] = (point[PER_QUEUE_TASK]["peak_over_before"]
                                   / max(1, point[SINGLE_TASK]["peak_over_before"]))
            runs.append(point)
    summary = []
    for size in sizes:
        points = [p for p in runs if p["size"] == size]
        row: dict[str, Any] = {"size": size}
        for mode in MODES:
            row[mode] = {k: median(p[mode][k] for p in points) for k in (
                "drain_seconds", "msgs_per_s", "first_message_ms", "last_msg_seconds",
                "rss_before",
                "peak_over_before", "tasks", "router_cpu_seconds")}
        row["drain_ratio"] = median(p["drain_ratio"] for p in points)
        row["peak_ratio"] = median(p["peak_ratio"] for p in points)
        summary.append(row)
    write_results("burst", {"parameters": {"sizes": sizes, "repeats": repeats,
                                           "body_size": BODY_SIZE},
                            "summary": summary, "runs": runs}, table(summary))
    return {"summary": summary}


def table(summary: list[dict[str, Any]]) -> str:
    rows = []
    for r in summary:
        for mode in MODES:
            m = r[mode]
            rows.append([r["size"], mode, m["drain_seconds"], m["msgs_per_s"],
                         m["first_message_ms"], m["last_msg_seconds"],
                         m["peak_over_before"] / 2**20,
                         m["rss_before"] / 2**20, m["tasks"], m["router_cpu_seconds"]])
    ratios = "\n".join(
        f"- N={r['size']}: per-queue-task / single-task drain time {r['drain_ratio']:.2f}, "
        f"peak memory growth {r['peak_ratio']:.1f}x" for r in summary)
    return md_table(["queues", "mode", "drain s (last ACK answered)", "msg/s",
                     "first MSG ms", "last MSG s",
                     "peak RSS growth MiB", "RSS before MiB", "trio tasks",
                     "router CPU s"], rows) + "\n\n" + ratios
