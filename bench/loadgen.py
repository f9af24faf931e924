"""Load clients: a worker process holding many router (or echo) connections.

The benchmark runner starts workers with `WorkerGroup` (bench/harness.py) and
drives them with operations sent over a pipe, one at a time; each answer is a
small dict. An operation either completes before it answers (`connect`,
`subscribe`) or starts a job that runs in the background and answers at
once (`drain_start`, `load_start`, `echo_start`), whose result a later
`wait` collects. Between operations the connections stay open and idle.

Times are `time.monotonic_ns()`: on Linux that clock is shared by every
process, so the runner, the router and the workers compare their stamps
directly. A message body starts with the time it was sent, which is how a
recipient measures sender -> recipient latency.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection as Pipe
from typing import Any

import trio
import trio_websocket

from router.client import (
    ConnectionClosed,
    MessageEvent,
    RecipientQueue,
    SMPClient,
    SMPError,
    UpgradeRejected,
    open_client,
)
from router.protocol.block import BLOCK_SIZE
from router.protocol.versions import SMP_VERSION_MAX, SMP_VERSION_MIN

from . import identities

# Connections a worker opens at once: with 2 workers well under the router's cap of
# 128 in the handshake per remote address (a connection counts there until the router
# has read the client's hello, after the client is done with it).
CONNECT_CONCURRENCY = 32
CONNECT_ATTEMPTS = 8
SUBSCRIBE_CHUNK = 2000
# The echo clients' WebSocket settings: the router client's own (router/client/_transport.py),
# restated because they are not part of its public API.
MAX_MESSAGE_SIZE = 4 * BLOCK_SIZE
RECEIVE_BUFFER_SIZE = 4 * BLOCK_SIZE
MESSAGE_QUEUE_SIZE = 16
ACKS_IN_FLIGHT = 2  # ack_many calls a recipient connection has out at once


def worker_main(pipe: Pipe, address: str, index: int) -> None:
    """Entry point of a worker process (multiprocessing, bench.harness.worker_context)."""
    trio.run(_serve, pipe, address, index)


async def _serve(pipe: Pipe, address: str, index: int) -> None:
    async with trio.open_nursery() as nursery:
        worker = Worker(address, index, nursery)
        while True:
            request = await trio.to_thread.run_sync(pipe.recv)
            op = request["op"]
            if op == "exit":
                break
            try:
                reply = await getattr(worker, "op_" + op)(request)
            except Exception as e:  # noqa: BLE001 - reported to the runner, which stops
                reply = {"error": f"{type(e).__name__}: {e}"}
            pipe.send(reply)
        worker.closing.set()
        nursery.cancel_scope.deadline = trio.current_time() + 5
    pipe.send({"ok": True})


class Job:
    """A background operation: its result once done."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: dict[str, Any] = {}


