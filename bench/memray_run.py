"""memray: a benchmark scenario with the router under memray (flame graph, peak, native frames).

    python -m bench memray [--quick] [--store memory|journal|sqlite] [--delivery MODE] [--out DIR]

The router process runs as `python -m memray run --native -m bench.router_process`
through the phases of `python -m bench memory` (queues, stored messages, idle
connections and subscriptions, traffic, a reconnection storm), without
tracemalloc. Written to a new scratch directory (printed; `--out` to choose),
never into bench/results:

- `router.bin`: memray's capture, for any memray reporter (`memray tree`,
  `memray table`, `memray summary`);
- `router-flamegraph.html`: where the memory was allocated at its peak (the
  default) with Python and native (C) frames: libsodium, OpenSSL, SQLite and
  the interpreter appear under the Python lines that called them;
- `router-leaks.html`: what was allocated and not freed by the end;
- `router-stats.json` and the printed summary: the peak and the allocation counts.

A running router (`smp-router serve`, any process) can be looked at without a
restart by attaching to it (memray injects itself with gdb or lldb, which must
be installed, and the caller must be allowed to ptrace the router: the same
user, and `kernel.yama.ptrace_scope` 0 or root):

    python -m memray attach --native -o /tmp/router.bin PID     # until Ctrl-C or exit
    python -m memray attach --duration 60 -o /tmp/router.bin PID
    python -m memray flamegraph /tmp/router.bin
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import harness, memory_profile
from .harness import log

NAME = "router"


def run(out: Path | None, *, quick: bool, store: str, mode: str) -> dict[str, Any]:
    out = out or Path(tempfile.mkdtemp(prefix="smp-bench-memray-"))
    out.mkdir(parents=True, exist_ok=True)
    capture = out / f"{NAME}.bin"
    capture.unlink(missing_ok=True)
    size = memory_profile.QUICK if quick else memory_profile.DEFAULT
    saved = harness.ROUTER_WRAPPER
    harness.ROUTER_WRAPPER = ["-m", "memray", "run", "--native", "-q", "-f",
                              "-o", str(capture)]
    try:
        log(f"memray: {store} store, {mode}, {size.as_dict()}")
        memory_profile.measure(store, mode, size, traced=False)
    finally:
        harness.ROUTER_WRAPPER = saved
    memray = [sys.executable, "-m", "memray"]
    flame, leaks = out / f"{NAME}-flamegraph.html", out / f"{NAME}-leaks.html"
    stats = out / f"{NAME}-stats.json"
    subprocess.run([*memray, "flamegraph", "-f", "-o", str(flame), str(capture)], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([*memray, "flamegraph", "--leaks", "-f", "-o", str(leaks), str(capture)],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*memray, "stats", "--json", "-f", "-o", str(stats), str(capture)],
                   check=True, stdout=subprocess.DEVNULL)
    figures = json.loads(stats.read_text())
    meta = figures.get("metadata", {})
    return {"directory": str(out), "capture": str(capture), "flamegraph": str(flame),
            "leaks": str(leaks), "stats": str(stats),
            "peak_memory": meta.get("peak_memory"),
            "total_allocations": figures.get("total_num_allocations"),
            "total_bytes_allocated": figures.get("total_bytes_allocated"),
            "native_traces": meta.get("has_native_traces"),
            "top_allocations": figures.get("top_allocations_by_size", [])[:5]}


def report(result: dict[str, Any]) -> str:
    peak = result["peak_memory"]
    lines = [f"peak memory: {peak / 2**20:,.1f} MiB" if peak else "peak memory: ?",
             f"allocations: {result['total_allocations']:,}, "
             f"{(result['total_bytes_allocated'] or 0) / 2**20:,.0f} MiB in total",
             f"native frames: {result['native_traces']}"]
    for top in result["top_allocations"]:
        lines.append(f"  {top.get('size', 0) / 2**20:,.1f} MiB  {top.get('location')}")
    lines += [f"flame graph: {result['flamegraph']}", f"leaks: {result['leaks']}",
              f"capture: {result['capture']}"]
    return "\n".join(lines)
