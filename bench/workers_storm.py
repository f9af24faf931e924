"""workers_storm: the reconnect storm at one worker and at two, in one run (issue 35).

    python -m bench workers_storm [--queues 200000] [--connections 2000] [--store memory]
                                  [--counts 1,2] [--messages-every K] [--load-nice 0|19]
                                  [--quick] [--out DIR]

The storm of `bench.storm` (its load process, its PINGs), against `smp-router serve
--workers N` for each N of `--counts`, one after the other on the same machine:
`--queues` queues are written into a fresh data directory, each into its owner's
share (`bench.workers_router`), the router starts on it, and the storm's load
process opens `--connections` connections (SMP over TLS, v10) and signs every
connection's blocks of SUBs (~100 a block) before the clock starts; on "go" every
connection sends its blocks and reads every answer. A connection lands on
whichever worker accepts it, and its queues belong to every worker, so with N
workers (N-1)/N of each block is handed off to its queues' owners.

Measured for each N: the storm's seconds (from "go" to the last answer, in the
load process) and its ratio to the first count's; the router's CPU (supervisor
and every worker, summed) per SUB; another client's PING round trips during the
storm; the router's RSS (summed) before and after; the machine's load average
before "go"; the load process's own CPU per SUB (and its cores), and the machine's idle
cores during the storm. Per worker: the connections it holds before "go" (its sockets
on the router's port: each connection's front work stays in the worker that accepted
it), its CPU through the storm, read every `SAMPLE_INTERVAL` (the profile is in the
JSON), and when it began and ended its share of the work (2 % and 98 % of its CPU
spent): a worker ending before the other is the storm's tail, idle cores at the
start its ramp. The load has signed its SUBs before
the clock starts, so it costs little CPU (reading the answers); it runs at the
runner's priority (`--load-nice 19`: as `bench.storm`'s, which on 2 cores
starves it once two workers take both, and the workers then wait for it to read).

The load process is this module's own (`load`): on the 2 cores it shares with the
router, what it spends is taken from the router. While the clock runs it keeps each
answer block's content (without its padding; reads go into buffers made once) and
counts its transmissions from the block's header, until a connection has as many as
its SUBs and waiting messages; nothing is taken apart then. Once the clock has
stopped (and the CPU of every process is read), every answer is checked: each
answer's corrId is taken out of the SUBs not answered yet (an unknown or repeated
one is an error) and its command must be `OK`; a push without
corrId must be a `MSG` (counted); anything else, and any SUB not answered, is an
error. So the figures still prove every SUB answered `OK` once; the check's CPU per
SUB is reported beside the load's CPU during the clock.

Then the machine itself is weighed (`machine_scaling`): `CHECKS` Ed25519 checks (the
storm's main cost) in one process, then in as many processes as the largest count at
once. On cores of their own the wall time stays the same; the slowdown is what any
count of workers loses to the machine (shared or throttled cores, neighbours).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import trio
from nacl import bindings

from router.client import ConnectionClosed, RouterAddress, open_client, parse_address
from router.client._handshake import client_handshake
from router.client._transport import SMP_ALPN
from router.protocol import crypto
from router.protocol.block import BLOCK_SIZE, MAX_CONTENT, BatchPacker, iter_batch_content
from router.protocol.codec import encode_command
from router.protocol.crypto import _ed25519_ok
from router.protocol.transmission import encode_transmission, entity_and_command_offset
from router.protocol.types import BLOCK, SUB, ProtocolError, Transmission
from router.server.workers.seat import WORKER_ENV

from . import harness, identities
from .fairness import _lines, _ping_ms, _stop, summary_ms
from .storm import _LOAD_ENV, CLIENT_VERSIONS, CONNECT_AT_ONCE, QUIET_PINGS, _ping_on_a_clock
from .workers_router import START_TIMEOUT, CliRouter, fill

SAMPLE_INTERVAL = 0.1  # seconds between two readings of each worker's CPU
DONE_SHARE = 0.98  # a worker is done with the storm once it has spent this share of its CPU

QUEUES, CONNECTIONS = 200_000, 2_000
QUICK_QUEUES, QUICK_CONNECTIONS = 400, 8
COUNTS = (1, 2)
STORE = "memory"
CHECKS, QUICK_CHECKS = 40_000, 500  # Ed25519 checks per process, to weigh the machine
HERE = Path(__file__).resolve().parent.parent


def worker_processes(router: CliRouter) -> list[psutil.Process]:
    """The router's workers by index (N = 1: its one process), from their
    `SMP_ROUTER_WORKER=INDEX/COUNT/FD` (workers/seat.py)."""
    if router.workers == 1:
        return [router.ps]
    by_index: dict[int, psutil.Process] = {}
    for p in router.ps.children():
        seat = p.environ().get(WORKER_ENV)
        if seat:
            by_index[int(seat.split("/")[0])] = p
    return [by_index[i] for i in sorted(by_index)]


def connections_per_worker(workers: list[psutil.Process], port: int) -> list[int]:
    """The TCP connections each worker holds on the router's port (its clients)."""
    return [sum(1 for c in p.net_connections("tcp")
                if c.laddr and c.laddr.port == port and c.raddr) for p in workers]