class Worker:
    def __init__(self, address: str, index: int, nursery: trio.Nursery) -> None:
        self.address = address
        self.index = index
        self.nursery = nursery
        self.clients: list[SMPClient] = []
        self.queues: dict[bytes, RecipientQueue] = {}  # recipient id -> queue, for ACKs
        self.websockets: list[trio_websocket.WebSocketConnection] = []
        self.jobs: dict[str, Job] = {}
        self.closing = trio.Event()

    # --- connections ---------------------------------------------------------

    async def op_connect(self, req: dict) -> dict:
        """Open `count` more router connections and keep them open."""
        started = time.monotonic()
        versions = (SMP_VERSION_MIN, req.get("max_version") or SMP_VERSION_MAX)
        errors = await _run_all(
            [partial(self._hold_client, versions) for _ in range(req["count"])],
            self.nursery, CONNECT_CONCURRENCY,
        )
        return {"clients": len(self.clients), "errors": errors,
                "seconds": time.monotonic() - started}

    async def _hold_client(
        self, versions: tuple[int, int], ready: Callable[[str | None], None]
    ) -> None:
        """One client, held open; a refused connection is tried again after a random
        pause, as clients do (every worker connects from 127.0.0.1, and the router caps
        the connections one address has in the handshake at once)."""
        held = False
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                async with open_client(self.address, versions=versions) as client:
                    self.clients.append(client)
                    held = True
                    ready(None)
                    await self.closing.wait()
                    return
            except (UpgradeRejected, ConnectionClosed) as e:
                if held:  # closed after it was held: nothing to report
                    return
                if attempt + 1 == CONNECT_ATTEMPTS:
                    ready(f"{type(e).__name__}: {e}")
                    return
                await trio.sleep(random.uniform(0.05, 0.5))
            except Exception as e:  # noqa: BLE001 - counted, the runner decides
                ready(f"{type(e).__name__}: {e}")
                return

    async def op_websocket_ping(self, req: dict) -> dict:
        """Every client sends one WebSocket ping and waits for the router's pong."""
        async with trio.open_nursery() as nursery:
            for client in self.clients:
                nursery.start_soon(client.websocket_ping)
        return {"pinged": len(self.clients)}

    async def op_close_clients(self, req: dict) -> dict:
        clients, self.clients = self.clients, []
        for client in clients:
            await client.aclose()
        return {"closed": len(clients)}

    # --- subscriptions ------------------------------------------------------------

    async def op_subscribe(self, req: dict) -> dict:
        """Client i subscribes the queues `ranges[i] = [start, count]`; timed per client."""
        ranges = req["ranges"]
        first = req.get("first", 0)  # ranges[i] is for client first + i
        times: list[float] = [0.0] * len(ranges)
        errors: list[int] = [0]

        async def one(i: int, start: int, count: int) -> None:
            client = self.clients[first + i]
            queues = [identities.recipient_queue(q) for q in range(start, start + count)]
            for q in queues:
                self.queues[q.recipient_id] = q
            t0 = time.monotonic()
            for pos in range(0, count, SUBSCRIBE_CHUNK):
                results = await client.subscribe_many(queues[pos : pos + SUBSCRIBE_CHUNK])
                errors[0] += sum(r is not None for r in results)
            times[i] = time.monotonic() - t0

        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for i, (start, count) in enumerate(ranges):
                if count:
                    nursery.start_soon(one, i, start, count)
        return {"seconds": time.monotonic() - started, "per_client": times, "errors": errors[0]}

    # --- draining pushed messages -------------------------------------------------

    async def op_drain_start(self, req: dict) -> dict:
        """Client i reads and ACKs `expect[i]` messages; `drain_wait` gives the times."""
        job = self.jobs["drain"] = Job()
        expect = req["expect"]
        state = {"first": None, "last": None, "last_ack": None, "received": 0, "errors": 0}

        involved = [self.clients[i] for i, n in enumerate(expect) if n]

        async def run() -> None:
            before = _blocks(involved)
            async with trio.open_nursery() as nursery:
                for i, n in enumerate(expect):
                    if n:
                        nursery.start_soon(self._drain_client, self.clients[i], n, state)
            after = _blocks(involved)
            state["blocks_sent"] = after[0] - before[0]
            state["blocks_received"] = after[1] - before[1]
            job.result = state
            job.done.set()

        self.nursery.start_soon(run)
        return {"ok": True}

    async def _drain_client(self, client: SMPClient, expect: int, state: dict) -> None:
        received = 0
        async with trio.open_nursery() as nursery:
            acker = Acker(client, self.queues, nursery, state)
            while received < expect:
                batch = await _event_batch(client)
                now = time.monotonic()
                if state["first"] is None:
                    state["first"] = now
                messages = [e for e in batch if isinstance(e, MessageEvent)]
                received += len(messages)
                state["received"] += len(messages)
                state["last"] = now
                acker.add(messages)

    async def op_wait(self, req: dict) -> dict:
        job = self.jobs.pop(req["job"])
        with trio.move_on_after(req.get("timeout", 600)) as scope:
            await job.done.wait()
        if scope.cancelled_caught:
            return {"error": f"{req['job']} did not finish in time"}
        return job.result

    # --- sustained load: senders and recipients ---------------------------------------

    async def op_load_start(self, req: dict) -> dict:
        """Senders send to their targets, recipients read and ACK, within a time window.

        `senders`: [{"client": i, "targets": [queue index, ...], "window": w,
        "rate": msgs/s or null}]; `receivers`: [client index, ...];
        `t_start` / `t_end` (monotonic seconds) bound the measured window,
        `stop` is when everything stops.
        """
        job = self.jobs["load"] = Job()
        result: dict[str, Any] = {"sent": 0, "send_errors": 0, "received": 0, "latencies": [],
                                  "receive_errors": 0, "received_total": 0, "sent_total": 0}
        body_size = req["body_size"]

        involved = [self.clients[s["client"]] for s in req["senders"]]
        involved += [self.clients[r] for r in req["receivers"]]

        async def run() -> None:
            before = _blocks(involved)
            async with trio.open_nursery() as nursery:
                for s in req["senders"]:
                    nursery.start_soon(self._sender, s, req, body_size, result)
                for r in req["receivers"]:
                    nursery.start_soon(self._receiver, self.clients[r], req, result)
            after = _blocks(involved)
            result["blocks_sent"] = after[0] - before[0]
            result["blocks_received"] = after[1] - before[1]
            job.result = result
            job.done.set()

        self.nursery.start_soon(run)
        return {"ok": True}

    async def _sender(self, spec: dict, req: dict, body_size: int, result: dict) -> None:
        client = self.clients[spec["client"]]
        seed = identities.keys()["snd_seed"]
        targets = itertools.cycle([identities.sender_id(q) for q in spec["targets"]])
        pad = b"\x00" * (body_size - 8)
        t_start, stop = req["t_start"], req["stop"]

        async def send_one() -> None:
            body = time.monotonic_ns().to_bytes(8, "big") + pad
            try:
                await client.send(next(targets), body, sender_seed=seed)
            except SMPError:
                result["send_errors"] += 1
                await trio.sleep(0.001)  # a full queue: let the recipient catch up
            else:
                result["sent_total"] += 1
                if t_start <= time.monotonic() <= req["t_end"]:
                    result["sent"] += 1

        await _sleep_until(t_start - req.get("warmup", 0.0))
        if spec.get("rate"):
            await _open_loop(send_one, spec["rate"], stop, spec.get("max_outstanding", 1000))
            return

        async def loop() -> None:
            while time.monotonic() < stop:
                await send_one()

        async with trio.open_nursery() as nursery:
            for _ in range(spec["window"]):
                nursery.start_soon(loop)

    async def _receiver(self, client: SMPClient, req: dict, result: dict) -> None:
        t_start, t_end = req["t_start"], req["t_end"]
        latencies = result["latencies"]
        deadline = req["stop"] + req.get("grace", 1.0)
        with trio.move_on_at(_trio_time(deadline)):
            async with trio.open_nursery() as nursery:
                acker = Acker(client, self.queues, nursery, result, "receive_errors")
                while True:
                    batch = await _event_batch(client)
                    now_ns = time.monotonic_ns()
                    now = now_ns / 1e9
                    messages = [e for e in batch if isinstance(e, MessageEvent)]
                    result["received_total"] += len(messages)
                    if t_start <= now <= t_end:
                        result["received"] += len(messages)
                        for m in messages:
                            if not m.quota:  # the QUOTA marker carries no send time
                                latencies.append(now_ns - int.from_bytes(m.body[:8], "big"))
                    acker.add(messages)

    # --- the ceiling: plain WebSocket echo ---------------------------------------------------

    async def op_echo_connect(self, req: dict) -> dict:
        """Open `count` plain WebSocket connections to the echo server at `url`."""
        started = time.monotonic()
        for _ in range(req["count"]):
            ws = await trio_websocket.connect_websocket_url(
                self.nursery, req["url"],
                message_queue_size=MESSAGE_QUEUE_SIZE,
                max_message_size=MAX_MESSAGE_SIZE,
                receive_buffer_size=RECEIVE_BUFFER_SIZE,
            )
            self.websockets.append(ws)
        return {"connections": len(self.websockets), "seconds": time.monotonic() - started}

    async def op_echo_start(self, req: dict) -> dict:
        """Each connection keeps `window` blocks in flight until `stop`."""
        job = self.jobs["echo"] = Job()
        result: dict[str, Any] = {"received": 0, "latencies": []}

        async def run() -> None:
            async with trio.open_nursery() as nursery:
                for ws in self.websockets:
                    nursery.start_soon(_echo_connection, ws, req, result)
            job.result = result
            job.done.set()

        self.nursery.start_soon(run)
        return {"ok": True}

    async def op_echo_close(self, req: dict) -> dict:
        websockets, self.websockets = self.websockets, []
        for ws in websockets:
            with trio.move_on_after(2):
                await ws.aclose()
        return {"closed": len(websockets)}


