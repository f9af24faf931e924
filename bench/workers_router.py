"""`smp-router serve --workers N` for the worker benchmarks (docs/workers.md).

The bench queues (`bench.identities`) are written before the router starts, each
into its owner's share of the data directory (`DIR/worker-I/`, as
router/server/workers/layout.py lays it out), so every worker finds its own
queues as after a restart. The router runs from the command line, as an operator
runs it; its CPU and memory are read from outside and summed over the process and
its children (the supervisor and every worker; with N = 1 the one process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

from router.server.core.ownership import Ownership
from router.server.workers.layout import WORKERS_FILE, worker_dir
from store import open_stores
from store.interfaces import Message

from . import harness, identities

FILL_CHUNK = 5_000
START_TIMEOUT = 600.0
STOP_TIMEOUT = 30.0
HERE = Path(__file__).resolve().parent.parent
# The cores routers started from now on run on (`pin_cores`); None: any.
_router_cores: set[int] | None = None


def pin_cores(router: set[int], load: set[int]) -> None:
    """Routers started from now on run on the cores `router`, this process and the load
    processes it starts from now on (they inherit it) on `load`: each side's CPU per
    message without the other's taking its cores."""
    global _router_cores
    available = os.sched_getaffinity(0)
    for cores in (router, load):
        if not cores or not cores <= available:
            raise harness.BenchError(f"cores {sorted(cores)}: this machine has "
                                     f"{sorted(available)}")
    _router_cores = set(router)
    os.sched_setaffinity(0, load)


def pinning() -> str | None:
    """`pin_cores`'s choice, ROUTER:LOAD, for a bench's parameters; None if none."""
    if _router_cores is None:
        return None
    return ":".join(",".join(map(str, sorted(cores)))
                    for cores in (_router_cores, os.sched_getaffinity(0)))


def owner(index: int, workers: int) -> int:
    """The worker owning bench queue `index` (both its ids name it)."""
    return Ownership(workers).owner_of(identities.recipient_id(index))


def share_dir(data_dir: Path, workers: int, index: int) -> Path:
    return data_dir if workers == 1 else worker_dir(data_dir, index)


async def fill(kind: str, data_dir: Path, queues: Iterable[int], workers: int,
               messages_every: int = 0) -> dict[int, int]:
    """Write the bench queues `queues` (and a message in every `messages_every`-th)
    into their owners' shares of a fresh `data_dir`; the queues per worker."""
    by_owner: dict[int, list[int]] = {w: [] for w in range(workers)}
    for i in queues:
        by_owner[owner(i, workers)].append(i)
    now = int(time.time())
    for w, indices in by_owner.items():
        async with open_stores(kind, share_dir(data_dir, workers, w), fsync="never") as stores:
            for first in range(0, len(indices), FILL_CHUNK):
                chunk = indices[first : first + FILL_CHUNK]
                records = [identities.queue_record(i, secured=True) for i in chunk]
                msgs = [(identities.recipient_id(i),
                         Message(identities.recipient_id(i)[:12] + os.urandom(12), now, b"F",
                                 b"x" * 64))
                        for i in chunk if messages_every and i % messages_every == 0]
                if stores.bulk_import is not None:
                    await stores.bulk_import(records, msgs)
                    continue
                for rec in records:
                    error = await stores.queues.add_queue(rec)
                    if error is not None:
                        raise harness.BenchError(f"{kind}: queue {rec.recipient_id!r}: {error}")
                for rid, msg in msgs:
                    await stores.messages.write_message(rid, msg, 128)
    if workers > 1:
        (data_dir / WORKERS_FILE).write_text(f"{workers}\n")
    return {w: len(indices) for w, indices in by_owner.items()}


def _pinned(cores: set[int] | None) -> Callable[[], None] | None:
    if cores is None:
        return None
    return lambda: os.sched_setaffinity(0, cores)


class CliRouter:
    """`python -m router.server serve --workers N` on 127.0.0.1, started on a filled
    data directory; `address` is its smp:// (TLS) address, `url` its WebSocket URL
    with the key hash (what bench.loadgen connects to). `tree`: the checkout whose
    router runs (another one's, to compare; the load is this checkout's)."""

    def __init__(self, workers: int, kind: str, data_dir: Path, *,
                 max_connections: int = 4_096, extra: Sequence[str] = (),
                 tree: Path = HERE) -> None:
        self.workers = workers
        command = [sys.executable, "-m", "router.server", "serve", "--host", "127.0.0.1",
                   "--port", "0", "--store", kind, "--data-dir", str(data_dir),
                   "--workers", str(workers), "--no-stats-log", "--log-level", "warning",
                   "--max-connections", str(max_connections),
                   "--max-connections-per-address", str(max_connections), *extra]
        # Its log (warnings only) goes to a file beside the data directory.
        self.log = data_dir.with_name(f"{data_dir.name}.log")
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log,
                                         text=True, cwd=tree,
                                         env={**os.environ, "PYTHONPATH": str(tree)},
                                         preexec_fn=_pinned(_router_cores))
        assert self.proc.stdout is not None
        line = harness._readline(self.proc.stdout, START_TIMEOUT)
        if "smp://" not in line:
            self.close()
            raise harness.BenchError(f"router with {workers} workers did not start: "
                                     f"{line or self.log.read_text()[-500:]!r}")
        self.address = harness.smp_address(line)
        key_hash = self.address.removeprefix("smp://").split("@")[0]
        url = line.split(" and ")[-1].strip()
        self.url = url.replace("ws://", f"ws://{key_hash}@", 1)
        self.ps = psutil.Process(self.proc.pid)

    def processes(self) -> list[psutil.Process]:
        """The supervisor and its workers (N = 1: the router's one process)."""
        try:
            return [self.ps, *self.ps.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_seconds(self) -> float:
        """User and system CPU of every process of the router, summed."""
        total = 0.0
        for p in self.processes():
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system
        return total

    def rss(self) -> int:
        total = 0
        for p in self.processes():
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return total

    def rss_by_process(self) -> list[int]:
        return [p.memory_info().rss for p in self.processes()]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                for p in self.processes()[::-1]:
                    p.kill()
                self.proc.wait()

    def __enter__(self) -> CliRouter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
