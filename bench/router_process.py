"""The router under test, in a process of its own, with a control pipe for the benchmarks.

    python -m bench.router_process --delivery single-task [--tracemalloc]

runs `serve_router` on 127.0.0.1 (port 0 unless given) exactly as
`smp-router serve` does, and prints the same one line with ``ws://HOST:PORT``
and ``smp://KEYHASH@HOST:PORT``. It then reads one JSON request per line on
stdin and answers each with one JSON line on stdout. The control requests
reach into the running router, which the plain CLI cannot offer:

- ``{"op": "preload", "start": i, "count": n, "secured": true}``: queue
  records for the queues `i .. i+n-1` of `bench.identities`, straight into
  the queue store (no NEW, no key generation);
- ``{"op": "inject", "start": i, "count": n, "body_size": b}``: one message
  into each of those queues, in one scheduler turn, through the same store
  write and delivery trigger a SEND uses once it has been verified;
- ``{"op": "stats", "gc": true}``: RSS, the number of trio tasks, the
  router's statistics, tracemalloc figures, gc pauses and the loop's lag
  (`bench.looplag`) seen so far;
- ``{"op": "gc_freeze"}``, ``{"op": "trace_reset_peak"}``,
  ``{"op": "profile_start"}``, ``{"op": "profile_stop", "path": p}``,
  ``{"op": "quit"}``.

With ``BENCH_GC_INSPECT=1`` in its environment, the process also records, for
the longest collection of each generation, how many objects it walked and of
which types (a pass over the young generations before each collection: slow,
for finding out what a pause is made of, not for timing).

Nothing here changes how the router serves clients; the requests run as one
more task in the router's own Trio loop.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import secrets
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil
import trio

from router.server import RouterConfig, RouterInfo, serve_router
from router.server.cli.serve import ready_line
from router.server.core.commands import ID_SIZE
from router.server.core.tasks import run_task_count
from router.server.settings.config import SINGLE_TASK, STORE_KINDS
from store.interfaces import Message, WriteResult

from . import identities
from .looplag import LoopLag

DEFAULTS = RouterConfig()  # the router's own defaults, for the options it shares
PRELOAD_CHUNK = 500  # queues added at once into a durable store
# Most load processes connect from 127.0.0.1, thousands of connections each: the
# router's cap per address is lifted (absent from trees from before it).
_ONE_ADDRESS_MAY_HOLD_EVERY_CONNECTION = (
    {"max_connections_per_address": 1 << 30}
    if "max_connections_per_address" in {f.name for f in dataclasses.fields(RouterConfig)}
    else {}
)


def _young_summary(generation: int) -> list[Any]:
    """How many objects a collection of `generation` walks, and its largest container."""
    if generation == 2:
        return [None]
    from collections import Counter

    kinds: Counter[str] = Counter()
    for g in range(generation + 1):
        kinds.update(type(o).__name__ for o in gc.get_objects(generation=g))
    return [sum(kinds.values()), kinds.most_common(6)]


class GcPauses:
    """Durations of the collector's runs, by generation, via `gc.callbacks`: wall
    clock (what clients wait) and the thread's CPU time (the collector's own work,
    which a busy machine does not stretch)."""

    def __init__(self) -> None:
        self._started = 0.0
        self._started_cpu = 0.0
        self._young: Any = None
        self.inspect = os.environ.get("BENCH_GC_INSPECT") == "1"
        self.reset()
        gc.callbacks.append(self._callback)

    def reset(self) -> None:
        self.count = [0, 0, 0]
        self.max_ms = [0.0, 0.0, 0.0]
        self.max_cpu_ms = [0.0, 0.0, 0.0]
        self.total_ms = [0.0, 0.0, 0.0]
        self.collected_at_max = [0, 0, 0]  # objects the longest pass of each generation freed
        self.young_at_max: list[Any] = [None, None, None]  # what it walked (with `inspect`)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._young = _young_summary(info["generation"]) if self.inspect else None
            self._started = time.perf_counter()
            self._started_cpu = time.thread_time()
            return
        ms = (time.perf_counter() - self._started) * 1000
        cpu_ms = (time.thread_time() - self._started_cpu) * 1000
        g = info["generation"]
        self.count[g] += 1
        self.total_ms[g] += ms
        self.max_ms[g] = max(self.max_ms[g], ms)
        if cpu_ms > self.max_cpu_ms[g]:
            self.max_cpu_ms[g] = cpu_ms
            self.collected_at_max[g] = info["collected"]
            self.young_at_max[g] = self._young

    def report(self) -> dict[str, list]:
        return {"count": self.count, "max_ms": self.max_ms, "max_cpu_ms": self.max_cpu_ms,
                "total_ms": self.total_ms, "collected_at_max": self.collected_at_max,
                "young_at_max": self.young_at_max}


class Control:
    def __init__(self, info: RouterInfo, args: argparse.Namespace) -> None:
        self.info = info
        self.router = info.router
        self.args = args
        self.process = psutil.Process()
        self.gc_pauses = GcPauses()
        self.loop_lag = LoopLag()
        self.profiler: Any = None
        self.gc_policy: Any = None

    async def serve(self) -> None:
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        buffer = b""
        while True:
            chunk = await stdin.receive_some(65536)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                if request["op"] == "quit":
                    _answer({"ok": True})
                    return
                try:
                    reply = await getattr(self, "op_" + request["op"])(request)
                except Exception as e:  # noqa: BLE001 - reported to the benchmark, not raised
                    reply = {"error": repr(e)}
                _answer(reply)

    async def op_preload(self, req: dict) -> dict:
        queues = self.router.queues
        add = getattr(queues, "add_queue_nowait", None)
        started = time.perf_counter()
        errors: list[str] = []
        if add is None:  # a durable store: many at once, so that its commits group them
            async def add_one(i: int) -> None:
                record = identities.queue_record(i, secured=req.get("secured", True))
                error = await queues.add_queue(record)
                if error is not None:
                    errors.append(f"queue {i}: {error}")

            end = req["start"] + req["count"]
            for first in range(req["start"], end, PRELOAD_CHUNK):
                async with trio.open_nursery() as nursery:
                    for i in range(first, min(end, first + PRELOAD_CHUNK)):
                        nursery.start_soon(add_one, i)
            return {"error": errors[0]} if errors else {
                "ok": True, "seconds": time.perf_counter() - started}
        for i in range(req["start"], req["start"] + req["count"]):
            record = identities.queue_record(i, secured=req.get("secured", True))
            error = add(record)
            if error is not None:
                return {"error": f"queue {i}: {error}"}
            if i % 5000 == 0:
                await trio.lowlevel.checkpoint()
        return {"ok": True, "seconds": time.perf_counter() - started}

    async def op_inject(self, req: dict) -> dict:
        """One message per queue, all before the router's loop runs anything else (a
        durable store: written PRELOAD_CHUNK at a time, as concurrent SENDs would be)."""
        router = self.router
        messages = router.messages
        write = getattr(messages, "write_message_nowait", None)
        body_size = req.get("body_size", 256)
        body = b"x" * body_size
        # A store keeps each message's own body: one shared body object would
        # make stored messages look free of their bodies.
        distinct = req.get("distinct_bodies", False)
        ts = int(time.time())
        quota = router.config.quota
        box_key = identities.keys()["box_key"]  # every bench queue's rcv_dh_secret
        into_empty = 0
        started_wall = time.monotonic()
        started = time.perf_counter()
        def stored(rid: bytes, msg: Message, result: WriteResult) -> None:
            nonlocal into_empty
            router.counters.messages_sent += 1
            if result is WriteResult.STORED_INTO_EMPTY:
                into_empty += 1
                router.deliverer.stored_into_empty(rid, msg, box_key)

        def message() -> Message:
            return Message(secrets.token_bytes(ID_SIZE), ts, b"F",
                           bytes(body_size) if distinct else body)

        end = req["start"] + req["count"]
        if write is not None:
            for i in range(req["start"], end):
                rid, msg = identities.recipient_id(i), message()
                stored(rid, msg, write(rid, msg, quota))
        else:  # a durable store: many at once, so that its commits group them
            async def write_one(i: int) -> None:
                rid, msg = identities.recipient_id(i), message()
                stored(rid, msg, await messages.write_message(rid, msg, quota))

            for first in range(req["start"], end, PRELOAD_CHUNK):
                async with trio.open_nursery() as nursery:
                    for i in range(first, min(end, first + PRELOAD_CHUNK)):
                        nursery.start_soon(write_one, i)
        return {
            "ok": True, "into_empty": into_empty, "started": started_wall,
            "seconds": time.perf_counter() - started,
        }

    async def op_stats(self, req: dict) -> dict:
        gc_ms = None
        if req.get("gc"):
            started = time.perf_counter()
            gc.collect()
            gc_ms = (time.perf_counter() - started) * 1000
        mem = self.process.memory_info()
        stats = self.router.statistics()
        reply: dict[str, Any] = {
            "rss": mem.rss,
            "hwm": _vm_hwm(),
            "tasks": run_task_count(),
            "connection_tasks": sum(self.router.connection_task_counts().values()),
            "statistics": asdict(stats),
            "gc_pauses": self.gc_pauses.report(),
            "loop_lag": self.loop_lag.report(),
            "full_gc_ms": gc_ms,
            "gc_objects": len(gc.get_objects()) if req.get("objects") else None,
            "messages_stored": _message_count(self.router.messages),
        }
        if tracemalloc.is_tracing():
            current, peak = tracemalloc.get_traced_memory()
            reply["traced"] = current
            reply["traced_peak"] = peak
        return reply

    async def op_census(self, req: dict) -> dict:
        """Who is subscribed: registry entries, the connections' own maps, and with
        `verify` whether every queue a connection holds is registered to it."""
        router = self.router
        subscriptions = router.subscriptions
        connections = list(router.connections.values())
        subscribers = [s for c in connections if (s := subscriptions.subscriber_for(c))]
        reply: dict[str, Any] = {
            "connections": len(connections),
            "subscriptions": len(subscriptions),
            "connection_subscriptions": sum(len(s.queues) for s in subscribers),
            "displaced": router.counters.subscriptions_displaced,
            "pending_deliveries": subscriptions.pending_deliveries(),
            "at": time.monotonic(),
        }
        listener = self.info.listener
        if listener is not None:
            reply["listener"] = {"open": listener.open_connections,
                                 "pending": listener.pending, "refused": listener.refused}
        if req.get("verify"):
            reply["one_subscriber_each"] = all(
                subscriptions.subscriber_of(rid) is s for s in subscribers for rid in s.queues
            )
        return reply

    async def op_gc_policy(self, req: dict) -> dict:
        policy = self.gc_policy
        return {"running": policy is not None,
                **(policy.report() if policy is not None else {})}

    async def op_full_collection(self, req: dict) -> dict:
        """Unfreeze, collect everything, freeze again (the policy's quiet-time pass)."""
        started = time.perf_counter()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        return {"ms": (time.perf_counter() - started) * 1000, "collected": collected,
                "frozen": gc.get_freeze_count()}

    async def op_reset_hwm(self, req: dict) -> dict:
        """Restart the kernel's peak-RSS counter (VmHWM), the gc pause and loop lag records."""
        self.gc_pauses.reset()
        self.loop_lag.reset()
        try:
            with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
                f.write("5")
        except OSError as e:
            return {"ok": False, "error": str(e)}
        return {"ok": True}

    async def op_traced(self, req: dict) -> dict:
        """Live Python bytes, tracemalloc's own work left out (module `_traced_snapshot`)."""
        if not tracemalloc.is_tracing():
            return {"error": "start the router with --tracemalloc"}
        if req.get("gc", True):
            gc.collect()
        snapshot = _traced_snapshot()
        total = sum(t.size for t in snapshot.traces)
        count = len(snapshot.traces)
        del snapshot
        current, peak = tracemalloc.get_traced_memory()
        return {"traced": total, "blocks": count, "traced_unfiltered": current,
                "traced_peak": peak, "tracemalloc_overhead": tracemalloc.get_tracemalloc_memory()}

    async def op_components(self, req: dict) -> dict:
        """Bytes reachable from each part of the router (`bench.census.components`)."""
        from . import census

        gc.collect()
        return await census.components(self.router, top_types=req.get("top_types", 8))

    async def op_types(self, req: dict) -> dict:
        """Objects and bytes by type, frozen objects included (`bench.census.type_census`)."""
        from . import census

        return census.type_census(top=req.get("top", 25))

    async def op_allocator(self, req: dict) -> dict:
        """malloc's and pymalloc's in-use and free bytes, and RSS, after a full gc."""
        from . import census

        gc.collect()
        return {"rss": self.process.memory_info().rss, **census.allocator()}

    async def op_sites(self, req: dict) -> dict:
        """Growth in live memory by allocation site since the previous call: each site
        named by its innermost frame and by the innermost frame of the router's own code
        (needs --tracemalloc-frames of a dozen or more to reach it)."""
        if not tracemalloc.is_tracing():
            return {"error": "start the router with --tracemalloc"}
        gc.collect()
        snapshot = _traced_snapshot()
        previous, self.sites_snapshot = getattr(self, "sites_snapshot", None), snapshot
        if previous is None:
            return {"ok": True, "sites": []}
        grouped: dict[tuple[str, str], list[int]] = {}
        for stat in snapshot.compare_to(previous, "traceback"):
            frames = stat.traceback  # oldest frame first
            key = (_router_frame(frames), _frame(frames[-1] if len(frames) else None))
            entry = grouped.setdefault(key, [0, 0])
            entry[0] += stat.size_diff
            entry[1] += stat.count_diff
        ranked = sorted(grouped.items(), key=lambda kv: -abs(kv[1][0]))
        return {"ok": True, "size_diff": sum(size for size, _ in grouped.values()), "sites": [
            {"router_line": rl, "allocated_at": at, "size_diff": size, "count_diff": count}
            for (rl, at), (size, count) in ranked[: req.get("limit", 30)]]}

    async def op_snapshot(self, req: dict) -> dict:
        """The biggest changes in live memory by source line since the previous call."""
        if not tracemalloc.is_tracing():
            return {"error": "start the router with --tracemalloc"}
        gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        previous, self.snapshot = getattr(self, "snapshot", None), snapshot
        if previous is None:
            return {"ok": True, "top": []}
        stats = snapshot.compare_to(previous, req.get("group_by", "lineno"))
        top = [
            {"where": " <- ".join(f"{f.filename}:{f.lineno}" for f in reversed(s.traceback)),
             "size_diff": s.size_diff, "count_diff": s.count_diff}
            for s in stats[: req.get("limit", 20)]
        ]
        return {"ok": True, "top": top}

    async def op_malloc_trim(self, req: dict) -> dict:
        """Give free C heap memory back to the system (glibc), then report RSS."""
        import ctypes

        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError as e:
            return {"error": str(e)}
        return {"ok": True, "rss": self.process.memory_info().rss}

    async def op_gc_freeze(self, req: dict) -> dict:
        gc.collect()
        gc.freeze()
        return {"ok": True, "frozen": gc.get_freeze_count()}

    async def op_trace_reset_peak(self, req: dict) -> dict:
        if tracemalloc.is_tracing():
            tracemalloc.reset_peak()
        return {"ok": True}

    async def op_profile_start(self, req: dict) -> dict:
        from pyinstrument import Profiler

        self.profiler = Profiler(interval=req.get("interval", 0.001), async_mode="disabled")
        self.profiler.start()
        return {"ok": True}

    async def op_profile_stop(self, req: dict) -> dict:
        profiler, self.profiler = self.profiler, None
        if profiler is None:
            return {"error": "no profile running"}
        profiler.stop()
        path = req["path"]
        with open(path + ".txt", "w") as f:
            f.write(profiler.output_text(unicode=True, color=False, show_all=False))
        with open(path + ".html", "w") as f:
            f.write(profiler.output_html())
        return {"ok": True, "text": path + ".txt", "html": path + ".html"}


_OWN_FILES = (tracemalloc.__file__, __import__("linecache").__file__)
_REPO = str(Path(__file__).resolve().parent.parent) + os.sep
_ROUTER_DIRS = tuple(_REPO + d + os.sep for d in ("router", "store"))


def _traced_snapshot() -> tracemalloc.Snapshot:
    """A snapshot without tracemalloc's own allocations (its snapshots, and the source
    lines `linecache` reads for them): what the router holds."""
    return tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, name, all_frames=True) for name in _OWN_FILES])