async def _echo_connection(
    ws: trio_websocket.WebSocketConnection, req: dict, result: dict
) -> None:
    window = trio.Semaphore(req["window"])
    pad = b"\x00" * (BLOCK_SIZE - 8)
    t_start, t_end, stop = req["t_start"], req["t_end"], req["stop"]
    latencies = result["latencies"]
    outstanding = [0]

    async def writer() -> None:
        await _sleep_until(t_start - req.get("warmup", 0.0))
        rate = req.get("rate")  # messages per second per connection: open loop
        next_at = time.monotonic()
        while time.monotonic() < stop:
            if rate:
                next_at += 1.0 / rate
                await _sleep_until(next_at)
            else:
                await window.acquire()
            outstanding[0] += 1
            await ws.send_message(time.monotonic_ns().to_bytes(8, "big") + pad)

    async def reader() -> None:
        while True:
            message = await ws.get_message()
            now_ns = time.monotonic_ns()
            outstanding[0] -= 1
            if not req.get("rate"):
                window.release()
            if t_start <= now_ns / 1e9 <= t_end:
                result["received"] += 1
                latencies.append(now_ns - int.from_bytes(message[:8], "big"))
            if now_ns / 1e9 >= stop and outstanding[0] == 0:
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        with trio.move_on_at(_trio_time(stop + 2.0)):
            await reader()
        nursery.cancel_scope.cancel()


