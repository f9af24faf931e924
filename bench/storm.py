"""storm: a reconnect storm on every store kind, side by side in one run.

    python -m bench storm [--queues 200000] [--connections 2000] [--kinds memory,journal,sqlite]
                          [--messages-every K] [--root KIND=DIR] [--nice N] [--quick]
                          [--out DIR]

Every client of a relay subscribes its queues again at once, as after a restart or a
network blip. For each store kind: `--queues` queues (`bench.identities`) are written
into a fresh data directory, `smp-router serve` starts on it (so the SQLite store's
record cache is cold, as after a restart), and a load process opens `--connections`
connections (SMP over TLS, clients at v10) and signs every connection's SUB blocks
(as many SUBs as a block holds, ~100) before the clock starts. On "go" every
connection sends its blocks and reads every answer. Measured:

- SUBs/s: the SUBs over the seconds from "go" to the last answer (in the load process);
- the router's CPU per SUB (user + system, from outside, over the same span);
- another client's PING round trips during the storm (one every `PING_INTERVAL`,
  sent on a clock), p50 and p99;
- the router's RSS with the connections open before the storm and after it, and
  their difference per subscription;
- the same PINGs and passes while the load's connections close and the router takes
  them apart (until `LEAVING_AFTER` s after the load process exits);
- where a PING waited: a `Probe` in the pinger's loop and one in the router's
  (`python -m bench.storm router ...` runs `smp-router` with it) record how late
  each loop woke, every gc pass and every long pass of the Trio scheduler with its
  CPU time, task steps and longest step. A pass whose wall time far exceeds its
  CPU time waited for a CPU (the machine's other work), one of many steps is a
  crowd of tasks, one long step a task that did not yield. The PINGs stop at the
  storm's last answer, before the load's connections close.

`--nice N` sets the router's and the pinger's priority (negative, as root: ahead
of the machine's other work, to tell the router's own delays from a shared
machine's); the load stays at nice 19.

`--messages-every K` puts a message in every K-th queue (0: none, as the issue's
storm): those SUBs answer with their MSG. `--root KIND=DIR` adds a run of store KIND
with the router of another source tree DIR (e.g. the commit before, to compare in
one run; its store files must be this tree's format). The kinds are a list (`KINDS`): a new
store kind is one more entry. `--quick` runs a small storm into a scratch directory.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import trio

from bench.one_process import one_process
from router.client import MessageEvent, SMPClient, UndecryptedMessageEvent, _connection, open_client
from router.protocol.block import BatchPacker
from router.protocol.types import OK, SOK, SUB
from store import open_stores
from store.interfaces import Message, NotifierCreds, Party, QueueLinkData, QueueRecord
from store.sqlite.database import DB_FILE, open_sqlite_database
from store.sqlite.queues import DEFAULT_CACHE_SIZE, open_queue_store

from . import harness, identities
from .fairness import PING_INTERVAL, _lines, _ping_ms, _stop, summary_ms
from .looplag import LoopLag

KINDS = ["memory", "journal", "sqlite"]
QUEUES, CONNECTIONS = 200_000, 2_000
QUICK_QUEUES, QUICK_CONNECTIONS = 400, 8
CACHE_RECORDS, QUICK_CACHE_RECORDS = 20_000, 2_000  # records cached to weigh one
CONNECT_AT_ONCE = 64  # handshakes in flight (the router's per-address cap is 128)
FILL_CHUNK = 5_000
START_TIMEOUT = 600.0
CLIENT_VERSIONS = (6, 10)  # the clients: v10
_LOAD_ENV = "STORM_LOAD_NICE"  # 0: the load process runs at the runner's priority
QUIET_PINGS = 50  # PINGs before the storm: what the machine itself adds
LEAVING_AFTER = 1.0  # seconds of PINGs after the load process has exited


# --- the store, filled before the router starts -----------------------------------------


async def _fill(kind: str, data_dir: Path, queues: int, messages_every: int,
                **settings: Any) -> None:
    """The bench queues 0..queues-1 (and a message in every `messages_every`-th) in a
    `kind` store in `data_dir`, written through the store API as a migration would;
    `settings`: the kind's own (a database's URL and schema)."""
    now = int(time.time())

    def message(i: int) -> Message:
        return Message(identities.recipient_id(i)[:12] + os.urandom(12), now, b"F", b"x" * 64)

    async with open_stores(kind, data_dir, fsync="never", **settings) as stores:
        for first in range(0, queues, FILL_CHUNK):
            chunk = range(first, min(queues, first + FILL_CHUNK))
            records = [identities.queue_record(i, secured=True) for i in chunk]
            msgs = [(identities.recipient_id(i), message(i)) for i in chunk
                    if messages_every and i % messages_every == 0]
            if stores.bulk_import is not None:
                await stores.bulk_import(records, msgs)
                continue
            for rec in records:
                error = await stores.queues.add_queue(rec)
                if error is not None:
                    raise harness.BenchError(f"{kind}: queue {rec.recipient_id!r}: {error}")
            for rid, msg in msgs:
                await stores.messages.write_message(rid, msg, 128)


# --- what a cached record costs --------------------------------------------------------


def _full_record(i: int) -> QueueRecord:
    """A record with every optional part: a notifier, a link and both services."""
    rec = identities.queue_record(i, secured=True)
    return replace(rec, notifier=NotifierCreds(os.urandom(24), os.urandom(44), os.urandom(32)),
                   link_id=os.urandom(24), rcv_service_id=os.urandom(24),
                   ntf_service_id=os.urandom(24), queue_mode=b"M")


async def _cache_cost(count: int, make: Any, tmp: Path) -> float:
    """Bytes of Python memory (tracemalloc) per record the SQLite store's record cache
    holds, cache and indexes included, filled as a storm fills it (`get_queues`)."""
    records = [make(i) for i in range(count)]
    async with open_sqlite_database(tmp / DB_FILE, fsync="never") as db:
        store = await open_queue_store(db, cache_size=count)
        links = [(r.recipient_id, QueueLinkData(r.link_id, b"f" * 100, b"u" * 100))
                 for r in records if r.link_id is not None]
        await store.bulk_import(records, links=links)  # indexes the ids, caches nothing
        ids = [r.recipient_id for r in records]
        del records
        await store.get_queues(Party.RECIPIENT, ids[:1])  # the worker thread, started
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for first in range(0, count, 100):
            await store.get_queues(Party.RECIPIENT, ids[first : first + 100])
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert store.cached_count() == count
        await store.close()
    return (after - before) / count


async def cache_costs(count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="smp-bench-cache-") as tmp:
        plain = await _cache_cost(count, lambda i: identities.queue_record(i, secured=True),
                                  Path(tmp) / "plain")
        full = await _cache_cost(count, _full_record, Path(tmp) / "full")
    return {"records": count, "plain_bytes": plain, "full_bytes": full,
            "default_cache_size": DEFAULT_CACHE_SIZE,
            "default_cache_mb": DEFAULT_CACHE_SIZE * full / 2**20}


# --- where a PING waits: the loops' lag, inside the router and in the pinger -----------


class Probe(LoopLag):
    """`LoopLag` with a timeline: every wake later than `LATE_MS` and every gc pass of
    `GC_MS` or more, stamped with the wall clock, so that the figures of the storm's
    span alone can be picked out of a process that lived longer (`window`)."""

    LATE_MS, GC_MS = 2.0, 1.0

    def __init__(self) -> None:
        super().__init__(interval=0.005, stall=0.05)
        self.late: list[tuple[float, float]] = []
        self.gc: list[tuple[float, float, int, float]] = []  # (at, ms, generation, CPU ms)
        self._gc_started = self._gc_started_cpu = 0.0
        gc.callbacks.append(self._gc_pass)

    async def run(self) -> None:
        passes = Passes()
        trio.lowlevel.add_instrument(passes)
        self.passes = passes.long
        try:
            await self._run()
        finally:
            trio.lowlevel.remove_instrument(passes)

    def _woke(self, now: float, late_ms: float) -> None:
        super()._woke(now, late_ms)
        if late_ms > self.LATE_MS:
            self.late.append((time.time(), late_ms))

    def _gc_pass(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started, self._gc_started_cpu = time.perf_counter(), time.thread_time()
            return
        ms = (time.perf_counter() - self._gc_started) * 1000
        if ms >= self.GC_MS:
            self.gc.append((time.time(), ms, info["generation"],
                            (time.thread_time() - self._gc_started_cpu) * 1000))

    async def _run(self) -> None:
        try:
            await super().run()
        finally:
            gc.callbacks.remove(self._gc_pass)

    def timeline(self) -> dict[str, Any]:
        return {"late": self.late, "gc": self.gc, "stalls": self.stalls,
                "passes": getattr(self, "passes", [])}


class Passes(trio.abc.Instrument):
    """Every pass of the Trio scheduler (from the end of one wait for I/O to the start
    of the next) longer than `LONG_MS`: its wall time, the thread's CPU time (less
    when the process waited for a CPU), the task steps it ran, and its longest step
    with the task's name. Many short steps is a crowd; one long one, a task that
    does not yield."""

    LONG_MS = 10.0

    def __init__(self) -> None:
        self.long: list[tuple[float, float, float, int, float, str]] = []
        self._began = self._began_cpu = self._step_began = 0.0
        self._steps, self._longest, self._longest_name = 0, 0.0, ""

    def after_io_wait(self, timeout: float) -> None:
        self._began, self._began_cpu = time.perf_counter(), time.thread_time()
        self._steps, self._longest = 0, 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step_began = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        ms = (time.perf_counter() - self._step_began) * 1000
        self._steps += 1
        if ms > self._longest:
            self._longest, self._longest_name = ms, task.name

    def before_io_wait(self, timeout: float) -> None:
        ms = (time.perf_counter() - self._began) * 1000
        if ms > self.LONG_MS and self._began:
            self.long.append((time.time(), ms, (time.thread_time() - self._began_cpu) * 1000,
                              self._steps, self._longest, self._longest_name))


def window(timeline: dict[str, Any], began: float, ended: float) -> dict[str, Any]:
    """A `Probe`'s figures between the wall-clock instants `began` and `ended`: the
    loop's longest lateness and its lateness in all (what every task of the process
    waited on top of its own work), and the longest gc pass."""
    late = [ms for at, ms in timeline["late"] if began <= at <= ended]
    collections = [ms for at, ms, *_ in timeline["gc"] if began <= at <= ended]
    passes = [p for p in timeline.get("passes", []) if began <= p[0] <= ended]
    longest = max(passes, key=lambda p: p[1], default=None)
    return {"long_passes": len(passes), "long_passes_ms": sum(p[1] for p in passes),
            "long_passes_cpu_ms": sum(p[2] for p in passes),
            "longest_pass": longest,
            "longest_step": max(passes, key=lambda p: p[4], default=None),
            "lag_max_ms": max(late, default=0.0), "lag_total_ms": sum(late),
            "lag_over_20ms": sum(1 for ms in late if ms > 20),
            "gc_max_ms": max(collections, default=0.0), "gc_total_ms": sum(collections),
            "gc_cpu_max_ms": max((cpu for at, _, _, cpu in timeline["gc"]
                                  if began <= at <= ended), default=0.0),
            "gc_by_generation": [  # (passes of 1 ms or more, their ms, the longest)
                [len(g), sum(g), max(g, default=0.0)] for g in (
                    [ms for at, ms, gen, _ in timeline["gc"] if gen == n and began <= at <= ended]
                    for n in range(3))],
            "pass_cpu_max_ms": max((p[2] for p in passes), default=0.0),
            "passes_over_20ms_cpu": sum(1 for p in passes if p[2] > 20)}


def probed_router_main(argv: list[str]) -> int:
    """`python -m bench.storm router TIMELINE SMP-ROUTER-ARGS...`: `smp-router` itself, with
    a `Probe` in its Trio loop (started beside its gc policy) whose timeline is written
    as JSON to TIMELINE when the router exits."""
    from router.server.cli import serve as serve_module
    from router.server.cli.main import main as router_main

    out, probes = Path(argv[0]), []
    start_gc_policy = serve_module.start_gc_policy

    def start_probed(nursery: trio.Nursery, router: Any) -> Any:
        probes.append(Probe())
        nursery.start_soon(probes[0].run)
        return start_gc_policy(nursery, router)

    serve_module.start_gc_policy = start_probed
    try:
        return router_main(argv[1:])
    finally:
        if probes:
            out.write_text(json.dumps(probes[0].timeline()))


# --- the load (its own process) ---------------------------------------------------------


async def _hold_client(address: str, *, task_status: trio.TaskStatus[SMPClient]) -> None:
    async with open_client(address, versions=CLIENT_VERSIONS) as client:
        task_status.started(client)
        await trio.sleep_forever()


def _sub_blocks(client: SMPClient, first: int, count: int) -> list[tuple[bytes, int]]:
    """The connection's SUBs of queues first..first+count-1, signed, as full blocks."""
    seed = identities.keys()["rcv_seed"]
    conn = client._conn
    blocks: list[tuple[bytes, int]] = []
    packer, in_block = BatchPacker(), 0
    for i in range(first, first + count):
        raw = conn._encode(os.urandom(24), identities.recipient_id(i), SUB(), seed)
        if not packer.add(raw):
            blocks.append((packer.take_block(), in_block))
            packer, in_block = BatchPacker(), 0
            assert packer.add(raw)
        in_block += 1
    if in_block:
        blocks.append((packer.take_block(), in_block))
    return blocks