def _frame(frame: tracemalloc.Frame | None) -> str:
    if frame is None:
        return "?"
    return f"{frame.filename.removeprefix(_REPO).split('site-packages/')[-1]}:{frame.lineno}"


def _router_frame(traceback: tracemalloc.Traceback) -> str:
    """The innermost frame in the router's own code (router/, store/), or "-"."""
    for frame in reversed(traceback):  # most recent first
        if frame.filename.startswith(_ROUTER_DIRS):
            return _frame(frame)
    return "-"


def _message_count(messages: object) -> int | None:
    count = getattr(messages, "message_count", None)
    return count() if count is not None else None


def _vm_hwm() -> int | None:
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _answer(reply: dict) -> None:
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


async def _write_snapshot(data_dir: Path, count: int) -> None:
    """A memory-store snapshot of the bench queues 0..count-1, for the router to load."""
    from store import open_stores

    async with open_stores("memory", data_dir) as stores:
        for i in range(count):
            stores.queues.add_queue_nowait(identities.queue_record(i, secured=True))


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="smp-bench-") as tmp:
        data_dir = None
        if args.snapshot_queues:
            data_dir = Path(tmp)
            # In a process of its own: the memory that writing takes must not stay
            # in the router's RSS.
            subprocess.run([sys.executable, "-m", "bench.router_process", "--write-snapshot",
                            str(data_dir), "--snapshot-queues", str(args.snapshot_queues)],
                           check=True)
        if args.store != "memory":
            data_dir = Path(tmp) / "data"
        config = RouterConfig(
            host=args.host, port=args.port, store=args.store, data_dir=data_dir,
            fsync=args.fsync,
            delivery=args.delivery, quota=args.quota, send_queue_size=args.send_queue_size,
            **_ONE_ADDRESS_MAY_HOLD_EVERY_CONNECTION,
        )
        async with trio.open_nursery() as nursery:
            info: RouterInfo = await nursery.start(serve_router, config)
            policy = _as_the_cli_does_once_loaded(nursery, info, args)
            print(ready_line(info), flush=True)
            control = Control(info, args)
            control.gc_policy = policy
            nursery.start_soon(control.loop_lag.run)
            await control.serve()
            nursery.cancel_scope.cancel()


