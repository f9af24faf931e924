"""stores: every store kind side by side, PostgreSQL included, in one run.

    python -m bench stores [--quick] [--repeats N] [--duration S] [--sizes N] [--out DIR]

For each kind (`KINDS`: memory, journal, SQLite, PostgreSQL, each at its default
`--fsync batch`), the real router (`smp-router serve`, a process of its own, this
checkout's code) is measured for:

1. NEW rate: `NEW_QUEUES` queues created by `CONNECTIONS` clients at once, on a
   fresh store.
2. SEND -> MSG: `QUEUES` of those queues, one sender task each (one SEND of
   `BODY_SIZE` bytes at a time, waiting for its OK) over `CONNECTIONS` connections,
   and `CONNECTIONS` recipient connections that acknowledge every message as it
   arrives. Messages delivered and acknowledged per second over `--duration`
   seconds after a warm-up, and the latency from a SEND to its MSG at the
   recipient (p50, p99), median of `--repeats` runs with the kinds interleaved.
3. Bytes on disk per stored queue and per stored message: the store's files (and
   for PostgreSQL the schema's relations, `pg_total_relation_size`: tables, their
   indexes and TOAST) after writing `--sizes` queues through the store API, less
   the empty store; and after writing `MESSAGES` messages of `BODY_SIZE` bytes into
   `MESSAGE_QUEUES` queues, less the same store without them.
4. Resubscribing: the router started on the store of `--sizes` queues (its record
   caches cold, as after a restart); `RESUBSCRIBE` of them subscribed again over
   `RESUBSCRIBE_CONNECTIONS` connections in blocks of SUBs (the storm bench's load
   process, `python -m bench.storm load`: every block signed before the clock starts).
   The router's RSS at its start, against its RSS on an empty store, is its memory
   per stored queue.
5. One connection: the router started again on that store, and all `--sizes` queues
   (300,000) subscribed on ONE connection in blocks of SUBs, signed before the clock
   starts: the reference router's users reported over an hour for ~300K queues on
   its PostgreSQL store (docs/stores.md#postgresql).

Every wait for a process is bounded (`*_TIMEOUT`): a router that does not start,
answer or stop in time ends the run with an error that names it, never a hang.
Progress is logged to stderr while it runs. `--quick` runs small sizes and writes
bench/results/stores-quick.* (never the committed stores.*).

The postgres store runs on `SMP_BENCH_POSTGRES` (a postgresql:// URL), else on a
private PostgreSQL the run starts in a temporary directory (Debian's `postgresql`).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import trio

from router.client import MessageEvent, RecipientQueue, SMPClient, open_client
from router.server.core.commands import ID_SIZE
from store import Message, open_stores

from . import identities, storm
from .fairness import _CONFIG_KEYS as NEW_LIMITS
from .harness import BenchError, log, md_table, median, percentiles_ms, smp_address, write_results
from .postgres_server import PostgresServer, schema_for

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
KINDS = ("memory", "journal", "sqlite", "postgres")
FSYNC = "batch"  # every kind's default
QUEUES = 32
CONNECTIONS = 4
BODY_SIZE = 16000
WARMUP = 1.0
DURATION = 5.0
REFERENCE_SECONDS = 3600.0  # "over an hour" for ~300K queues on the reference's PostgreSQL
REFERENCE_QUEUES = 300_000

START_TIMEOUT = 600.0  # a router's start (a journal replays its store log)
STOP_TIMEOUT = 60.0  # SIGTERM to exit
SIGN_TIMEOUT = 1800.0  # the load process: connections open, every SUB signed
SUBSCRIBE_TIMEOUT = 3600.0  # "go" to the last answer
MEASURE_SLACK = 60.0  # connecting, creating queues, closing, beyond warm-up and duration
PROGRESS_EVERY = 15.0  # seconds between progress lines of a long wait


@dataclass(frozen=True)
class Plan:
    new_queues: int  # NEWs per kind
    stored_queues: int  # the store resubscribed; all of it on one connection
    resubscribe: int
    resubscribe_connections: int
    messages: int  # for bytes per message
    message_queues: int


FULL = Plan(2_000, 300_000, 100_000, 1_000, 10_000, 1_000)
QUICK = Plan(200, 3_000, 2_000, 20, 200, 20)


# --- processes, every wait bounded ---------------------------------------------------------


class Lines:
    """A child's stdout, read by a thread of its own: each line waited for with a bound,
    and a progress line logged every `PROGRESS_EVERY` seconds of the wait."""

    def __init__(self, stream: Any, what: str) -> None:
        self.what = what
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        try:
            for line in stream:
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(None)

    def next(self, timeout: float, progress: Callable[[float], str] | None = None) -> str:
        began = time.monotonic()
        while True:
            waited = time.monotonic() - began
            if waited >= timeout:
                raise BenchError(f"{self.what}: nothing within {timeout:g} s")
            try:
                line = self._lines.get(timeout=min(timeout - waited, PROGRESS_EVERY))
            except queue.Empty:
                if progress is not None:
                    log(progress(time.monotonic() - began))
                continue
            if line is None:
                raise BenchError(f"{self.what}: the process ended")
            return line.strip()


def _end(proc: subprocess.Popen, what: str, timeout: float = STOP_TIMEOUT) -> float:
    """SIGTERM, and the seconds until the process exited; killed (and an error) if it
    has not exited within `timeout`."""
    t0 = time.perf_counter()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise BenchError(f"{what} did not exit within {timeout:g} s of SIGTERM "
                             "(killed)") from None
    return time.perf_counter() - t0


class Router:
    """This checkout's `smp-router serve` on a free port of 127.0.0.1; `started` is the
    seconds to its listening line."""

    def __init__(self, kind: str, data_dir: Path, *, connections: int = 64) -> None:
        self.kind = kind
        # NEW unlimited: the NEW rate measured is the store's, not the rate limits'.
        # (The data directory's configuration file; the flags set the rest.)
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "smp-router.ini").write_text(
            "[LIMITS]\n" + "".join(f"{key} = {10**9}\n" for key in NEW_LIMITS))
        command = [*storm._router_command(kind, data_dir, connections, None),
                   "--fsync", FSYNC, "--quota", "100000", *_database_flags(kind, data_dir)]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            line = Lines(self.proc.stdout, f"the {kind} router's start").next(
                START_TIMEOUT, lambda s: f"stores: the {kind} router starting, {s:.0f} s")
            self.address = smp_address(line)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise
        self.started = time.perf_counter() - t0
        self.ps = psutil.Process(self.proc.pid)

    def rss(self) -> int:
        return self.ps.memory_info().rss

    def cpu(self) -> float:
        times = self.ps.cpu_times()
        return times.user + times.system

    def stop(self) -> float:
        return _end(self.proc, f"the {self.kind} router")


# The PostgreSQL the postgres store runs on: `SMP_BENCH_POSTGRES` (a postgresql:// URL),
# else a private server this run starts (bench/postgres_server.py) and stops.
_postgres: dict[str, Any] = {}


def _postgres_url() -> str:
    if "url" not in _postgres:
        url = os.environ.get("SMP_BENCH_POSTGRES")
        if url is None:
            server = _postgres["server"] = PostgresServer()
            server.start()
            url = server.url
        _postgres["url"] = url
    return _postgres["url"]


def _stop_postgres() -> None:
    server = _postgres.pop("server", None)
    _postgres.clear()
    if server is not None:
        server.stop()


def _database_settings(kind: str, data_dir: Path) -> dict[str, Any]:
    """The postgres store's settings for a data directory (a schema of its own)."""
    if kind != "postgres":
        return {}
    return {"db_connection": _postgres_url(), "db_schema": schema_for(data_dir)}