def _idle(times: Any) -> float:
    """The machine's idle CPU seconds (every core) in `psutil.cpu_times()`."""
    return times.idle + getattr(times, "iowait", 0.0)


def _cpu(p: psutil.Process) -> float:
    try:
        t = p.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return t.user + t.system


async def sample_cpu(workers: list[psutil.Process], samples: list[tuple[float, list[float]]],
                     ) -> None:
    """Each worker's CPU seconds every `SAMPLE_INTERVAL`, with the time, until cancelled."""
    while True:
        samples.append((time.perf_counter(), [_cpu(p) for p in workers]))
        await trio.sleep(SAMPLE_INTERVAL)


def worker_timeline(samples: list[tuple[float, list[float]]], began: float,
                    seconds: float) -> list[dict[str, float]]:
    """Per worker, from the CPU samples of the storm (the first taken before "go"): its
    CPU seconds, when its CPU began to rise and when it had spent `DONE_SHARE` of it
    (seconds from "go"), and the cores it kept busy in between."""
    if len(samples) < 2:
        return []
    start = samples[0][1]
    out = []
    for w in range(len(start)):
        spent = [(t - began, cpus[w] - start[w]) for t, cpus in samples]
        total = spent[-1][1]
        done = min(next((t for t, c in spent if c >= DONE_SHARE * total), seconds), seconds)
        first = min(max(next((t for t, c in spent if c > 0.02 * total), 0.0), 0.0), done)
        out.append({"cpu_s": total, "started_s": first, "done_s": done,
                    "busy": total / max(done - first, 1e-9)})
    return out


def verify_loop(count: int) -> float:
    """`count` Ed25519 checks of a SUB-sized signed text, the storm's main CPU cost
    (bench/RESULTS.md); the CPU seconds they took."""
    seed = identities.keys()["rcv_seed"]
    public, secret = bindings.crypto_sign_seed_keypair(seed)
    data = os.urandom(120)
    signature = bindings.crypto_sign(data, secret)[:64]
    began = time.process_time()
    for _ in range(count):
        assert _ed25519_ok(signature, public, data)
    return time.process_time() - began


async def machine_scaling(processes: int, count: int) -> dict[str, Any]:
    """The machine's own gain from more processes: the wall time of `count` Ed25519
    checks in one process, then in each of `processes` at once. Two cores that are
    really two give the same wall time; a shared or throttled core gives more, and
    bounds what any count of workers can gain here."""

    async def one_batch(n: int) -> float:
        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(partial(trio.run_process, [
                    sys.executable, "-m", "bench.workers_storm", "verify", str(count)],
                    cwd=HERE, stdout=subprocess.DEVNULL))
        return time.perf_counter() - began

    alone = await one_batch(1)
    together = await one_batch(processes)
    return {"processes": processes, "checks": count, "alone_s": alone,
            "together_s": together, "slowdown": together / alone}


