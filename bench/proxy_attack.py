"""proxy --attack: private routing while hostile clients fill the proxy with dead routes.

    python -m bench proxy --attack [--sources 1 8] [--connections 40] [--in-flight 32]
        [--tarpits 64] [--warmup 25] [--tries 20] [--base DIR] [--out FILE]

Two routers run as processes of their own on 127.0.0.1 (`smp-router serve`, memory
store, its default proxy settings but for loopback destinations allowed): A, the
proxy, and B, a real destination. Tarpits (TCP listeners on 127.0.0.1 that accept and
never answer) stand in for destinations that hang. `--connections` connections to A
from `--sources` addresses (127.0.0.10, .11, ...; the whole of 127/8 is loopback on
Linux), each with `--in-flight` PRXYs in flight, keep asking A for routes to ever new
tarpit destinations (random key hashes). A fresh client from another address
(127.0.0.2) asks A for a route to B `--tries` times, once a second, before the attack
and from `--warmup` seconds into it, each time on a new connection. Measured: its
PKEYs and the PRXY's time (median), A's descriptors and resident memory (peak, from
/proc), the attackers' answers per second.

The scenario's parts (`tarpits`, `attack`, `fresh_tries`) are the test's too
(tests/router/test_router_proxy_attack.py), there with a small pool and short
timeouts.
"""

from __future__ import annotations

import argparse
import contextvars
import functools
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from router.client import _transport, open_client
from router.protocol.types import ERR, PKEY, PRXY

FRESH_SOURCE = "127.0.0.2"
_SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("source", default=None)


def attacker_sources(count: int) -> list[str]:
    return [f"127.0.0.{10 + n}" for n in range(count)]


@contextmanager
def source_addresses() -> Iterator[None]:
    """Client connections opened in a task with `_SOURCE` set are bound to that
    loopback address (the client has no option for it: only tests and this bench need
    one); others, the router's own included, are left as they are."""
    original = _transport._open_tcp

    async def open_tcp(address: Any) -> trio.SocketStream:
        source = _SOURCE.get()
        if source is None:
            return await original(address)
        return await trio.open_tcp_stream(address.host, address.port, local_address=source)

    _transport._open_tcp = open_tcp  # type: ignore[assignment]
    try:
        yield
    finally:
        _transport._open_tcp = original  # type: ignore[assignment]


@asynccontextmanager
async def tarpits(count: int) -> AsyncIterator[list[int]]:
    """`count` listeners on 127.0.0.1 that accept and never answer; their ports."""

    async def hold(stream: trio.SocketStream) -> None:
        """Read and never answer, until the other side gives up (so that the tarpits'
        own descriptors do not pile up)."""
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass

    async with trio.open_nursery() as nursery:
        ports = []
        for _ in range(count):
            listeners = await nursery.start(
                functools.partial(trio.serve_tcp, hold, 0, host="127.0.0.1"))
            ports.append(listeners[0].socket.getsockname()[1])
        try:
            yield ports
        finally:
            nursery.cancel_scope.cancel()


@dataclass
class Tally:
    answers: Counter[str] = field(default_factory=Counter)

    def add(self, answer: object) -> None:
        name = type(answer).__name__
        if isinstance(answer, ERR):
            name = f"ERR {answer.error.tag} {answer.error.arg.decode(errors='replace')}"
        self.answers[name] += 1

    @property
    def total(self) -> int:
        return sum(self.answers.values())


async def attack(a_address: str, ports: list[int], sources: list[str], connections: int,
                 in_flight: int, tally: Tally) -> None:
    """Until cancelled: `connections` connections spread over `sources`, each with
    `in_flight` PRXYs for ever new tarpit destinations."""

    async def one_connection(source: str) -> None:
        _SOURCE.set(source)
        async with open_client(a_address) as client, trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(ask_forever, client)

    async def ask_forever(client: Any) -> None:
        while True:
            prxy = PRXY(("127.0.0.1",), str(random.choice(ports)), os.urandom(32), None)
            tally.add(await client.command(b"", prxy))

    async with trio.open_nursery() as nursery:
        for n in range(connections):
            nursery.start_soon(one_connection, sources[n % len(sources)])


@dataclass
class Try:
    pkey: bool
    seconds: float
    answer: str


