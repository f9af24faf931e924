"""service_subscribe: a service's queues subscribed by one SUBS against SUBs in blocks, in one run.

    python -m bench service_subscribe [--queues N] [--pending K]

Each way runs on a router of its own process (`python -m router.server serve`,
memory store, its native TLS listener on 127.0.0.1), started on a data
directory filled beforehand through the store API: N queue records
(`bench.identities`), one message waiting in K of them spread evenly, written
as a memory store snapshot (the quickest kind to fill and to load):

- `SUBS`: the queues are associated with a service whose record (a self-signed
  client certificate, bench/service_client.py) is in the snapshot; the service
  connects with that certificate, sends `SUBS n idsHash` and reads the `SOKS`,
  the K messages and `ALLS`;
- `SUB blocks`: the same queues unassociated; an ordinary client sends a signed
  `SUB` per queue, 100 per block, reading the answers and the K messages as they
  come. Every SUB is signed before the clock starts: the figures are the router's
  work and the wire's, not the client's signing.

Meanwhile another client, in a process of its own, sends a PING every 20 ms
(the next one once the last is answered) and keeps every round trip. Figures:
the time from the first command to the last message (and `ALLS`), the PINGs'
p50 / p99 / max, and the router process's RSS sampled every 50 ms: before
the first command, the highest seen until the last message, and the growth.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench import harness, identities
from bench.one_process import one_process
from bench.service_client import (
    ServiceCert,
    ServiceSession,
    connect_service,
    large,
    pad,
    parse_service_answer,
    plain_hello,
    self_signed_cert,
)
from router.client._address import parse_address
from router.protocol.ids_hash import queue_ids_hash
from store import Message, open_stores
from store.interfaces import ServiceRecord

SUBS_PER_BLOCK = 100  # a signed SUB is about 160 bytes with its length
FILL_CHUNK = 10_000  # queues between two checkpoints while filling
PING_INTERVAL = 0.02
RSS_INTERVAL = 0.05
START_TIMEOUT = 900.0  # loading a snapshot of a million queues takes a while on a busy machine
HERE = Path(__file__).resolve().parent.parent


# --- the store, filled before the router starts ----------------------------------------


async def _fill(data_dir: Path, n: int, pending: int, service: ServiceRecord | None) -> None:
    """Queues 0..n-1 of `bench.identities`, associated with `service` if given, and one
    message in every (n // pending)-th of the first `pending` such; saved on exit as the
    memory store's snapshot."""
    now = int(time.time())
    every = max(1, n // pending)
    async with open_stores("memory", data_dir, fsync="never") as stores:
        queues, messages = stores.queues, stores.messages
        if service is not None:
            assert await queues.add_service(service) == service
        service_id = None if service is None else service.service_id
        for i in range(n):
            rec = identities.queue_record(i, secured=True)
            if service_id is not None:
                rec = replace(rec, rcv_service_id=service_id)
            assert await queues.add_queue(rec) is None
            if i % every == 0 and i // every < pending:
                msg = Message(os.urandom(24), now, b"F", b"m" * 100)
                await messages.write_message(rec.recipient_id, msg, 128)
            if i % FILL_CHUNK == 0:
                await trio.lowlevel.checkpoint()


def _service_record(cert: ServiceCert) -> ServiceRecord:
    identity = cert.identity
    return ServiceRecord(secrets.token_bytes(24), b"M", identity,
                         hashlib.sha256(identity).digest(), int(time.time()))


# --- the router and the pinger, each a process of its own -----------------------------


async def _start_router(data_dir: Path) -> tuple[trio.Process, str]:
    command = [sys.executable, "-m", "router.server", "serve", *one_process(), "--host",
               "127.0.0.1", "--port", "0", "--store", "memory", "--data-dir", str(data_dir),
               "--no-stats-log", "--log-level", "warning"]
    router = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(HERE)})
    assert router.stdout is not None
    with trio.fail_after(START_TIMEOUT):
        line = await _read_line(router.stdout)
    try:
        return router, harness.smp_address(line)
    except harness.BenchError:
        router.kill()
        raise


async def _read_line(stream: trio.abc.ReceiveStream) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        data += chunk
    return data.decode()


async def _pinger(address: str) -> None:
    """`python -m bench.service_subscribe ping ADDRESS`: PINGs until a line on stdin,
    then the round trips (ms) as one JSON line."""
    parsed = parse_address(address)
    client = await connect_service(parsed.port, parsed.key_hash, None)
    await plain_hello(client, parsed.key_hash)
    await client.command(b"", b"PING")
    print("ready", flush=True)
    samples: list[float] = []
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with trio.open_nursery() as nursery:

        async def ping() -> None:
            while True:
                started = time.perf_counter()
                await client.command(b"", b"PING")
                took = time.perf_counter() - started
                samples.append(took * 1000)
                await trio.sleep(max(0.0, PING_INTERVAL - took))

        nursery.start_soon(ping)
        await stdin.receive_some(1)
        nursery.cancel_scope.cancel()
    print(json.dumps(samples), flush=True)


async def _rss_sampler(process: psutil.Process, peak: list[int]) -> None:
    while True:
        peak[0] = max(peak[0], process.memory_info().rss)
        await trio.sleep(RSS_INTERVAL)


# --- one way -------------------------------------------------------------------------