async def one_count(workers: int, kind: str, queues: int, connections: int,
                    messages_every: int, tmp: Path, load_nice: int = 0) -> dict[str, Any]:
    data_dir = tmp / f"workers-{workers}"
    began = time.perf_counter()
    shares = await fill(kind, data_dir, range(queues), workers, messages_every)
    filled = time.perf_counter() - began
    load = None
    with CliRouter(workers, kind, data_dir, max_connections=connections + 64) as router:
        try:
            load = await trio.lowlevel.open_process(
                [sys.executable, "-m", "bench.workers_storm", "load", router.address,
                 str(queues), str(connections), str(messages_every)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE,
                env={**os.environ, _LOAD_ENV: "0" if load_nice == 0 else "1"})
            load_ps = psutil.Process(load.pid)
            load_lines = _lines(load.stdout)
            with trio.fail_after(START_TIMEOUT):
                ready = await load_lines.__anext__()
            if ready != "ready":
                raise harness.BenchError(f"workers {workers}: the load process said {ready!r}")
            async with open_client(router.address, versions=CLIENT_VERSIONS) as pinger:
                await pinger.ping()
                quiet = [await _ping_ms(pinger) for _ in range(QUIET_PINGS)]
                load_average = os.getloadavg()[0]
                workers_ps = worker_processes(router)
                per_worker_connections = connections_per_worker(
                    workers_ps, parse_address(router.address).port)
                rss_before = router.rss()
                cpu_before = router.cpu_seconds()
                load_cpu_before = sum(load_ps.cpu_times()[:2])
                machine_before = psutil.cpu_times()
                assert load.stdin is not None
                await load.stdin.send_all(b"go\n")
                result: dict[str, Any] = {}

                async def storm_done(cancel: trio.CancelScope) -> None:
                    stopped = await load_lines.__anext__()
                    if stopped != "stopped":
                        raise harness.BenchError(
                            f"workers {workers}: the load process said {stopped!r}")
                    cancel.cancel()

                samples: list[float] = []
                cpu_samples: list[tuple[float, list[float]]] = []
                went = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(storm_done, nursery.cancel_scope)
                    nursery.start_soon(_ping_on_a_clock, pinger, samples)
                    nursery.start_soon(sample_cpu, workers_ps, cpu_samples)
                cpu_samples.append((time.perf_counter(), [_cpu(p) for p in workers_ps]))
                cpu_seconds = router.cpu_seconds() - cpu_before
                load_cpu = sum(load_ps.cpu_times()[:2]) - load_cpu_before
                machine_idle = _idle(psutil.cpu_times()) - _idle(machine_before)
                rss_after = router.rss()
                with trio.fail_after(START_TIMEOUT):
                    result.update(json.loads(await load_lines.__anext__()))
        finally:
            if load is not None:
                await _stop(load)
    subs = result["subs"]
    timeline = worker_timeline(cpu_samples, went, result["seconds"])
    return {
        "workers": workers, "store": kind, "queues": queues, "connections": connections,
        "queues_per_worker": shares, "messages_every": messages_every, "fill_s": filled,
        "storm_s": result["seconds"], "subs_per_s": subs / result["seconds"],
        "router_cpu_s": cpu_seconds, "cpu_us_per_sub": cpu_seconds / subs * 1e6,
        "cores_busy": cpu_seconds / result["seconds"], "load_nice": load_nice,
        "machine_idle_cores": machine_idle / result["seconds"],
        "load_cores": load_cpu / result["seconds"],
        "connections_per_worker": per_worker_connections, "per_worker": timeline,
        "cpu_profile": [[round(t - went, 2), *(round(c - s, 3) for c, s in
                                                zip(cpus, cpu_samples[0][1], strict=True))]
                        for t, cpus in cpu_samples],
        "load_cpu_s": load_cpu, "load_cpu_us_per_sub": load_cpu / subs * 1e6,
        "load_check_cpu_us_per_sub": result["check_cpu_s"] / subs * 1e6,
        "ping_ms": summary_ms(samples) if samples else {}, "quiet_ping_ms": summary_ms(quiet),
        "load_average": load_average, "rss_before": rss_before, "rss_after": rss_after,
        "errors": result["errors"], "messages": result["messages"], "blocks": result["blocks"],
        "answer_blocks": result["answer_blocks"],
    }


async def _run_counts(counts: tuple[int, ...], kind: str, queues: int, connections: int,
                      messages_every: int, load_nice: int) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="smp-bench-workers-storm-") as tmp:
        for workers in counts:
            harness.log(f"workers_storm: --workers {workers}, {kind} store, {queues:,} queues "
                        f"over {connections:,} connections")
            results.append(await one_count(workers, kind, queues, connections, messages_every,
                                           Path(tmp), load_nice))
    return results


