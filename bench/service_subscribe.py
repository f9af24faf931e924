"""service_subscribe: a service's queues subscribed by one SUBS against SUBs in blocks, in one run.

    python -m bench service_subscribe [--queues N] [--pending K]

Each way runs on a fresh in-process router (memory store) behind its native TLS
listener on 127.0.0.1, with N queues preloaded straight into the store and one
message waiting in K of them:

- `SUBS`: the queues are associated with a service (a self-signed client
  certificate, bench/service_client.py); the service sends `SUBS n idsHash` and
  reads the `SOKS`, the K messages and `ALLS`;
- `SUB blocks`: an ordinary client sends a signed `SUB` per queue, as many per
  block as fit, reading the answers and the K messages as they come.

Meanwhile another client sends a PING every 20 ms and keeps the slowest answer.
Figures: the time from the first command to the last message (and `ALLS`), the
slowest PING, and the growth of the process's RSS. The clients run in the
router's own Trio loop and process: their work (signing each SUB, reading every
answer) is in the figures of both ways, as their memory is in the RSS.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import psutil
import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.service_client import (
    connect_service,
    large,
    pad,
    parse_service_answer,
    plain_hello,
    self_signed_cert,
)
from router.protocol import crypto
from router.protocol.ids_hash import queue_ids_hash
from router.server import RouterConfig, open_router
from router.server.edge.listener import serve_edge
from router.server.edge.native_tls import identity_tls_context
from store.interfaces import Message, QueueRecord

SUBS_PER_BLOCK = 100  # a signed SUB is about 160 bytes with its length


def _records(n: int, service_id: bytes | None) -> tuple[list[QueueRecord], list[Ed25519PrivateKey]]:
    keys, records = [], []
    for _ in range(n):
        seed, spki = crypto.new_ed25519()
        keys.append(Ed25519PrivateKey.from_private_bytes(seed))
        records.append(QueueRecord(
            os.urandom(24), os.urandom(24), spki, os.urandom(32), None, False,
            rcv_service_id=service_id,
        ))
    return records, keys


async def _pinger(session, slowest: list[float]) -> None:
    while True:
        started = time.perf_counter()
        await session.command(b"", b"PING")
        slowest[0] = max(slowest[0], time.perf_counter() - started)
        await trio.sleep(0.02)


async def _run(way: str, n: int, pending: int) -> dict[str, float]:
    async with open_router(RouterConfig(end_batch_interval=0.02)) as router:
        async with trio.open_nursery() as nursery:
            edge = await nursery.start(lambda task_status: serve_edge(
                router.serve_transport, "127.0.0.1", 0, hook=router.request_hook,
                limits=router.config.edge_limits(),
                identity_tls=identity_tls_context(router.identity), task_status=task_status,
            ))
            port, key_hash = edge.port, router.key_hash
            if way == "subs":
                client = await connect_service(port, key_hash, self_signed_cert())
                service_id: bytes | None = client.service_id
            else:
                client = await connect_service(port, key_hash, None)
                await plain_hello(client, key_hash)
                service_id = None
            records, keys = _records(n, service_id)
            for rec in records:
                await router.queues.add_queue(rec)
            for rec in records[:: max(1, n // pending)][:pending]:
                message = Message(os.urandom(24), int(time.time()), b"F", b"m" * 100)
                await router.messages.write_message(rec.recipient_id, message, 128)
            other = await connect_service(port, key_hash, None)
            await plain_hello(other, key_hash)
            slowest = [0.0]
            nursery.start_soon(_pinger, other, slowest)
            gc.collect()
            rss = psutil.Process().memory_info().rss
            started = time.perf_counter()
            messages = 0
            if way == "subs":
                rids = [r.recipient_id for r in records]
                soks = await client.subs(n, queue_ids_hash(rids))
                assert parse_service_answer(soks.command)[1] == n, soks
                while True:
                    event = await client.next_event()
                    if event.command == b"ALLS":
                        break
                    messages += event.command.startswith(b"MSG")
            else:
                answered = 0

                async def send_blocks() -> None:
                    for at in range(0, n, SUBS_PER_BLOCK):
                        part = range(at, min(n, at + SUBS_PER_BLOCK))
                        pairs = [client.transmission(records[i].recipient_id, b"SUB", keys[i],
                                                     service_signed=False) for i in part]
                        content = bytes((len(pairs),)) + b"".join(large(t) for _, t in pairs)
                        await client.stream.send_all(pad(content))

                nursery.start_soon(send_blocks)  # read while writing, as a client must
                while answered < n or messages < pending:
                    for event in await client.receive():
                        if event.command.startswith(b"MSG"):
                            messages += 1
                        if event.corr_id:
                            answered += 1
            took = time.perf_counter() - started
            grew = psutil.Process().memory_info().rss - rss
            nursery.cancel_scope.cancel()
    return {"seconds": took, "messages": messages, "slowest_ping_ms": slowest[0] * 1000,
            "rss_growth_mb": grew / 2**20}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench service_subscribe")
    parser.add_argument("--queues", type=int, default=20_000)
    parser.add_argument("--pending", type=int, default=200)
    args = parser.parse_args(argv)
    figures = {way: trio.run(_run, way, args.queues, args.pending) for way in ("subs", "sub")}
    print(f"{args.queues} queues, {args.pending} with a message waiting, one run")
    print("| figure | one SUBS | SUB blocks | SUB blocks / SUBS |")
    print("|---|---|---|---|")
    for key in ("seconds", "messages", "slowest_ping_ms", "rss_growth_mb"):
        a, b = figures["subs"][key], figures["sub"][key]
        print(f"| {key} | {a:.2f} | {b:.2f} | {b / a if a else float('nan'):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