async def _storm(client: SMPClient, blocks: list[tuple[bytes, int]], messages: int,
                 counts: dict[str, int]) -> None:
    """Send the blocks, read every SUB's answer and the `messages` MSGs of the queues
    with a message (a MSG is a client event: its queue is the router's, not the client's)."""
    async def send() -> None:
        for block, _ in blocks:
            await client.send_raw_block(block)

    async def receive_messages() -> None:
        for _ in range(messages):
            event = await client.next_event()
            counts["messages"] += isinstance(event, MessageEvent | UndecryptedMessageEvent)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        nursery.start_soon(receive_messages)
        for _ in range(sum(n for _, n in blocks)):
            t = await client.next_raw_transmission()
            if not isinstance(t.response, OK | SOK):
                counts["errors"] += 1


async def _load(address: str, first: int, queues: int, connections: int,
                messages_every: int) -> dict[str, Any]:
    counts = {"subs": queues, "errors": 0, "messages": 0}
    per_connection = harness.split(queues, connections)
    async with trio.open_nursery() as nursery:
        clients: list[SMPClient] = []
        limiter = trio.CapacityLimiter(CONNECT_AT_ONCE)

        async def connect_one() -> None:
            async with limiter:
                clients.append(await nursery.start(_hold_client, address))

        async with trio.open_nursery() as connecting:
            for _ in range(connections):
                connecting.start_soon(connect_one)
        plans, start = [], first
        for client, n in zip(clients, per_connection, strict=True):
            messages = sum(1 for i in range(start, start + n)
                           if messages_every and i % messages_every == 0)
            plans.append((client, _sub_blocks(client, start, n), messages))
            start += n
        print("ready", flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        while b"go" not in await stdin.receive_some(16):
            pass
        began = time.perf_counter()
        async with trio.open_nursery() as storming:
            for client, blocks, messages in plans:
                storming.start_soon(_storm, client, blocks, messages, counts)
        counts["seconds"] = time.perf_counter() - began
        counts["blocks"] = sum(len(blocks) for _, blocks, _ in plans)
        # Said before the connections close: their closing is not the storm, and the
        # PINGs that measure the storm stop here.
        print(json.dumps(counts), flush=True)
        nursery.cancel_scope.cancel()
    return counts


def load_main(argv: list[str]) -> None:
    """`python -m bench.storm load ADDRESS FIRST QUEUES CONNECTIONS MESSAGES_EVERY`: prints
    `ready` once every connection is open and its SUBs are signed, storms on a `go` line
    from stdin, then prints what it got as one JSON line (before closing its
    connections)."""
    address, first, queues, connections, messages_every = argv[0], *map(int, argv[1:5])
    # Every answer is read (`_storm`): the client keeps them all. Its raw answers'
    # buffer drops the newest once full (for clients that read none), and a connection
    # whose reader fell that far behind (300,000 SUBs on one) would wait for ever for
    # the answers dropped.
    _connection.RAW_BUFFER = math.inf
    if os.environ.get(_LOAD_ENV) != "0":
        # The router is what is measured: the load yields the CPU to it (bench.fairness).
        os.nice(19)
    trio.run(_load, address, first, queues, connections, messages_every)


async def _ping_on_a_clock(client: SMPClient, samples: list[float]) -> None:
    """A PING every `PING_INTERVAL`, whether or not the last one was answered (as
    bench.fairness does), until cancelled; each round trip in ms into `samples`."""

    async def one() -> None:
        samples.append(await _ping_ms(client))

    async with trio.open_nursery() as nursery:
        next_at = trio.current_time()
        while True:
            nursery.start_soon(one)
            next_at += PING_INTERVAL
            await trio.sleep_until(next_at)


# --- one store kind ---------------------------------------------------------------------


def _router_command(kind: str, data_dir: Path, connections: int,
                    timeline: Path | None, root: Path | None = None) -> list[str]:
    # One address holds every connection of the load.
    program = (["router.server"] if timeline is None
               else ["bench.storm", "router", str(timeline)])
    return [sys.executable, "-m", *program, "serve", *one_process(root), "--host", "127.0.0.1",
            "--port", "0",
            "--store", kind, "--data-dir", str(data_dir), "--no-stats-log",
            "--log-level", "warning", "--max-connections", str(connections + 64),
            "--max-connections-per-address", str(connections + 64)]


async def _one_kind(kind: str, queues: int, connections: int, messages_every: int,
                    tmp: Path, root: Path | None = None, nice: int | None = None
                    ) -> dict[str, Any]:
    label = kind if root is None else f"{kind} ({root})"
    data_dir = tmp / label.replace("/", "_")
    began = time.perf_counter()
    await _fill(kind, data_dir, queues, messages_every)
    filled = time.perf_counter() - began
    here = Path(__file__).resolve().parent.parent
    # The probe runs in this tree's router only (another tree's has no bench.storm router).
    timeline = None if root is not None else tmp / f"{kind}-loop.json"
    pinger_probe = Probe()
    router = await trio.lowlevel.open_process(
        _router_command(kind, data_dir, connections, timeline, root), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, cwd=root or here,
        env={**os.environ, "PYTHONPATH": str(root or here)})
    load = None
    try:
        lines = _lines(router.stdout)
        with trio.fail_after(START_TIMEOUT):
            line = await lines.__anext__()
        address = harness.smp_address(line)
        ps = psutil.Process(router.pid)
        if nice is not None:
            ps.nice(nice)
        load = await trio.lowlevel.open_process(
            [sys.executable, "-m", "bench.storm", "load", address, "0", str(queues),
             str(connections), str(messages_every)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=here)
        load_lines = _lines(load.stdout)
        with trio.fail_after(START_TIMEOUT):
            ready = await load_lines.__anext__()
        if ready != "ready":
            raise harness.BenchError(f"{kind}: the load process said {ready!r}")
        async with open_client(address, versions=CLIENT_VERSIONS) as pinger:
            await pinger.ping()
            quiet = [await _ping_ms(pinger) for _ in range(QUIET_PINGS)]
            load_average = os.getloadavg()[0]
            rss_before = ps.memory_info().rss
            cpu = ps.cpu_times()
            cpu_before = cpu.user + cpu.system
            assert load.stdin is not None
            await load.stdin.send_all(b"go\n")
            result: dict[str, Any] = {}

            async def storm_done(cancel: trio.CancelScope) -> None:
                result.update(json.loads(await load_lines.__anext__()))
                cancel.cancel()

            samples: list[float] = []
            storm_began = time.time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(storm_done, nursery.cancel_scope)
                nursery.start_soon(pinger_probe.run)
                nursery.start_soon(_ping_on_a_clock, pinger, samples)
            storm_ended = time.time()
            cpu = ps.cpu_times()
            cpu_seconds = cpu.user + cpu.system - cpu_before
            rss_after = ps.memory_info().rss
            # The load now closes its connections and exits; the router takes them
            # apart. PINGs go on meanwhile, and for `LEAVING_AFTER` s after.
            leaving: list[float] = []

            async def load_gone(cancel: trio.CancelScope) -> None:
                with trio.move_on_after(START_TIMEOUT):
                    await load.wait()
                await trio.sleep(LEAVING_AFTER)
                cancel.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(load_gone, nursery.cancel_scope)
                nursery.start_soon(_ping_on_a_clock, pinger, leaving)
            left = time.time()
        pings = summary_ms(samples) if samples else {}
    finally:
        if load is not None:
            await _stop(load)
        await _stop(router)
    router_timeline = (json.loads(timeline.read_text())
                       if timeline is not None and timeline.exists() else None)
    subs = result["subs"]
    return {
        "kind": label, "queues": queues, "connections": connections,
        "messages_every": messages_every, "fill_s": filled,
        "storm_s": result["seconds"], "subs_per_s": subs / result["seconds"],
        "router_cpu_s": cpu_seconds, "cpu_us_per_sub": cpu_seconds / subs * 1e6,
        "ping_ms": pings, "quiet_ping_ms": summary_ms(quiet), "load_average": load_average,
        "rss_before": rss_before, "rss_after": rss_after,
        "rss_growth_per_sub": (rss_after - rss_before) / subs,
        "errors": result["errors"], "messages": result["messages"], "blocks": result["blocks"],
        "pinger_loop": window(pinger_probe.timeline(), storm_began, storm_ended),
        "router_loop": None if router_timeline is None else window(
            router_timeline, storm_began, storm_ended),
        # while the load's 2,000 connections close and the router takes them apart
        "leaving_ping_ms": summary_ms(leaving) if leaving else {},
        "leaving_router_loop": None if router_timeline is None else window(
            router_timeline, storm_ended, left),
        # the router's long passes of the storm: (seconds since "go", wall ms, CPU ms,
        # task steps, longest step ms, its task)
        "router_passes": [] if router_timeline is None else [
            [round(p[0] - storm_began, 3), *p[1:]] for p in router_timeline["passes"]
            if storm_began <= p[0] <= storm_ended],
        # the router's longest stalls of its whole run, with what its loop was doing
        "router_stalls": [] if router_timeline is None else router_timeline["stalls"],
    }


async def _run_kinds(runs: list[tuple[str, Path | None]], queues: int, connections: int,
                     messages_every: int, nice: int | None = None) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="smp-bench-storm-") as tmp:
        for kind, root in runs:
            harness.log(f"storm: {kind}{'' if root is None else f' ({root})'}, {queues:,} "
                        f"queues over {connections:,} connections")
            results.append(await _one_kind(kind, queues, connections, messages_every, Path(tmp),
                                           root, nice))
    return results


def table(results: list[dict[str, Any]]) -> str:
    base = next((r for r in results if r["kind"] == "journal"), results[0])
    rows = []
    for r in results:
        pings = r["ping_ms"]
        rows.append([
            r["kind"], f"{r['storm_s']:.2f}", f"{r['subs_per_s']:,.0f}",
            f"{r['subs_per_s'] / base['subs_per_s']:.2f}", f"{r['router_cpu_s']:.1f}",
            f"{r['cpu_us_per_sub']:.0f}", _ms(r["quiet_ping_ms"]["p99"]),
            _ms(pings.get("median")), _ms(pings.get("p99")),
            pings.get("samples", 0), f"{r['rss_before'] / 2**20:.0f}",
            f"{r['rss_after'] / 2**20:.0f}", f"{r['rss_growth_per_sub']:.0f}",
            _ms(r["pinger_loop"]["lag_max_ms"]),
            *(("-", "-", "-", "-") if r["router_loop"] is None else (
                _ms(r["router_loop"]["lag_max_ms"]), _ms(r["router_loop"]["pass_cpu_max_ms"]),
                r["router_loop"]["passes_over_20ms_cpu"],
                _ms(r["router_loop"]["gc_cpu_max_ms"]))),
            _ms(r.get("leaving_ping_ms", {}).get("p99")),
            "-" if r.get("leaving_router_loop") is None
            else _ms(r["leaving_router_loop"]["pass_cpu_max_ms"]),
            r["errors"], r["messages"], f"{r['load_average']:.1f}",
        ])
    return harness.md_table(
        ["store", "storm s", "SUBs/s", f"x {base['kind']}", "router CPU s", "CPU us/SUB",
         "quiet PING p99 ms", "PING p50 ms", "PING p99 ms", "PINGs", "RSS before MB",
         "RSS after MB", "RSS growth B/SUB", "pinger's loop lag max ms",
         "router's loop lag max ms", "router's longest pass, CPU ms",
         "router's passes over 20 ms CPU", "router's longest gc pass, CPU ms",
         "PING p99 ms as the load leaves", "router's longest pass as the load leaves, CPU ms",
         "errors", "MSGs", "load avg"], rows)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run(*, quick: bool = False, queues: int | None = None, connections: int | None = None,
        kinds: list[str] | None = None, messages_every: int = 0,
        roots: list[tuple[str, Path]] = (), out: Path | None = None,
        nice: int | None = None) -> list[dict[str, Any]]:
    queues = queues or (QUICK_QUEUES if quick else QUEUES)
    connections = connections or (QUICK_CONNECTIONS if quick else CONNECTIONS)
    runs = [*((kind, root) for kind, root in roots), *((kind, None) for kind in kinds or KINDS)]
    if nice is not None:  # the pinger; the router once started (`_one_kind`)
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    results = trio.run(_run_kinds, runs, queues, connections, messages_every, nice)
    cache = trio.run(cache_costs, QUICK_CACHE_RECORDS if quick else CACHE_RECORDS)
    text = table(results) + "\n\n" + cache_table(cache)
    harness.write_results("storm", {"parameters": {
        "queues": queues, "connections": connections, "messages_every": messages_every,
        "client_versions": CLIENT_VERSIONS, "nice": nice}, "results": results,
        "record_cache": cache},
        text, out)
    print(text)
    return results


def cache_table(cache: dict[str, Any]) -> str:
    return harness.md_table(
        ["SQLite record cache", "bytes per cached record", "default size, records",
         "default size, MB (full records)"],
        [["a storm's record (sender key, no notifier)", f"{cache['plain_bytes']:.0f}",
          f"{cache['default_cache_size']:,}", ""],
         ["every part (notifier, link, services)", f"{cache['full_bytes']:.0f}",
          f"{cache['default_cache_size']:,}", f"{cache['default_cache_mb']:.1f}"]])


def _root(text: str) -> tuple[str, Path]:
    kind, _, root = text.partition("=")
    if kind not in KINDS or not root:
        raise argparse.ArgumentTypeError(f"{text!r}: KIND=DIR, KIND one of {', '.join(KINDS)}")
    return kind, Path(root).resolve()


def main(argv: list[str]) -> int:
    if argv and argv[0] == "load":
        load_main(argv[1:])
        return 0
    if argv and argv[0] == "router":
        return probed_router_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench storm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=lambda t: int(float(t)))
    parser.add_argument("--connections", type=lambda t: int(float(t)))
    parser.add_argument("--kinds", type=lambda t: t.split(","), help="e.g. journal,sqlite")
    parser.add_argument("--messages-every", type=int, default=0,
                        help="a message in every K-th queue (0: none)")
    parser.add_argument("--root", action="append", default=[], type=_root,
                        help="KIND=DIR: also the store KIND with the router of source tree DIR")
    parser.add_argument("--quick", action="store_true", help="a small storm, scratch output")
    parser.add_argument("--nice", type=int, help="the router's and the pinger's priority "
                        "(negative: ahead of the machine's other work; needs root)")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results; "
                        "with --quick a new scratch directory)")
    args = parser.parse_args(argv)
    out = args.out
    if out is None and args.quick:
        out = Path(tempfile.mkdtemp(prefix="smp-bench-storm-"))
    try:
        run(quick=args.quick, queues=args.queues, connections=args.connections,
            kinds=args.kinds, messages_every=args.messages_every, roots=args.root, out=out,
            nice=args.nice)
    except harness.BenchError as exc:
        print(f"python -m bench storm: error: {exc}", file=sys.stderr)
        return 1
    print(f"results: {out or harness.RESULTS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