def table(results: list[dict[str, Any]]) -> str:
    base = results[0]
    rows = []
    for r in results:
        pings = r["ping_ms"]
        rows.append([
            r["workers"], r["store"], f"{r['storm_s']:.2f}",
            f"{r['storm_s'] / base['storm_s']:.2f}", f"{r['subs_per_s']:,.0f}",
            f"{r['router_cpu_s']:.1f}", f"{r['cpu_us_per_sub']:.0f}",
            f"{r['cpu_us_per_sub'] / base['cpu_us_per_sub']:.2f}", f"{r['cores_busy']:.2f}",
            f"{r['load_cores']:.2f}", f"{r['machine_idle_cores']:.2f}",
            " / ".join(str(c) for c in r["connections_per_worker"]),
            " / ".join(f"{w['cpu_s']:.1f}" for w in r["per_worker"]),
            " / ".join(f"{w['started_s']:.1f}-{w['done_s']:.1f}" for w in r["per_worker"]),
            f"{r['load_cpu_us_per_sub']:.0f}", f"{r['load_check_cpu_us_per_sub']:.0f}",
            _ms(r["quiet_ping_ms"]["p99"]), _ms(pings.get("median")), _ms(pings.get("p99")),
            f"{r['rss_before'] / 2**20:.0f}", f"{r['rss_after'] / 2**20:.0f}",
            r["errors"], r["messages"], f"{r['load_average']:.1f}",
        ])
    return harness.md_table(
        ["workers", "store", "storm s", f"x {base['workers']} worker(s)", "SUBs/s",
         "router CPU s (all processes)", "CPU us/SUB", f"CPU x {base['workers']}",
         "cores busy", "load's cores", "machine's idle cores", "connections per worker",
         "CPU s per worker", f"each worker busy from-to s ({DONE_SHARE:.0%} of its CPU)",
         "load's CPU us/SUB", "its check after the clock, CPU us/SUB",
         "quiet PING p99 ms", "PING p50 ms", "PING p99 ms",
         "RSS before MB", "RSS after MB", "errors", "MSGs", "load avg"], rows)


def scaling_table(scaling: dict[str, Any]) -> str:
    return harness.md_table(
        ["the machine: Ed25519 checks", "1 process alone, s",
         f"{scaling['processes']} processes at once, s (each)",
         "slowdown (1.00: cores of their own)"],
        [[f"{scaling['checks']:,} per process", f"{scaling['alone_s']:.2f}",
          f"{scaling['together_s']:.2f}", f"{scaling['slowdown']:.2f}"]])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run(*, quick: bool = False, queues: int | None = None, connections: int | None = None,
        counts: tuple[int, ...] = COUNTS, store: str = STORE, messages_every: int = 0,
        load_nice: int = 0, out: Path | None = None) -> list[dict[str, Any]]:
    queues = queues or (QUICK_QUEUES if quick else QUEUES)
    connections = connections or (QUICK_CONNECTIONS if quick else CONNECTIONS)
    results = trio.run(_run_counts, counts, store, queues, connections, messages_every,
                       load_nice)
    scaling = trio.run(machine_scaling, max(counts), QUICK_CHECKS if quick else CHECKS)
    text = table(results) + "\n\n" + scaling_table(scaling)
    harness.write_results("workers_storm", {"parameters": {
        "queues": queues, "connections": connections, "counts": counts, "store": store,
        "messages_every": messages_every, "client_versions": CLIENT_VERSIONS,
        "load_nice": load_nice},
        "results": results, "machine_scaling": scaling}, text, out)
    print(text)
    return results