async def fresh_tries(a_address: str, prxy: PRXY, count: int, interval: float,
                      source: str = FRESH_SOURCE, timeout: float = 30.0) -> list[Try]:
    """`count` tries, `interval` apart, each on a new connection from `source`: the
    PRXY's answer and time."""
    _SOURCE.set(source)
    tries = []
    for n in range(count):
        if n:
            await trio.sleep(interval)
        async with open_client(a_address) as client:
            start = time.perf_counter()
            with trio.move_on_after(timeout):
                answer = await client.command(b"", prxy)
                tries.append(Try(isinstance(answer, PKEY), time.perf_counter() - start,
                                 type(answer).__name__ if not isinstance(answer, ERR)
                                 else answer.error.arg.decode(errors="replace")))
                continue
            tries.append(Try(False, timeout, "no answer"))
    return tries


def summary(tries: list[Try]) -> dict[str, Any]:
    ok = [t.seconds for t in tries if t.pkey]
    return {"tries": len(tries), "pkey": len(ok),
            "p50_ms": statistics.median(ok) * 1000 if ok else None,
            "answers": dict(Counter(t.answer for t in tries))}


# --- the bench: A and B as processes --------------------------------------------------------

def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def resident_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def sample(pid: int, peaks: dict[str, int], period: float = 0.25) -> None:
    while True:
        peaks["descriptors"] = max(peaks.get("descriptors", 0), descriptors(pid))
        peaks["rss"] = max(peaks.get("rss", 0), resident_bytes(pid))
        await trio.sleep(period)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from router.client import parse_address

    from .proxy import router_process

    async with router_process(args.base) as (a_address, a_pid), \
            router_process(args.base) as (b_address, _), tarpits(args.tarpits) as ports:
        b = parse_address(b_address)
        prxy = PRXY(("127.0.0.1",), str(b.port), b.key_hash, None)
        with source_addresses():
            before_peaks: dict[str, int] = {}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sample, a_pid, before_peaks)
                before = await fresh_tries(a_address, prxy, 5, 1.0)
                nursery.cancel_scope.cancel()
            tally, peaks = Tally(), {}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack, a_address, ports, attacker_sources(args.sources),
                                   args.connections, args.in_flight, tally)
                nursery.start_soon(sample, a_pid, peaks)
                started = time.perf_counter()
                await trio.sleep(args.warmup)
                during = await fresh_tries(a_address, prxy, args.tries, 1.0)
                seconds = time.perf_counter() - started
                nursery.cancel_scope.cancel()
    return {"before": summary(before), "during": summary(during),
            "attack_seconds": seconds, "attacker_answers": dict(tally.answers),
            "attacker_answers_per_second": tally.total / seconds,
            "a_before": before_peaks, "a_during_peak": peaks,
            "settings": vars(args) | {"out": str(args.out), "base": str(args.base)}}


def report(results: list[dict[str, Any]]) -> str:
    lines = ["| routers | attackers | fresh client's PKEYs before | during | PRXY p50 ms before | "
             "during | during / before | A's descriptors peak (before) | A's RSS MB peak "
             "(before) | attackers' answers/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s, b, d = r["settings"], r["before"], r["during"]
        ratio = (d["p50_ms"] / b["p50_ms"]) if d["p50_ms"] and b["p50_ms"] else float("nan")
        lines.append(
            f"| {'this checkout' if s['base'] == 'None' else s['base']} "
            f"| {s['connections']} connections x {s['in_flight']} PRXYs from "
            f"{s['sources']} address{'es' if s['sources'] > 1 else ''} "
            f"| {b['pkey']}/{b['tries']} | {d['pkey']}/{d['tries']} | {b['p50_ms']:.1f} "
            f"| {d['p50_ms'] or float('nan'):.1f} | {ratio:.2f}x "
            f"| {r['a_during_peak']['descriptors']} ({r['a_before']['descriptors']}) "
            f"| {r['a_during_peak']['rss'] / 2**20:.0f} ({r['a_before']['rss'] / 2**20:.0f}) "
            f"| {r['attacker_answers_per_second']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench proxy --attack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, nargs="+", default=[1, 8],
                        help="attacker addresses, one run for each count (default 1 8)")
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--tarpits", type=int, default=64)
    parser.add_argument("--warmup", type=float, default=25.0)
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--base", type=Path, help="also run the routers of the checkout at "
                        "DIR (e.g. a checkout of the tree before the pool was shared), first")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here, and the "
                        "table beside it (.md)")
    args = parser.parse_args(argv)
    results = []
    for base in ([args.base] if args.base else []) + [None]:
        for sources in args.sources:
            run: Callable[..., Any] = measure
            results.append(trio.run(run, argparse.Namespace(
                **{**vars(args), "sources": sources, "base": base})))
    text = report(results)
    print(text)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
        args.out.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