def _as_the_cli_does_once_loaded(
    nursery: trio.Nursery, info: RouterInfo, args: argparse.Namespace
) -> Any:
    """What `smp-router serve` runs between starting the router and printing its line;
    returns its collector policy (None if the tree has none or it is turned off)."""
    try:
        from router.server.cli import serve as cli
    except ImportError:  # a tree from before the command line was a folder
        from router.server import cli  # type: ignore[no-redef]

    freeze = getattr(cli, "freeze_loaded_state", None)  # absent from older trees
    if freeze is not None:
        freeze()
    start_policy = getattr(cli, "start_gc_policy", None)
    if start_policy is None or args.no_gc_policy:
        return None
    return start_policy(nursery, info.router)


def _raise_nofile(limit: int) -> None:
    """Raise RLIMIT_NOFILE (the hard limit too: only root may) before the listener
    sizes its connection cap from it."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, max(limit, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.router_process")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delivery", default=SINGLE_TASK)
    parser.add_argument("--store", choices=STORE_KINDS, default="memory",
                        help="store kind; journal and sqlite in a temporary data directory")
    parser.add_argument("--fsync", default=DEFAULTS.fsync.value,
                        help="durable stores: when to force writes to disk")
    parser.add_argument("--quota", type=int, default=DEFAULTS.quota)
    parser.add_argument("--send-queue-size", type=int, default=DEFAULTS.send_queue_size)
    parser.add_argument("--snapshot-queues", type=int, default=0,
                        help="start from a memory-store snapshot holding this many queues")
    parser.add_argument("--write-snapshot", type=Path,
                        help="only write the snapshot of --snapshot-queues into this directory")
    parser.add_argument("--nofile", type=int, default=0,
                        help="raise RLIMIT_NOFILE to this many descriptors first")
    parser.add_argument("--no-gc-policy", action="store_true",
                        help="do not run the collector policy `smp-router serve` runs")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--tracemalloc-frames", type=int, default=1)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    if args.write_snapshot:
        trio.run(_write_snapshot, args.write_snapshot, args.snapshot_queues)
        return
    if args.nofile:
        _raise_nofile(args.nofile)
    if args.tracemalloc:
        tracemalloc.start(args.tracemalloc_frames)
    trio.run(_main, args)


if __name__ == "__main__":
    main()