def _counts(text: str) -> tuple[int, ...]:
    counts = tuple(int(x) for x in text.split(","))
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: counts of workers, e.g. 1,2")
    return counts


# --- the load (its own process) ---------------------------------------------------------


class _BulkTls:
    """SMP over TLS for the load, read in bulk: TLS on memory buffers over a non-blocking
    socket, so that the storm's answers can be read by one task for every connection
    (`_receive_all`): a read takes whatever the socket has (many blocks), and each TLS
    record is one call into OpenSSL. Through `TlsTransport` (trio's `SSLStream`) each
    connection is a task woken for every write of the router, and each record a pass
    of its own: most of the load's CPU. What `client_handshake` needs of a transport."""

    READ_BYTES = 1 << 18

    def __init__(self, sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO,
                 outgoing: ssl.MemoryBIO) -> None:
        self.sock, self._tls, self._incoming, self._outgoing = sock, tls, incoming, outgoing
        self._buffer = bytearray()
        # Reads go into these, made once: a `recv(READ_BYTES)` or `read(READ_BYTES)` makes
        # a 256 KB object per call, fresh pages the kernel clears for every read.
        self._raw = memoryview(bytearray(self.READ_BYTES))
        self._plain = memoryview(bytearray(self.READ_BYTES))
        self.tls_unique = b""
        self.tls_certificate = b""

    @classmethod
    async def connect(cls, address: RouterAddress) -> _BulkTls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the key hash is checked (client_handshake)
        context.set_alpn_protocols([SMP_ALPN])
        connecting = trio.socket.socket()
        await connecting.connect((address.host, address.port))
        sock = socket.socket(fileno=connecting.detach())
        sock.setblocking(False)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self = cls(sock, context.wrap_bio(incoming, outgoing), incoming, outgoing)
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await trio.lowlevel.wait_readable(sock)
                self._fill()
        await self._flush()
        self.tls_unique = self._tls.get_channel_binding("tls-unique") or b""
        self.tls_certificate = self._tls.getpeercert(binary_form=True) or b""
        return self

    async def _flush(self) -> None:
        data = memoryview(self._outgoing.read())
        while data:
            try:
                data = data[self.sock.send(data):]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)

    def _fill(self) -> None:
        """What the socket has now, into TLS."""
        raw = self._raw
        while True:
            try:
                got = self.sock.recv_into(raw)
            except BlockingIOError:
                break
            if not got:
                raise ConnectionClosed("router closed the connection")
            self._incoming.write(raw[:got])
            if got < self.READ_BYTES:
                break

    def _decrypt(self, into: bytearray | None = None) -> None:
        buffer = self._buffer if into is None else into
        plain = self._plain
        while True:
            try:
                got = self._tls.read(self.READ_BYTES, plain)
            except ssl.SSLWantReadError:
                return
            buffer += plain[:got]

    def read_into(self, into: bytearray) -> None:
        """What the socket has now, decrypted, after `into`'s bytes (with what was
        decrypted before and not taken yet): whole blocks or not."""
        if self._buffer:
            into += self._buffer
            self._buffer = bytearray()
        self._fill()
        self._decrypt(into)

    async def send_block(self, block: bytes) -> None:
        self._tls.write(block)
        await self._flush()

    async def receive_block(self) -> bytes:
        while len(self._buffer) < BLOCK_SIZE:
            await trio.lowlevel.wait_readable(self.sock)
            self._fill()
            self._decrypt()
        block = bytes(self._buffer[:BLOCK_SIZE])
        del self._buffer[:BLOCK_SIZE]
        return block

    async def aclose(self) -> None:
        self.sock.close()


