"""proxy: sending through a proxy router against sending straight to the destination.

    python -m bench proxy [--messages 2000] [--window 16] [--repeats 3] [--out FILE]
    python -m bench proxy --attack ...   private routing under attack (proxy_attack.py)

Two routers run as processes of their own (`smp-router serve`, memory store, on
127.0.0.1): A, the proxy, and B, the destination. A recipient on B subscribes to 8
queues and acknowledges every message as it comes. In each repetition, one sender
sends `--messages` messages of 100 bytes round-robin to those queues, with
`--window` SENDs in flight, first straight to B (its own connection to B), then
through A (PRXY once, then PFWD for each message; docs/protocol.md#private-message-routing).
Measured per way: messages delivered per second (from the first SEND to the last MSG),
the round trip of one SEND waited for alone (100 of them, median), and the CPU time
each router process spent per message (from /proc). The ratios are taken inside a
repetition; the figures are medians over the repetitions.
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
from router.client import MessageEvent, RecipientQueue, SMPClient, open_client

QUEUES = 8
BODY = b"x" * 100
ROUND_TRIPS = 100
START_TIMEOUT = 30.0
TICKS = os.sysconf("SC_CLK_TCK")


@asynccontextmanager
async def router_process(root: Path | None = None) -> AsyncIterator[tuple[str, int]]:
    """`smp-router serve` from this checkout (or the one at `root`), loopback
    destinations allowed to its proxy (a checkout older than that setting proxies
    anywhere); yields its address and pid."""
    root = root or Path(__file__).resolve().parent.parent
    allow = (root / "router/server/core/proxy_destinations.py").exists()
    with tempfile.TemporaryDirectory(prefix="smp-proxy-bench-") as tmp:
        config = Path(tmp) / "router.ini"
        config.write_text("[STORE_LOG]\nquota = 100000\n"
                          + ("[PROXY]\nallow_destinations = 127.0.0.0/8\n" if allow else ""))
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "router.server", "serve", *one_process(root),
             "--host", "127.0.0.1", "--port", "0", "--store", "memory", "--config", str(config),
             "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        try:
            assert process.stdout is not None
            line = b""
            with trio.fail_after(START_TIMEOUT):
                while not line.endswith(b"\n"):
                    chunk = await process.stdout.receive_some(1)
                    assert chunk, "the router exited before it printed its address"
                    line += chunk
            yield line.decode().split()[-1], process.pid
        finally:
            with trio.CancelScope(shield=True):
                process.terminate()
                with trio.move_on_after(10):
                    await process.wait()
                if process.poll() is None:
                    process.kill()
                    await process.wait()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


class Receiver:
    """The recipient on B: counts the messages, acknowledges each."""

    def __init__(self, client: SMPClient, queues: list[RecipientQueue]) -> None:
        self.client = client
        self.queues = {q.recipient_id: q for q in queues}
        self.received = 0
        self.changed = trio.Event()

    async def run(self) -> None:
        async for event in self.client.events():
            if isinstance(event, MessageEvent):
                self.received += 1
                await self.client.ack(self.queues[event.recipient_id], event.msg_id)
                self.changed.set()

    async def wait_for(self, count: int) -> None:
        while self.received < count:
            self.changed = trio.Event()
            await self.changed.wait()


async def _send_all(send, queues: list[RecipientQueue], messages: int, window: int) -> None:
    next_index = iter(range(messages))

    async def worker() -> None:
        for i in next_index:
            await send(queues[i % len(queues)].sender_id)

    async with trio.open_nursery() as nursery:
        for _ in range(window):
            nursery.start_soon(worker)


async def _one_way(send, receiver: Receiver, queues: list[RecipientQueue], messages: int,
                   window: int, pids: dict[str, int]) -> dict[str, Any]:
    target = receiver.received + 20
    for _ in range(20):  # warm up
        await send(queues[0].sender_id)
    await receiver.wait_for(target)
    target += ROUND_TRIPS + messages
    round_trips = []
    for i in range(ROUND_TRIPS):
        started = time.perf_counter()
        await send(queues[i % len(queues)].sender_id)
        round_trips.append((time.perf_counter() - started) * 1000)
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.perf_counter()
    await _send_all(send, queues, messages, window)
    await receiver.wait_for(target)
    elapsed = time.perf_counter() - started
    cpu = {name: (cpu_seconds(pid) - cpu_before[name]) / messages * 1e6
           for name, pid in pids.items()}
    return {"messages_per_second": messages / elapsed,
            "round_trip_ms": statistics.median(round_trips),
            "cpu_us_per_message": cpu}


async def measure(messages: int, window: int) -> dict[str, Any]:
    async with router_process() as (a_address, a_pid), router_process() as (b_address, b_pid):
        pids = {"A": a_pid, "B": b_pid}
        async with open_client(b_address) as recipient, open_client(b_address) as direct, \
                open_client(a_address) as via_a, trio.open_nursery() as nursery:
            queues = [await recipient.create_queue(subscribe=True) for _ in range(QUEUES)]
            receiver = Receiver(recipient, queues)
            nursery.start_soon(receiver.run)
            session = await via_a.open_proxied_session(b_address)

            async def send_direct(sender_id: bytes) -> None:
                await direct.send(sender_id, BODY)

            async def send_through_a(sender_id: bytes) -> None:
                await via_a.proxied_send(session, sender_id, BODY)

            result = {
                "direct": await _one_way(send_direct, receiver, queues, messages, window, pids),
                "through_a": await _one_way(send_through_a, receiver, queues, messages,
                                            window, pids),
            }
            nursery.cancel_scope.cancel()
    d, p = result["direct"], result["through_a"]
    result["rate_ratio"] = p["messages_per_second"] / d["messages_per_second"]
    result["round_trip_ratio"] = p["round_trip_ms"] / d["round_trip_ms"]
    return result


def _median(results: list[dict[str, Any]], *path: str) -> float:
    values = []
    for r in results:
        for key in path:
            r = r[key]
        values.append(r)
    return statistics.median(values)  # type: ignore[arg-type]


def report(results: list[dict[str, Any]], messages: int, window: int) -> str:
    m = lambda *path: _median(results, *path)  # noqa: E731
    lines = [
        f"{len(results)} repetitions, {messages} messages of {len(BODY)} bytes each way, "
        f"{window} in flight, medians:",
        "",
        "| way | messages/s | one SEND's round trip ms | A's CPU us/message "
        "| B's CPU us/message |",
        "|---|---|---|---|---|",
    ]
    for way, label in (("direct", "straight to B"), ("through_a", "through A (PFWD)")):
        lines.append(
            f"| {label} | {m(way, 'messages_per_second'):.0f} | {m(way, 'round_trip_ms'):.2f} "
            f"| {m(way, 'cpu_us_per_message', 'A'):.0f} "
            f"| {m(way, 'cpu_us_per_message', 'B'):.0f} |")
    lines += ["", f"through A / straight: rate {m('rate_ratio'):.2f}x, "
              f"round trip {m('round_trip_ratio'):.2f}x (ratios taken in each repetition)"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if "--attack" in argv:
        from . import proxy_attack

        return proxy_attack.main([arg for arg in argv if arg != "--attack"])
    parser = argparse.ArgumentParser(prog="python -m bench proxy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here, and the "
                        "table beside it (.md)")
    args = parser.parse_args(argv)
    results = []
    for _ in range(args.repeats):
        results.append(trio.run(measure, args.messages, args.window))
        results[-1]["load_average"] = os.getloadavg()
    text = report(results, args.messages, args.window)
    print(text)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))
        args.out.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