class Acker:
    """ACKs for one connection, with at most `ACKS_IN_FLIGHT` `ack_many` calls out at
    a time: messages that arrive meanwhile wait and go together in the next call,
    as a client with a steady stream of messages batches them (few blocks, each
    with many ACKs, instead of a 16 KB block per message)."""

    def __init__(self, client: SMPClient, queues: dict[bytes, RecipientQueue],
                 nursery: trio.Nursery, counters: dict, errors_key: str = "errors") -> None:
        self.client = client
        self.queues = queues
        self.nursery = nursery
        self.counters = counters
        self.errors_key = errors_key
        self.pending: list[MessageEvent] = []
        self.in_flight = 0

    def add(self, messages: list[MessageEvent]) -> None:
        self.pending.extend(messages)
        if self.pending and self.in_flight < ACKS_IN_FLIGHT:
            self.in_flight += 1
            self.nursery.start_soon(self._send)

    async def _send(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                results = await self.client.ack_many(
                    [(self.queues[m.recipient_id], m.msg_id) for m in batch])
                self.counters[self.errors_key] += sum(r is not None for r in results)
                self.counters["last_ack"] = time.monotonic()
        finally:
            self.in_flight -= 1


# --- helpers ------------------------------------------------------------------------


def _blocks(clients: list[SMPClient]) -> tuple[int, int]:
    """Blocks these clients have sent and received so far."""
    stats = [c.statistics() for c in clients]
    return sum(s.blocks_sent for s in stats), sum(s.blocks_received for s in stats)


async def _event_batch(client: SMPClient) -> list:
    """The next event and whatever else is already waiting."""
    batch = [await client.next_event()]
    while (event := client.next_event_nowait()) is not None:
        batch.append(event)
    return batch


def _trio_time(monotonic_deadline: float) -> float:
    return trio.current_time() + (monotonic_deadline - time.monotonic())


async def _sleep_until(monotonic_deadline: float) -> None:
    await trio.sleep_until(_trio_time(monotonic_deadline))


async def _open_loop(
    send_one: Callable[[], Any], rate: float, stop: float, max_outstanding: int
) -> None:
    """Start one send every 1/rate seconds whatever the answers take (open loop)."""
    interval = 1.0 / rate
    outstanding = [0]

    async def tracked() -> None:
        outstanding[0] += 1
        try:
            await send_one()
        finally:
            outstanding[0] -= 1

    next_at = time.monotonic()
    async with trio.open_nursery() as nursery:
        while next_at < stop:
            await _sleep_until(next_at)
            if outstanding[0] < max_outstanding:
                nursery.start_soon(tracked)
            next_at += interval


async def _run_all(
    tasks: list[Callable[[Callable[[str | None], None]], Any]],
    nursery: trio.Nursery,
    concurrency: int,
) -> int:
    """Start each task in `nursery` (they outlive this call); return once each reported
    ready, at most `concurrency` waiting at a time. Returns how many failed."""
    limiter = trio.Semaphore(concurrency)
    errors = [0]
    remaining = [len(tasks)]
    all_ready = trio.Event()
    if not tasks:
        return 0

    for task in tasks:
        await limiter.acquire()
        fired = [False]

        def ready(error: str | None, fired: list[bool] = fired) -> None:
            if fired[0]:
                return
            fired[0] = True
            limiter.release()
            if error is not None:
                errors[0] += 1
            remaining[0] -= 1
            if remaining[0] == 0:
                all_ready.set()

        nursery.start_soon(task, ready)
    await all_ready.wait()
    return errors[0]