class _LoadConnection:
    """One connection of the load: its SUB blocks, signed, and the corrIds not answered."""

    def __init__(self, transport: _BulkTls, version: int, session_id: bytes) -> None:
        self.transport, self.version, self.session_id = transport, version, session_id
        self.blocks: list[bytes] = []
        self.unanswered: set[bytes] = set()
        self.messages = 0  # MSGs to wait for
        self.pending = bytearray()  # what came of a block not whole yet
        # Each answer block's content, without its padding (None: a length past the block):
        # a fifth of the bytes kept, and no growing buffer copied as it grows.
        self.contents: list[bytes | None] = []
        self._counted = 0  # transmissions in the whole blocks received

    def sign(self, first: int, count: int, messages_every: int) -> None:
        seed = identities.keys()["rcv_seed"]
        command = encode_command(SUB(), self.version)
        packer = BatchPacker()
        prefix = os.urandom(16)
        for i in range(first, first + count):
            corr_id = prefix + i.to_bytes(8, "big")
            rid = identities.recipient_id(i)
            raw = encode_transmission(Transmission(
                crypto.authorize(seed, self.session_id, corr_id, rid, command), corr_id, rid,
                command), self.version)
            if not packer.add(raw):
                self.blocks.append(packer.take_block())
                packer = BatchPacker()
                assert packer.add(raw)
            self.unanswered.add(corr_id)
            self.messages += bool(messages_every and i % messages_every == 0)
        if len(packer):
            self.blocks.append(packer.take_block())

    async def send(self) -> None:
        for block in self.blocks:
            await self.transport.send_block(block)

    def take(self) -> bool:
        """Keep the answers' contents that came; whether every answer is in: the whole
        blocks hold as many transmissions as there are SUBs and waiting messages, counted
        from each block's header (its third byte: the batch's count). Nothing is taken
        apart here (`check` does it once the clock has stopped): the load shares the
        router's cores, and what it spends is taken from them."""
        pending = self.pending
        self.transport.read_into(pending)
        contents = self.contents
        while len(pending) >= BLOCK_SIZE:
            length = pending[0] << 8 | pending[1]
            contents.append(bytes(pending[2:2 + length]) if length <= MAX_CONTENT
                            else None)
            self._counted += pending[2]
            del pending[:BLOCK_SIZE]  # from the front: no copy of the rest
        return self._counted >= len(self.unanswered) + self.messages

    def check(self) -> tuple[int, int]:
        """Every answer received, taken apart: each corrId answered once, with OK; a
        push, a MSG; every SUB answered. (MSGs, errors): anything else, and every SUB
        not answered, is an error."""
        unanswered, version = set(self.unanswered), self.version
        messages = errors = 0
        if self.pending:
            errors += 1  # a block cut short
        for content in self.contents:
            try:
                if content is None:
                    raise ProtocolError(BLOCK, "a block's length past its end")
                transmissions = list(iter_batch_content(content))
            except ProtocolError:
                errors += 1
                continue
            for t in transmissions:
                # A router's answer has no authorization: its corrId follows at once.
                corr_id = t[2:2 + t[1]] if t[0] == 0 else None
                command = t[entity_and_command_offset(t, version)[1]:]
                if corr_id:
                    if corr_id in unanswered and command == b"OK":
                        unanswered.discard(corr_id)
                        continue
                    unanswered.discard(corr_id)
                elif command.startswith(b"MSG "):
                    messages += 1
                    continue
                errors += 1
        return messages, errors + len(unanswered)


async def _receive_all(loads: list[_LoadConnection]) -> None:
    """Every connection's answers, read by one task: woken when any socket has some,
    it reads all those that do (`epoll`), rather than a task per connection woken for
    each of the router's writes."""
    waiting = {load.transport.sock.fileno(): load for load in loads}
    with select.epoll() as ready:
        for fd, load in list(waiting.items()):
            ready.register(fd, select.EPOLLIN)
            if load.take():  # what came with the handshake
                ready.unregister(fd)
                del waiting[fd]
        while waiting:
            await trio.lowlevel.wait_readable(ready.fileno())
            for fd, _ in ready.poll(0):
                load = waiting[fd]
                if load.take():
                    ready.unregister(fd)
                    del waiting[fd]