def _database_flags(kind: str, data_dir: Path) -> list[str]:
    settings = _database_settings(kind, data_dir)
    return [part for name, value in settings.items()
            for part in (f"--{name.replace('_', '-')}", str(value))]


def _sql(query: str, *params: Any) -> Any:
    import psycopg

    with psycopg.connect(_postgres_url(), autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchone() if cursor.description is not None else None


def disk_bytes(kind: str, data_dir: Path) -> int:
    """The store's bytes: its files, and for PostgreSQL its schema's relations (tables,
    their indexes and TOAST)."""
    files = sum(f.stat().st_size for f in data_dir.rglob("*") if f.is_file())
    if kind != "postgres":
        return files
    row = _sql("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
               " JOIN pg_namespace n ON n.oid = c.relnamespace"
               " WHERE n.nspname = %s AND c.relkind = 'r'", schema_for(data_dir))
    return files + int(row[0])


def _database_bytes() -> int:
    return int(_sql("SELECT pg_database_size(current_database())")[0])


def _discard(kind: str, data_dir: Path) -> None:
    shutil.rmtree(data_dir, ignore_errors=True)
    if kind == "postgres":
        _sql(f"DROP SCHEMA IF EXISTS {schema_for(data_dir)} CASCADE")


# --- 1, 2: NEW, SEND -> MSG ------------------------------------------------------------------


async def _sender(client: SMPClient, queue: RecipientQueue) -> None:
    padding = os.urandom(BODY_SIZE - 8)
    while True:  # the body starts with its send time, for the latency at the recipient
        await client.send(queue.sender_id, time.perf_counter_ns().to_bytes(8, "big") + padding)


async def _recipient(client: SMPClient, queues: dict[bytes, RecipientQueue],
                     counts: list[int], latencies: list[int], measuring: list[bool]) -> None:
    """Acknowledges every message as it arrives; ACKs of different queues overlap."""

    async def ack(event: MessageEvent) -> None:
        await client.ack(queues[event.recipient_id], event.msg_id)
        counts[0] += 1

    async with trio.open_nursery() as nursery:
        while True:
            event = await client.next_event()
            if isinstance(event, MessageEvent):
                if measuring[0] and not event.quota:
                    latencies.append(time.perf_counter_ns()
                                     - int.from_bytes(event.body[:8], "big"))
                nursery.start_soon(ack, event)


async def _open_client(address: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with open_client(address) as client:
        task_status.started(client)
        await trio.sleep_forever()


async def _create(client: SMPClient, n: int, made: list[RecipientQueue]) -> None:
    for _ in range(n):
        made.append(await client.create_queue())


async def _measure(address: str, new_queues: int, duration: float,
                   warmup: float) -> dict[str, Any]:
    counts, latencies, measuring = [0], [], [False]
    with trio.fail_after(warmup + duration + MEASURE_SLACK):
        async with trio.open_nursery() as nursery:
            senders = [await nursery.start(_open_client, address) for _ in range(CONNECTIONS)]
            recipients = [await nursery.start(_open_client, address)
                          for _ in range(CONNECTIONS)]
            made: list[list[RecipientQueue]] = [[] for _ in recipients]
            t0 = time.perf_counter()
            async with trio.open_nursery() as creating:
                for client, n, out in zip(recipients, _split(new_queues, CONNECTIONS), made,
                                          strict=True):
                    creating.start_soon(_create, client, n, out)
            new_rate = new_queues / (time.perf_counter() - t0)
            owned = [queues[: QUEUES // CONNECTIONS] for queues in made]
            # The load in a nursery of its own, so it stops before the clients close.
            async with trio.open_nursery() as load:
                for client, queues in zip(recipients, owned, strict=True):
                    await client.subscribe_many(queues)
                    load.start_soon(_recipient, client, {q.recipient_id: q for q in queues},
                                    counts, latencies, measuring)
                for sender, queues in zip(senders, owned, strict=True):
                    for q in queues:
                        load.start_soon(_sender, sender, q)
                await trio.sleep(warmup)
                measuring[0] = True
                before, t0 = counts[0], time.perf_counter()
                await trio.sleep(duration)
                rate = (counts[0] - before) / (time.perf_counter() - t0)
                measuring[0] = False
                load.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    return {"new_per_s": new_rate, "msgs_per_s": rate, **percentiles_ms(latencies)}


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def throughput(kind: str, plan: Plan, duration: float, warmup: float,
               tmp: Path) -> dict[str, Any]:
    data_dir = tmp / f"{kind}-throughput"
    router = Router(kind, data_dir)
    try:
        empty_rss = router.rss()
        try:
            figures = trio.run(_measure, router.address, plan.new_queues, duration, warmup)
        except trio.TooSlowError:
            raise BenchError(f"the {kind} router: the SEND -> MSG run did not end within "
                             f"{warmup + duration + MEASURE_SLACK:g} s") from None
    finally:
        router.stop()
        _discard(kind, data_dir)
    return {**figures, "empty_rss": empty_rss, "empty_start_s": router.started}


# --- 3: bytes on disk ------------------------------------------------------------------------


async def _fill_messages(kind: str, data_dir: Path, plan: Plan) -> tuple[int, int, int]:
    """Bytes of the empty store, with `plan.message_queues` queues, and with
    `plan.messages` messages in them besides (each measured with the store closed)."""
    settings = _database_settings(kind, data_dir)
    now = int(time.time())
    async with open_stores(kind, data_dir, fsync="never", **settings):
        pass
    empty = await trio.to_thread.run_sync(disk_bytes, kind, data_dir)
    await storm._fill(kind, data_dir, plan.message_queues, 0, **settings)
    with_queues = await trio.to_thread.run_sync(disk_bytes, kind, data_dir)
    async with open_stores(kind, data_dir, fsync="never", **settings) as stores:
        for i in range(plan.messages):
            rid = identities.recipient_id(i % plan.message_queues)
            message = Message(os.urandom(ID_SIZE), now, b"F", os.urandom(BODY_SIZE))
            await stores.messages.write_message(rid, message, plan.messages)
    with_messages = await trio.to_thread.run_sync(disk_bytes, kind, data_dir)
    return empty, with_queues, with_messages


# --- 4, 5: subscribing a stored store --------------------------------------------------------


def subscribe(router: Router, queues: int, connections: int) -> dict[str, Any]:
    """`queues` stored queues (0..queues-1) subscribed over `connections` connections in
    blocks of SUBs by the storm bench's load process; every SUB signed before "go"."""
    kind = router.kind
    load = subprocess.Popen(
        [sys.executable, "-m", "bench.storm", "load", router.address, "0", str(queues),
         str(connections), "0"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        # The load keeps the runner's priority: at nice 19 on a shared machine its reads
        # of the answers would wait for other work and be counted as the router's time.
        env={**os.environ, "PYTHONPATH": str(ROOT), "STORM_LOAD_NICE": "0"})
    try:
        lines = Lines(load.stdout, f"{kind}: the SUB load of {queues:,} queues")
        ready = lines.next(SIGN_TIMEOUT, lambda s: f"stores: {kind}: {connections:,} "
                           f"connection(s) opening, {queues:,} SUBs signing, {s:.0f} s")
        if ready != "ready":
            raise BenchError(f"{kind}: the load process said {ready!r}")
        load_average = os.getloadavg()[0]
        cpu_before = router.cpu()
        assert load.stdin is not None
        load.stdin.write("go\n")
        load.stdin.flush()
        counts = json.loads(lines.next(
            SUBSCRIBE_TIMEOUT, lambda s: f"stores: {kind}: subscribing {queues:,} queues "
            f"over {connections:,} connection(s), {s:.0f} s, router CPU "
            f"{router.cpu() - cpu_before:.0f} s"))
        cpu = router.cpu() - cpu_before
        rss = router.rss()
    finally:
        try:
            _end(load, f"{kind}: the SUB load")
        finally:
            if load.stdin is not None:
                load.stdin.close()
    return {"queues": queues, "connections": connections, "seconds": counts["seconds"],
            "subs_per_s": queues / counts["seconds"], "router_cpu_s": cpu,
            "errors": counts["errors"], "rss_after": rss, "load_average": load_average}


def stored(kind: str, plan: Plan, tmp: Path) -> dict[str, Any]:
    """Sizes on disk, memory per stored queue, resubscribing, and all on one connection."""
    small_dir, data_dir = tmp / f"{kind}-messages", tmp / f"{kind}-stored"
    log(f"stores: {kind}: {plan.messages:,} messages into {plan.message_queues:,} queues")
    try:
        empty, with_queues, with_messages = trio.run(_fill_messages, kind, small_dir, plan)
    finally:
        _discard(kind, small_dir)
    log(f"stores: {kind}: {plan.stored_queues:,} queues written through the store API")
    t0 = time.perf_counter()
    trio.run(partial(storm._fill, kind, data_dir, plan.stored_queues, 0,
                     **_database_settings(kind, data_dir)))
    fill_s = time.perf_counter() - t0
    disk = disk_bytes(kind, data_dir)
    database = _database_bytes() if kind == "postgres" else None
    try:
        log(f"stores: {kind}: resubscribing {plan.resubscribe:,} of them over "
            f"{plan.resubscribe_connections:,} connections")
        router = Router(kind, data_dir, connections=plan.resubscribe_connections)
        try:
            start_s, start_rss = router.started, router.rss()
            resubscribe = subscribe(router, plan.resubscribe, plan.resubscribe_connections)
        finally:
            router.stop()
        log(f"stores: {kind}: all {plan.stored_queues:,} on one connection")
        router = Router(kind, data_dir, connections=1)
        try:
            one = subscribe(router, plan.stored_queues, 1)
        finally:
            router.stop()
    finally:
        _discard(kind, data_dir)
    return {
        "fill_s": fill_s, "disk_bytes": disk, "database_bytes": database,
        "empty_store_bytes": empty,
        "bytes_per_queue": (disk - empty) / plan.stored_queues,
        "bytes_per_message": (with_messages - with_queues) / plan.messages,
        "start_s": start_s, "start_rss": start_rss,
        "resubscribe": resubscribe, "one_connection": one,
    }


# --- the run ---------------------------------------------------------------------------------


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the `finally`s stop the routers and the PostgreSQL


def run(*, quick: bool = False, repeats: int = 3, duration: float | None = None,
        sizes: tuple[int, ...] | None = None, out: Path | None = None,
        kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    if sizes:
        plan = Plan(plan.new_queues, sizes[0], min(plan.resubscribe, sizes[0]),
                    plan.resubscribe_connections, plan.messages, plan.message_queues)
    duration = duration or (1.0 if quick else DURATION)
    warmup = 0.5 if quick else WARMUP
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with tempfile.TemporaryDirectory(prefix="smp-bench-stores-") as tmp:
            results = _run(plan, kinds, repeats, duration, warmup, Path(tmp))
    finally:
        _stop_postgres()
    text = table(results)
    if quick and out is None:  # beside the committed figures, never over them
        out = RESULTS
    path = write_results("stores-quick" if quick else "stores", results, text, out)
    log(f"stores: figures in {path} and {path.with_suffix('.md')}")
    return results


def _run(plan: Plan, kinds: tuple[str, ...], repeats: int, duration: float, warmup: float,
         tmp: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for r in range(repeats):
        for kind in kinds:
            log(f"stores: {kind}: NEW and SEND -> MSG (run {r + 1}/{repeats})")
            runs[kind].append(throughput(kind, plan, duration, warmup, tmp))
    rows = []
    for kind in kinds:
        row = {"kind": kind, "fsync": FSYNC if kind != "memory" else "-"}
        for figure in ("new_per_s", "msgs_per_s", "p50", "p99", "empty_rss",
                       "empty_start_s"):
            row[figure] = median(run[figure] for run in runs[kind])
        row.update(stored(kind, plan, tmp))
        row["rss_per_stored_queue"] = (row["start_rss"] - row["empty_rss"]) / plan.stored_queues
        row["rss_per_subscribed_queue"] = ((row["one_connection"]["rss_after"]
                                            - row["empty_rss"]) / plan.stored_queues)
        rows.append(row)
    return {"plan": asdict(plan), "settings": {
                "queues": QUEUES, "connections": CONNECTIONS, "body": BODY_SIZE,
                "duration": duration, "warmup": warmup, "repeats": repeats, "fsync": FSYNC,
                "reference_seconds": REFERENCE_SECONDS},
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "postgres": _postgres_version() if "postgres" in kinds else None,
            "kinds": rows}


def _postgres_version() -> str:
    return str(_sql("SHOW server_version")[0])


def _ratio(value: float | None, base: float | None) -> str:
    return "–" if not value or not base else f"{value / base:.2f}x"


def table(results: dict[str, Any]) -> str:
    rows, plan, settings = results["kinds"], results["plan"], results["settings"]
    by_kind = {row["kind"]: row for row in rows}
    memory, journal = by_kind.get("memory", rows[0]), by_kind.get("journal", rows[0])
    t1 = md_table(
        ["store", "fsync", "NEW/s", "NEW vs journal", "SEND->MSG msgs/s", "vs memory",
         "vs journal", "latency p50 ms", "p99 ms"],
        [(r["kind"], r["fsync"], r["new_per_s"], _ratio(r["new_per_s"], journal["new_per_s"]),
          r["msgs_per_s"], _ratio(r["msgs_per_s"], memory["msgs_per_s"]),
          _ratio(r["msgs_per_s"], journal["msgs_per_s"]), r["p50"], r["p99"])
         for r in rows])
    t2 = md_table(
        ["store", "bytes on disk per queue", "bytes on disk per message",
         "router RSS per stored queue, at start", "after subscribing all, per queue",
         f"start s with {plan['stored_queues']:,} queues", "fill s"],
        [(r["kind"], round(r["bytes_per_queue"]), round(r["bytes_per_message"]),
          round(r["rss_per_stored_queue"]), round(r["rss_per_subscribed_queue"]),
          r["start_s"], r["fill_s"]) for r in rows])
    reference = settings["reference_seconds"]
    t3 = md_table(
        ["store", f"resubscribe {plan['resubscribe']:,} over "
         f"{plan['resubscribe_connections']:,} connections, s", "SUBs/s", "vs journal",
         f"{plan['stored_queues']:,} on one connection, s", "SUBs/s", "router CPU s",
         "vs journal", "vs the reference's 3,600 s", "errors"],
        [(r["kind"], r["resubscribe"]["seconds"], r["resubscribe"]["subs_per_s"],
          _ratio(r["resubscribe"]["subs_per_s"], journal["resubscribe"]["subs_per_s"]),
          r["one_connection"]["seconds"], r["one_connection"]["subs_per_s"],
          r["one_connection"]["router_cpu_s"],
          _ratio(r["one_connection"]["subs_per_s"], journal["one_connection"]["subs_per_s"]),
          f"{reference / r['one_connection']['seconds']:,.0f}x faster"
          if plan["stored_queues"] >= REFERENCE_QUEUES else "–",
          r["resubscribe"]["errors"] + r["one_connection"]["errors"]) for r in rows])
    load = results["load_average_before"], results["load_average_after"]
    return (f"Every kind at --fsync {settings['fsync']}; PostgreSQL "
            f"{results['postgres'] or '–'}; load average {load[0][0]:.1f} at the start, "
            f"{load[1][0]:.1f} at the end (2-core machine)\n\n"
            f"NEW ({plan['new_queues']:,} queues over {CONNECTIONS} connections) and "
            f"SEND -> MSG -> ACK ({settings['queues']} queues, {settings['body']:,}-byte "
            f"bodies, {settings['duration']:g} s measured, median of {settings['repeats']})"
            f"\n\n{t1}\n\nStored: {plan['stored_queues']:,} queues; {plan['messages']:,} "
            f"messages of {settings['body']:,} bytes in {plan['message_queues']:,} queues"
            f"\n\n{t2}\n\nSubscribing the stored queues (SUB blocks signed before the clock "
            f"starts; cold caches: a router started on the store)\n\n{t3}\n")
