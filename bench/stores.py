"""stores: what durability costs. Two figures per store kind, in one run.

1. SEND -> MSG -> ACK throughput of the real router (`smp-router serve`, a
   process of its own) on each store kind and fsync policy, relative to the
   memory store measured in the same run. Load: `QUEUES` queues, each with one
   sender task (one SEND of `BODY_SIZE` bytes at a time, waiting for its OK) on
   `CONNECTIONS` sender connections, and `CONNECTIONS` recipient connections
   subscribed to them that acknowledge every message as it arrives (ACKs of
   different queues in flight together). Figure: messages delivered and
   acknowledged per second over `DURATION` seconds after `WARMUP`.
   The clients run in this process, on Trio, so on a 2-core machine the router
   and its load each get one core.
2. Restart time with N queues holding one message each (N = 100,000 by
   default): the store is filled offline through the store API, then the
   router is started on it; the figure is the time from starting the process
   to the line it prints once it listens, next to the same for an empty data
   directory (the interpreter's own start), and the time a SIGTERM takes to
   stop it (the memory store writes its snapshot then). "on disk" counts the data
   directory, and for the postgres store its schema's tables and indexes.

The postgres store runs on `SMP_BENCH_POSTGRES` (a postgresql:// URL), else on a
private PostgreSQL the run starts in a temporary directory (Debian's `postgresql`).

Every figure is a median over `repeats` runs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from router.client import MessageEvent, RecipientQueue, SMPClient, open_client
from router.server.core.commands import ID_SIZE
from router.server.settings.config import STORE_KINDS, RouterConfig
from store import Message, QueueRecord, open_stores

from .harness import log, md_table, median, write_results
from .postgres_server import PostgresServer, schema_for

QUOTA = RouterConfig().quota  # the router's default

KINDS = (
    ("memory", "batch"),
    ("journal", "batch"),
    ("journal", "always"),
    ("journal", "never"),
    ("sqlite", "batch"),
    ("sqlite", "always"),
    ("sqlite", "never"),
    ("postgres", "batch"),
)
QUEUES = 32
CONNECTIONS = 4
BODY_SIZE = 16000
WARMUP = 1.0
DURATION = 5.0
RESTART_QUEUES = 100_000
QUICK_RESTART_QUEUES = 2_000
START_TIMEOUT = 600.0
_ADDRESS = re.compile(r"smp://\S+@127\.0\.0\.1:\d+")


# --- the router process ---------------------------------------------------------------


class Router:
    """`smp-router serve` on a free port; `started` is the seconds to its listening line."""

    def __init__(self, kind: str, data_dir: Path, fsync: str = "batch") -> None:
        exe = Path(sys.executable).with_name("smp-router")
        head = [str(exe)] if exe.exists() else [sys.executable, "-m", "router.server"]
        args = ["serve", "--port", "0", "--store", kind, "--data-dir", str(data_dir),
                "--fsync", fsync, "--quota", "100000", "--no-stats-log", "--log-level", "warning",
                *_database_flags(kind, data_dir)]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([*head, *args], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.started = time.perf_counter() - t0
        match = _ADDRESS.search(line)
        if match is None:
            self.proc.kill()
            raise RuntimeError(f"the {kind} router did not start: {line!r}")
        self.address = match.group()

    def stop(self) -> float:
        """SIGTERM, and the seconds until the process has exited."""
        t0 = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(START_TIMEOUT)
        return time.perf_counter() - t0


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


# --- 1. throughput -------------------------------------------------------------------------


async def _sender(client: SMPClient, queue: RecipientQueue) -> None:
    body = os.urandom(BODY_SIZE)
    while True:
        await client.send(queue.sender_id, body)


async def _recipient(
    client: SMPClient, queues: dict[bytes, RecipientQueue], counts: list[int]
) -> None:
    """Acknowledges every message as it arrives; ACKs of different queues overlap."""

    async def ack(event: MessageEvent) -> None:
        await client.ack(queues[event.recipient_id], event.msg_id)
        counts[0] += 1

    async with trio.open_nursery() as nursery:
        while True:
            event = await client.next_event()
            if isinstance(event, MessageEvent):
                nursery.start_soon(ack, event)


async def _measure(address: str, duration: float, warmup: float) -> float:
    """Messages acknowledged per second while every sender keeps sending."""
    counts = [0]
    async with trio.open_nursery() as nursery:
        senders = [await nursery.start(_open_client, address) for _ in range(CONNECTIONS)]
        recipients = [await nursery.start(_open_client, address) for _ in range(CONNECTIONS)]
        owned: list[list[RecipientQueue]] = [[] for _ in recipients]
        pairs = []
        for i in range(QUEUES):
            j = i % CONNECTIONS
            q = await recipients[j].create_queue()
            owned[j].append(q)
            pairs.append((senders[j], q))
        # The load in a nursery of its own, so it stops before the clients close.
        async with trio.open_nursery() as load:
            for client, queues in zip(recipients, owned, strict=True):
                await client.subscribe_many(queues)
                load.start_soon(_recipient, client, {q.recipient_id: q for q in queues}, counts)
            for client, q in pairs:
                load.start_soon(_sender, client, q)
            await trio.sleep(warmup)
            before, t0 = counts[0], time.perf_counter()
            await trio.sleep(duration)
            rate = (counts[0] - before) / (time.perf_counter() - t0)
            load.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    return rate


async def _open_client(address: str, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with open_client(address) as client:
        task_status.started(client)
        await trio.sleep_forever()


def throughput(kind: str, fsync: str, duration: float, warmup: float) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp:
        router = Router(kind, Path(tmp) / "data", fsync)
        try:
            return trio.run(_measure, router.address, duration, warmup)
        finally:
            router.stop()


# --- 2. restart time ------------------------------------------------------------------------


async def _fill(kind: str, data_dir: Path, n: int) -> None:
    """n queues with one message each, written through the store API (fsync never)."""
    now = int(time.time())
    async with open_stores(kind, data_dir, fsync="never",
                           **_database_settings(kind, data_dir)) as stores:
        batch_q: list[QueueRecord] = []
        batch_m: list[tuple[bytes, Message]] = []
        for i in range(n):
            rec = QueueRecord(os.urandom(ID_SIZE), os.urandom(ID_SIZE), os.urandom(44),
                              os.urandom(32), None, True, updated_at=now)
            msg = Message(os.urandom(ID_SIZE), now, b"F", os.urandom(BODY_SIZE // 16))
            if stores.bulk_import is not None:
                batch_q.append(rec)
                batch_m.append((rec.recipient_id, msg))
                if len(batch_q) >= 5000 or i == n - 1:
                    await stores.bulk_import(batch_q, batch_m)
                    batch_q, batch_m = [], []
            else:
                await stores.queues.add_queue(rec)
                await stores.messages.write_message(rec.recipient_id, msg, QUOTA)


def restart(kind: str, n: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp:
        data_dir, empty_dir = Path(tmp) / "data", Path(tmp) / "empty"
        t0 = time.perf_counter()
        trio.run(_fill, kind, data_dir, n)
        fill = time.perf_counter() - t0
        disk = sum(f.stat().st_size for f in data_dir.rglob("*") if f.is_file())
        if kind == "postgres":
            disk += trio.run(_schema_bytes, data_dir)
        starts, stops, empties = [], [], []
        for _ in range(repeats):
            empty = Router(kind, empty_dir / str(len(empties)))
            empty.stop()
            empties.append(empty.started)
            router = Router(kind, data_dir)
            starts.append(router.started)
            stops.append(router.stop())
        shutil.rmtree(data_dir)
    return {"kind": kind, "queues": n, "fill_s": fill, "disk_mb": disk / 2**20,
            "start_s": median(starts), "empty_start_s": median(empties),
            "stop_s": median(stops)}


async def _schema_bytes(data_dir: Path) -> int:
    """The database's size of the schema's tables and indexes."""
    import psycopg

    query = ("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
             " JOIN pg_namespace n ON n.oid = c.relnamespace"
             " WHERE n.nspname = %s AND c.relkind = 'r'")
    schema = schema_for(data_dir)

    def size() -> int:
        with psycopg.connect(_postgres_url()) as conn:
            return int(conn.execute(query, (schema,)).fetchone()[0])

    return await trio.to_thread.run_sync(size)


# --- the run -----------------------------------------------------------------------------------


def run(*, quick: bool = False, repeats: int = 3, duration: float | None = None,
        sizes: tuple[int, ...] | None = None) -> dict[str, Any]:
    duration = duration or (1.0 if quick else DURATION)
    warmup = 0.5 if quick else WARMUP
    n = sizes[0] if sizes else (QUICK_RESTART_QUEUES if quick else RESTART_QUEUES)
    try:
        return _run(repeats, duration, warmup, n)
    finally:
        _stop_postgres()


def _run(repeats: int, duration: float, warmup: float, n: int) -> dict[str, Any]:
    rates: dict[tuple[str, str], list[float]] = {k: [] for k in KINDS}
    for r in range(repeats):
        for kind, fsync in KINDS:
            log(f"stores: throughput {kind} fsync={fsync} (run {r + 1}/{repeats})")
            rates[(kind, fsync)].append(throughput(kind, fsync, duration, warmup))
    memory_rate = median(rates[("memory", "batch")]) or 1.0
    tput = [{"kind": k, "fsync": f if k != "memory" else "-", "msgs_per_s": median(v),
             "relative_to_memory": (median(v) or 0.0) / memory_rate}
            for (k, f), v in rates.items()]
    restarts = []
    for kind in STORE_KINDS:
        log(f"stores: restart {kind} with {n:,} queues")
        restarts.append(restart(kind, n, repeats))
    table = _tables(tput, restarts, duration, repeats)
    write_results("stores", {"throughput": tput, "restart": restarts,
                             "settings": {"queues": QUEUES, "connections": CONNECTIONS,
                                          "body": BODY_SIZE, "duration": duration,
                                          "repeats": repeats}}, table)
    print(table, file=sys.stderr)
    return {"throughput": tput, "restart": restarts}


def _tables(tput: list[dict], restarts: list[dict], duration: float, repeats: int) -> str:
    t1 = md_table(
        ["store", "fsync", "messages/s", "vs memory"],
        [(t["kind"], t["fsync"], t["msgs_per_s"], f"{t['relative_to_memory']:.2f}x")
         for t in tput],
    )
    t2 = md_table(
        ["store", "queues (1 message each)", "on disk MB", "start s", "empty start s", "stop s"],
        [(r["kind"], r["queues"], r["disk_mb"], r["start_s"], r["empty_start_s"], r["stop_s"])
         for r in restarts],
    )
    return (f"SEND -> MSG -> ACK, {QUEUES} queues, {BODY_SIZE}-byte bodies, {duration:g} s "
            f"measured, median of {repeats}\n\n{t1}\n\nRestart\n\n{t2}\n")