def _signed_sub_blocks(client: ServiceSession, n: int) -> list[bytes]:
    key = Ed25519PrivateKey.from_private_bytes(identities.keys()["rcv_seed"])
    blocks = []
    for at in range(0, n, SUBS_PER_BLOCK):
        pairs = [client.transmission(identities.recipient_id(i), b"SUB", key,
                                     service_signed=False)
                 for i in range(at, min(n, at + SUBS_PER_BLOCK))]
        blocks.append(pad(bytes((len(pairs),)) + b"".join(large(t) for _, t in pairs)))
    return blocks


async def _run(way: str, n: int, pending: int, workdir: Path,
               cert: ServiceCert | None = None) -> dict[str, float]:
    data_dir = workdir / way
    service = None
    if way == "subs":
        cert = cert or self_signed_cert()
        service = _service_record(cert)
    began = time.perf_counter()
    await _fill(data_dir, n, pending, service)
    figures: dict[str, float] = {"fill_s": time.perf_counter() - began}
    began = time.perf_counter()
    router, address = await _start_router(data_dir)
    figures["router_start_s"] = time.perf_counter() - began
    pinger = None
    try:
        parsed = parse_address(address)
        port, key_hash = parsed.port, parsed.key_hash
        if way == "subs":
            client = await connect_service(port, key_hash, cert)
            assert service is not None and client.service_id == service.service_id
            ids_hash = queue_ids_hash(identities.recipient_id(i) for i in range(n))
        else:
            client = await connect_service(port, key_hash, None)
            await plain_hello(client, key_hash)
            began = time.perf_counter()
            blocks = _signed_sub_blocks(client, n)
            figures["signing_s"] = time.perf_counter() - began
        pinger = await trio.lowlevel.open_process(
            [sys.executable, "-m", "bench.service_subscribe", "ping", address],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=HERE,
            env={**os.environ, "PYTHONPATH": str(HERE)})
        assert pinger.stdout is not None and pinger.stdin is not None
        with trio.fail_after(60):
            ready = await _read_line(pinger.stdout)
        assert ready.strip() == "ready", ready
        process = psutil.Process(router.pid)
        rss_before = process.memory_info().rss
        cpu = process.cpu_times()
        cpu_before = cpu.user + cpu.system
        peak = [rss_before]
        messages = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_rss_sampler, process, peak)
            started = time.perf_counter()
            if way == "subs":
                soks = await client.subs(n, ids_hash)
                assert parse_service_answer(soks.command)[1] == n, soks
                while True:
                    event = await client.next_event()
                    if event.command == b"ALLS":
                        break
                    messages += event.command.startswith(b"MSG")
            else:
                answered = 0

                async def send_blocks() -> None:
                    for block in blocks:
                        await client.stream.send_all(block)

                nursery.start_soon(send_blocks)  # read while writing, as a client must
                while answered < n or messages < pending:
                    for event in await client.receive():
                        if event.command.startswith(b"MSG"):
                            messages += 1
                        if event.corr_id:
                            answered += 1
            took = time.perf_counter() - started
            peak[0] = max(peak[0], process.memory_info().rss)
            cpu = process.cpu_times()
            nursery.cancel_scope.cancel()
        await pinger.stdin.send_all(b"stop\n")
        with trio.fail_after(60):
            pings = json.loads(await _read_line(pinger.stdout))
        await client.aclose()
    finally:
        if pinger is not None and pinger.returncode is None:
            pinger.kill()
        router.kill()  # its snapshot is not needed again
        await router.wait()
    quantiles = (statistics.quantiles(pings, n=100, method="inclusive") if len(pings) > 1
                 else pings * 99)
    figures.update({
        "seconds": took, "messages": messages, "pings": len(pings),
        "ping_p50_ms": quantiles[49], "ping_p99_ms": quantiles[98],
        "ping_max_ms": max(pings),
        "router_rss_before_mb": rss_before / 2**20, "router_rss_peak_mb": peak[0] / 2**20,
        "router_rss_growth_mb": (peak[0] - rss_before) / 2**20,
        "router_cpu_s": cpu.user + cpu.system - cpu_before,
    })
    return figures


ROWS = ("seconds", "messages", "ping_p50_ms", "ping_p99_ms", "ping_max_ms", "pings",
        "router_rss_before_mb", "router_rss_peak_mb", "router_rss_growth_mb", "router_cpu_s",
        "fill_s", "router_start_s")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ping"]:
        trio.run(_pinger, argv[1])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench service_subscribe")
    parser.add_argument("--queues", type=lambda t: int(float(t)), default=20_000)
    parser.add_argument("--pending", type=lambda t: int(float(t)), default=200)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="service-subscribe-") as tmp:
        for way in ("subs", "sub"):
            figures[way] = trio.run(_run, way, args.queues, args.pending, Path(tmp))
            print(f"{way}: {json.dumps(figures[way])}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(f"{args.queues} queues, {args.pending} with a message waiting, one run; "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"(1 min), {os.cpu_count()} cores")
    print("| figure | one SUBS | SUB blocks | SUB blocks / SUBS |")
    print("|---|---|---|---|")
    for key in ROWS:
        a, b = figures["subs"][key], figures["sub"][key]
        print(f"| {key} | {a:.2f} | {b:.2f} | {b / a if a else float('nan'):.2f} |")
    print(f"SUB side: {figures['sub']['signing_s']:.1f} s signing the SUBs before the clock")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
