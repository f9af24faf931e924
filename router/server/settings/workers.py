"""`workers = auto`, the default count of worker processes (docs/workers.md#the-default).

`auto` is the cores this process may use, from 3 on, capped at `MAX_AUTO_WORKERS`;
1 on a machine of one or two. On two cores a second worker costs more than it
gains (bench/RESULTS.md, "Worker processes": 1.07-1.84x the CPU per message, +131 MB,
for 0.55-0.70x the time of a SUB storm), and the supervisor and the workers would
share the two cores. The cap: the issue's projection and the reference's production
relays stop at 16 cores, every worker holds a link to every other (N x (N - 1)
sockets) and costs ~65 MB before any client; more is an operator's explicit choice.

The usable cores are the process's CPU affinity (`os.sched_getaffinity`), fewer if
the cgroup's CPU quota (cgroup v2 `cpu.max`, a container's `--cpus`) allows fewer.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

MIN_CORES_FOR_WORKERS = 3
MAX_AUTO_WORKERS = 16
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cores() -> int:
    """The cores this process may run on now: its affinity, within its CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cores, quota) if quota is not None else cores)


def cgroup_cpu_quota(path: Path = CGROUP_CPU_MAX) -> int | None:
    """The cgroup's quota in whole cores, rounded up (None: no quota, or no cgroup v2)."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, math.ceil(int(quota) / int(period)))
    except (ValueError, ZeroDivisionError):
        return None


def auto_workers(cores: int) -> int:
    """The count `auto` means on `cores` usable cores (module doc)."""
    if cores < MIN_CORES_FOR_WORKERS:
        return 1
    return min(cores, MAX_AUTO_WORKERS)


def auto_reason(cores: int) -> str:
    """Why `auto` is what it is here, for the start's log line."""
    workers = auto_workers(cores)
    if workers == 1:
        return (f"1 worker: {cores} usable core{'s' if cores > 1 else ''}, a second worker "
                f"pays off from {MIN_CORES_FOR_WORKERS} cores")
    if workers < cores:
        return f"{workers} workers: {cores} usable cores, at most {MAX_AUTO_WORKERS} by auto"
    return f"{workers} workers: one per usable core"