async def _load(address: str, queues: int, connections: int, messages_every: int) -> None:
    counts = {"subs": queues, "errors": 0, "messages": 0}
    router = parse_address(address)
    loads: list[_LoadConnection] = []
    limiter = trio.CapacityLimiter(CONNECT_AT_ONCE)

    async def connect_one(first: int, count: int) -> None:
        async with limiter:
            transport = await _BulkTls.connect(router)
            session = await client_handshake(transport, router.key_hash, CLIENT_VERSIONS)
        load = _LoadConnection(transport, session.version, session.session_id)
        load.sign(first, count, messages_every)
        loads.append(load)

    async with trio.open_nursery() as connecting:
        first = 0
        for count in harness.split(queues, connections):
            connecting.start_soon(connect_one, first, count)
            first += count
    print("ready", flush=True)
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    while b"go" not in await stdin.receive_some(16):
        pass
    began = time.perf_counter()
    async with trio.open_nursery() as storming:
        for load in loads:
            storming.start_soon(load.send)
        storming.start_soon(_receive_all, loads)
    counts["seconds"] = time.perf_counter() - began
    # The clock has stopped: the runner reads the CPU of every process now, then the
    # answers are checked (their CPU is said apart).
    print("stopped", flush=True)
    checking = time.process_time()
    for load in loads:
        messages, errors = load.check()
        counts["messages"] += messages
        counts["errors"] += errors
    counts["check_cpu_s"] = time.process_time() - checking
    counts["blocks"] = sum(len(load.blocks) for load in loads)
    counts["answer_blocks"] = sum(len(load.contents) for load in loads)
    # Said before the connections close: their closing is not the storm.
    print(json.dumps(counts), flush=True)
    for load in loads:
        await load.transport.aclose()


def load_main(argv: list[str]) -> None:
    """`python -m bench.workers_storm load ADDRESS QUEUES CONNECTIONS MESSAGES_EVERY`:
    prints `ready` once every connection is open and its SUBs are signed, storms on a
    `go` line from stdin, then prints what it got as one JSON line."""
    address, queues, connections, messages_every = argv[0], *map(int, argv[1:4])
    if os.environ.get(_LOAD_ENV) != "0":
        os.nice(19)  # as bench.storm's load: the router is what is measured
    trio.run(_load, address, queues, connections, messages_every)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "verify":
        verify_loop(int(argv[1]))
        return 0
    if argv and argv[0] == "load":
        load_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench workers_storm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=lambda t: int(float(t)))
    parser.add_argument("--connections", type=lambda t: int(float(t)))
    parser.add_argument("--counts", type=_counts, default=COUNTS,
                        help="counts of workers, run in this order (default 1,2)")
    parser.add_argument("--store", default=STORE, choices=("memory", "journal", "sqlite"),
                        help="the store kind (default memory)")
    parser.add_argument("--messages-every", type=int, default=0,
                        help="a message in every K-th queue (0: none, as the issue's storm)")
    parser.add_argument("--load-nice", type=int, choices=(0, 19), default=0,
                        help="the load process's priority (default 0: at 19 it starves "
                        "once the workers take both cores, and they wait for it)")
    parser.add_argument("--quick", action="store_true", help="a small storm, scratch output")
    parser.add_argument("--out", type=Path, help="results directory (default bench/results; "
                        "with --quick a new scratch directory)")
    args = parser.parse_args(argv)
    out = args.out
    if out is None and args.quick:
        out = Path(tempfile.mkdtemp(prefix="smp-bench-workers-storm-"))
    try:
        run(quick=args.quick, queues=args.queues, connections=args.connections,
            counts=args.counts, store=args.store, messages_every=args.messages_every,
            load_nice=args.load_nice, out=out)
    except harness.BenchError as exc:
        print(f"python -m bench workers_storm: error: {exc}", file=sys.stderr)
        return 1
    print(f"results: {out or harness.RESULTS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
