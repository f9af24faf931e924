"""fairness: another client's PING while connections flood blocks of signed DEL/KEY/NEW.

    python -m bench fairness [--connections 16] [--seconds 8] [--root DIR] [--out DIR]

The router runs in a process of its own (`smp-router serve`, memory store, the
NEW rate limits lifted so that every NEW makes its keys), from this checkout or
from the source tree `--root` (another checkout, to compare). The flood comes
from one more process: each of its connections, in a loop, creates a block's
worth of queues with one block of NEW, secures them with one block of KEY and
deletes them with one block of DEL, every transmission signed with the queue's
own key, so the router checks every signature and makes every key. Meanwhile
this process sends a PING every `PING_INTERVAL` (without waiting for the last
PONG) and records how long each PONG takes: first with no flood (quiet), then
during the flood.

`tests/router/test_router_fairness.py` runs the same measurement (`measure`)
against a router it starts, and bounds the median during the flood.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from bench.one_process import one_process
from router.client import SMPClient, open_client
from router.protocol import crypto
from router.protocol.block import BatchPacker
from router.protocol.types import DEL, IDS, KEY, NEW, OK

PING_INTERVAL = 0.02  # seconds between two PINGs
QUIET_PINGS = 50
WARMUP = 1.0  # seconds of flood before the PINGs that count
QUEUES_PER_BLOCK = 80  # as many NEW as one block holds
START_TIMEOUT = 30.0

# Every NEW of the flood is served in full: no connection, address or router bucket
# runs dry (router/server/core/limits.py); the configuration file's [LIMITS] keys.
_CONFIG_KEYS = {
    "new_queues_per_second", "new_queues_burst",
    "new_queues_per_second_per_address", "new_queues_burst_per_address",
    "new_queues_per_second_total", "new_queues_burst_total",
}


# --- the flood (its own process) ---------------------------------------------------


class _Flooder:
    """One connection's flood. Its blocks of NEW and KEY are signed once and sent again
    and again (each NEW makes a queue, each KEY sets the same key again: OK), so that
    the flood costs the router far more than it costs this process; its DEL blocks
    delete the queues the last NEW block made, signed as they come."""

    def __init__(self, client: SMPClient) -> None:
        self.client = client
        self.conn = client._conn  # raw blocks of transmissions signed once
        self.seed, auth_key = crypto.new_ed25519()
        dh_key = crypto.new_x25519()[1]
        self.new_block = self._block(
            [(b"", NEW(auth_key, dh_key, None, False, True), self.seed)] * QUEUES_PER_BLOCK
        )
        self.key_block = b""

    def _block(self, requests: list[tuple[bytes, Any, bytes]]) -> bytes:
        packer = BatchPacker()
        for entity_id, cmd, seed in requests:
            corr_id = os.urandom(24)
            assert packer.add(self.conn._encode(corr_id, entity_id, cmd, seed)), "block full"
        return packer.take_block()

    async def _exchange(self, block: bytes, count: int) -> list[Any]:
        await self.client.send_raw_block(block)
        return [await self.client.next_raw_transmission() for _ in range(count)]

    async def prepare(self) -> None:
        created = await self._exchange(self.new_block, QUEUES_PER_BLOCK)
        sender_key = crypto.new_ed25519()[1]
        self.key_block = self._block(
            [(r.response.rcv_id, KEY(sender_key), self.seed) for r in created]
        )
        secured = await self._exchange(self.key_block, QUEUES_PER_BLOCK)
        assert all(isinstance(r.response, OK) for r in secured), secured[:2]

    async def run(self, deadline: float, counts: dict[str, int]) -> None:
        while trio.current_time() < deadline:
            created = await self._exchange(self.new_block, QUEUES_PER_BLOCK)
            secured = await self._exchange(self.key_block, QUEUES_PER_BLOCK)
            made = [r.response.rcv_id for r in created if isinstance(r.response, IDS)]
            deleted = await self._exchange(
                self._block([(rid, DEL(), self.seed) for rid in made]), len(made)
            )
            answers = created + secured + deleted
            counts["transmissions"] += len(answers)
            counts["cycles"] += 1
            counts["not_ok"] += sum(not isinstance(r.response, IDS | OK) for r in answers)


async def _flood(address: str, connections: int, seconds: float) -> dict[str, int]:
    counts = {"transmissions": 0, "cycles": 0, "not_ok": 0}
    async with trio.open_nursery() as nursery:
        flooders = [_Flooder(await nursery.start(_hold_client, address))
                     for _ in range(connections)]
        for flooder in flooders:
            await flooder.prepare()
        print("ready", flush=True)
        deadline = trio.current_time() + seconds
        async with trio.open_nursery() as flooding:
            for flooder in flooders:
                flooding.start_soon(flooder.run, deadline, counts)
        nursery.cancel_scope.cancel()
    return counts


async def _hold_client(address: str, *, task_status: trio.TaskStatus[SMPClient]) -> None:
    async with open_client(address) as client:
        task_status.started(client)
        await trio.sleep_forever()


def flood_main(argv: list[str]) -> None:
    """`python -m bench.fairness flood ADDRESS CONNECTIONS SECONDS`: prints `ready` once
    every connection is open, floods, then prints what it sent as one JSON line."""
    address, connections, seconds = argv[0], int(argv[1]), float(argv[2])
    # The load generator yields the CPU to the router it loads when they share a core:
    # what is measured is how the router shares its own time among its clients.
    os.nice(19)
    print(json.dumps(trio.run(_flood, address, connections, seconds)), flush=True)


# --- the measurement ----------------------------------------------------------------


async def _ping_ms(client: SMPClient) -> float:
    started = time.perf_counter()
    await client.ping()
    return (time.perf_counter() - started) * 1000


async def _pings(client: SMPClient, count: int | None, until: float | None) -> list[float]:
    """PINGs sent on a clock, one every `PING_INTERVAL` whether or not the last one
    was answered: each samples the router at an instant that does not depend on
    its stalls (a PING sent only once the last one came back would sample the
    quiet moments more often)."""
    samples: list[float] = []

    async def one() -> None:
        samples.append(await _ping_ms(client))

    async with trio.open_nursery() as nursery:
        sent = 0
        next_at = trio.current_time()
        while count is None or sent < count:
            if until is not None and next_at >= until:
                break
            nursery.start_soon(one)
            sent += 1
            next_at += PING_INTERVAL
            await trio.sleep_until(next_at)
    return samples


def summary_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"median": statistics.median(ordered), "p90": pick(0.9), "p99": pick(0.99),
            "max": ordered[-1], "samples": len(ordered)}


async def measure(address: str, connections: int = 16, seconds: float = 8.0) -> dict[str, Any]:
    """PING round trips (ms) with no flood, then during `seconds` of flood from
    `connections` connections in another process; and what the flood got done."""
    async with open_client(address) as client:
        await client.ping()
        quiet = await _pings(client, QUIET_PINGS, None)
        flood = await trio.lowlevel.open_process(
            [sys.executable, "-m", "bench.fairness", "flood", address, str(connections),
             str(seconds)],
            stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent,
        )
        try:
            lines = _lines(flood.stdout)
            with trio.fail_after(START_TIMEOUT):
                ready = await lines.__anext__()
            assert ready == "ready", ready
            started = trio.current_time()
            await trio.sleep(WARMUP)
            during = await _pings(client, None, started + seconds - 0.5)
            with trio.fail_after(seconds + 60):
                done = json.loads(await lines.__anext__())
                await flood.wait()
        finally:
            await _stop(flood)
    return {"connections": connections, "seconds": seconds, "queues_per_block": QUEUES_PER_BLOCK,
            "quiet_ms": summary_ms(quiet), "flood_ms": summary_ms(during), "flood": done,
            "load_average": os.getloadavg()}


async def _lines(stream: Any) -> AsyncIterator[str]:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode().strip()


# --- the router in a process of its own --------------------------------------------------


@asynccontextmanager
async def router_process(root: Path | None = None) -> AsyncIterator[str]:
    """`smp-router serve` on 127.0.0.1 (memory store, NEW unlimited) from `root` (this
    checkout by default); yields its address, stops it on exit."""
    root = root or Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="smp-fairness-") as tmp:
        config = Path(tmp) / "router.ini"
        limits = "".join(f"{key} = {10**9}\n" for key in sorted(_CONFIG_KEYS))
        config.write_text("[LIMITS]\n" + limits)
        env = {**os.environ, "PYTHONPATH": str(root)}
        router = await trio.lowlevel.open_process(
            [sys.executable, "-m", "router.server", "serve", *one_process(root), "--host",
             "127.0.0.1", "--port", "0", "--store", "memory", "--config", str(config)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=root, env=env,
        )
        try:
            with trio.fail_after(START_TIMEOUT):
                line = await _lines(router.stdout).__anext__()
            # the smp:// address wherever the tree's ready line puts it
            yield next(word for word in line.split() if word.startswith("smp://"))
        finally:
            await _stop(router)


async def _stop(process: trio.Process) -> None:
    """Stop a process this module started (at once if it has ended already)."""
    with trio.CancelScope(shield=True):
        if process.poll() is None:
            process.terminate()
            with trio.move_on_after(10):
                await process.wait()
            if process.poll() is None:
                process.kill()
                await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()


# --- python -m bench fairness ---------------------------------------------------------------


def _report(result: dict[str, Any], label: str) -> str:
    q, f = result["quiet_ms"], result["flood_ms"]
    return (f"| {label} | {q['median']:.2f} | {q['p99']:.2f} | {f['median']:.1f} | {f['p90']:.1f} "
            f"| {f['p99']:.1f} | {f['max']:.1f} | {f['samples']} "
            f"| {result['flood']['transmissions'] / result['seconds']:.0f} |")


async def _run(roots: list[tuple[str, Path | None]], connections: int, seconds: float) -> list:
    results = []
    for label, root in roots:
        async with router_process(root) as address:
            result = await measure(address, connections, seconds)
        result["label"] = label
        results.append(result)
        print(_report(result, label), flush=True)
    return results


def main(argv: list[str]) -> int:
    if argv and argv[0] == "flood":
        flood_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench fairness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--root", type=Path, action="append", default=[],
                        help="also measure the router of this source tree (before this one)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    roots: list[tuple[str, Path | None]] = [(str(r), r) for r in args.root]
    roots.append(("this checkout", None))
    print("| router | quiet PING p50 ms | quiet p99 | flood PING p50 ms | flood p90 | flood p99 "
          "| flood max | PINGs | flood transmissions/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    results = trio.run(_run, roots, args.connections, args.seconds)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
