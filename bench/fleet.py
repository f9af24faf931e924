"""Lean load processes for `bench.relay`: thousands of router connections each.

`bench.loadgen` drives `router.client.SMPClient`, a full client with a reader
task, an event channel and trio-websocket under it: right for tens of
connections, too heavy for the 22,000 of a large relay on the router's own two
cores. A connection here is one socket, `websockets`' sans-I/O client protocol
and one reader task; it speaks just what the benchmark needs (docs/protocol.md):
the handshake, SUB in batched blocks, SEND, MSG in and ACK out, END.

The runner (`bench.relay`) starts `Fleet` processes and drives each over a
pipe, one operation at a time, like `bench.loadgen`:

- ``connect``: open one connection per ``[first, count]`` in `queues` (the
  queue indexes it holds), each from a loopback address of its own in the
  ``source_net`` given (127.N.x.y): one address per client, as a relay sees
  its clients, so that the router's per-address caps act as they would there,
  and no address runs short of ephemeral ports across a reconnection storm;
- ``subscribe``: every connection subscribes its queues, all SUBs of a
  connection packed into as few blocks as fit;
- ``traffic``: (sender processes) SEND at an open-loop `rate` to the active
  queues until `stop` or ``traffic_stop``; every recipient connection decrypts what it receives,
  records the latency (the body starts with the sending time and a message id)
  and ACKs;
- ``storm``: every connection closes at a random moment within
  `drop_spread` seconds, comes back after a random pause within
  `return_spread` (retrying when the router refuses it) and resubscribes;
  the answer comes at once, `status` tells how far it got;
- ``report``: latencies by window, what was sent and received, errors.

A message a recipient gets before its connection's SUB for that queue was
answered is one the router held while the recipient was away; its latency is
counted apart ("held") from that of messages to a subscribed queue.
"""

from __future__ import annotations

import os
import random
import resource
import socket
import time
from array import array
from multiprocessing.connection import Connection as Pipe
from typing import Any
from urllib.parse import urlsplit

import trio
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from router.client import parse_address
from router.protocol import crypto
from router.protocol.block import BLOCK_SIZE, decode_batch, encode_batches, pad_block, unpad_block
from router.protocol.codec import decode_response, encode_command
from router.protocol.handshake import (
    SMP_VERSION_MIN,
    ClientHello,
    decode_server_hello,
    encode_client_hello,
    negotiate_version,
)
from router.protocol.transmission import decode_transmission, encode_transmission
from router.protocol.types import ACK, END, ERR, MSG, OK, SEND, SUB, Transmission
from router.protocol.versions import LEGACY_VERSION

from . import identities
from .looplag import LoopLag

# handshakes in flight per process, below the router's cap per address
# (RouterConfig.max_pending_per_address)
CONNECT_CONCURRENCY = 100
RETRY_DELAY = (0.2, 1.0)  # seconds before trying again after a refused connection
READ_SIZE = 4 * BLOCK_SIZE  # what the client library asks of a socket per read
NOFILE = 65_536
NOT_SUBSCRIBED = 1 << 62  # `subscribed_at_ns` of a connection that is away

# corrId: a kind byte and the queue index (SUB, ACK) or message id (SEND)
_SUB, _ACK, _SEND = b"S", b"A", b"M"
_SUB_COMMAND = encode_command(SUB())


def worker_main(pipe: Pipe, url: str, address: str, index: int) -> None:
    """Entry point of a load process (multiprocessing, bench.harness.worker_context)."""
    raise_nofile()
    trio.run(_serve, pipe, url, address, index)


def raise_nofile(limit: int = NOFILE) -> int:
    """Raise RLIMIT_NOFILE to `limit` (the hard limit too, which only root may raise);
    returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, max(limit, hard)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def _serve(pipe: Pipe, url: str, address: str, index: int) -> None:
    async with trio.open_nursery() as nursery:
        fleet = Fleet(url, address, index, nursery)
        nursery.start_soon(fleet.loop_lag.run)
        while True:
            request = await trio.to_thread.run_sync(pipe.recv)
            if request["op"] == "exit":
                break
            try:
                reply = await getattr(fleet, "op_" + request["op"])(request)
            except Exception as e:  # noqa: BLE001 - reported to the runner, which stops
                reply = {"error": f"{type(e).__name__}: {e}"}
            pipe.send(reply)
        nursery.cancel_scope.cancel()
    pipe.send({"ok": True})


class Refused(Exception):
    """The router did not take the connection (503 at its caps, a reset, a timeout)."""


class Fleet:
    """One load process: its connections and what they measured."""

    def __init__(self, url: str, address: str, index: int, nursery: trio.Nursery) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.key_hash = parse_address(address).key_hash
        self.index = index
        self.nursery = nursery
        self.source_net = "127.1"  # connection k binds to 127.1.(k // 250).(k % 250 + 1)
        self.conns: list[LeanConnection] = []
        self.client_key = crypto.x25519_public(crypto.new_x25519()[0])
        self.rcv_seed = identities.keys()["rcv_seed"]
        self.snd_seed = identities.keys()["snd_seed"]
        self.box_key = identities.keys()["box_key"]
        self.traffic_stop = 0.0  # monotonic time the send loop stops at
        self.received = array("q")  # (receive ns, latency ns, held) triples
        self.received_ids: set[int] = set()
        self.sent_ok: set[int] = set()
        self.counts = {"sub_errors": 0, "send_errors": 0, "ack_errors": 0, "ends": 0,
                       "refused": 0, "decrypt_errors": 0, "duplicates": 0, "reader_errors": 0}
        self.last_error = ""
        self.refusals: dict[str, int] = {}  # why connecting failed -> how often
        self.storm: dict[str, Any] = {}
        # This process's own delays, which its latency figures include (bench.looplag).
        self.loop_lag = LoopLag()

    # --- connections -----------------------------------------------------------------

    async def op_connect(self, req: dict) -> dict:
        self.source_net = req.get("source_net", self.source_net)
        started = time.monotonic()
        new = [LeanConnection(self, first, count, self._source(len(self.conns) + k))
               for k, (first, count) in enumerate(req["queues"])]
        limiter = trio.CapacityLimiter(CONNECT_CONCURRENCY)

        async def one(conn: LeanConnection) -> None:
            async with limiter:
                await conn.connect_retrying()

        async with trio.open_nursery() as nursery:
            for conn in new:
                nursery.start_soon(one, conn)
        self.conns.extend(new)
        return {"connections": len(self.conns), "seconds": time.monotonic() - started,
                "refused": self.counts["refused"]}

    async def op_subscribe(self, req: dict) -> dict:
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for conn in self.conns:
                nursery.start_soon(conn.subscribe_all)
        return {"seconds": time.monotonic() - started,
                "subscribed": sum(c.subscribed for c in self.conns),
                "sub_errors": self.counts["sub_errors"]}

    def _source(self, k: int) -> str:
        """Connection k's own loopback address: a crowd of clients, one address
        each, as a relay sees them (and no address runs short of ports)."""
        return f"{self.source_net}.{k // 250}.{k % 250 + 1}"

    async def op_storm(self, req: dict) -> dict:
        """Drop and reconnect every connection; answers at once (see `op_status`)."""
        rng = random.Random(self.index)
        self.storm = {"started": time.monotonic(), "done": 0, "last_done": None,
                      "total": len(self.conns)}
        for conn in self.conns:
            drop_at = rng.uniform(0, req["drop_spread"])
            back_after = rng.uniform(0, req["return_spread"])
            self.nursery.start_soon(conn.storm, drop_at, back_after)
        return {"ok": True}

    async def op_status(self, req: dict) -> dict:
        return {"storm": self.storm, "subscribed": sum(c.subscribed for c in self.conns),
                "connected": sum(c.stream is not None for c in self.conns), **self.counts,
                "last_error": self.last_error, "refusals": self.refusals}

    def storm_connection_done(self) -> None:
        self.storm["done"] += 1
        self.storm["last_done"] = time.monotonic()

    # --- traffic -----------------------------------------------------------------------

    async def op_traffic(self, req: dict) -> dict:
        """SEND to `targets` at `rate` per second (open loop) until `stop`, from this
        process's connections in turn; answers at once."""
        targets = [(identities.sender_id(q), q) for q in req["targets"]]
        self.traffic_stop = req["stop"]
        self.nursery.start_soon(self._send_loop, targets, req["rate"], req.get("seq", 0))
        return {"ok": True}

    async def op_traffic_stop(self, req: dict) -> dict:
        self.traffic_stop = 0.0
        return {"ok": True}

    async def _send_loop(self, targets: list[tuple[bytes, int]], rate: float,
                         seq: int) -> None:
        interval = 1.0 / rate
        next_at = time.monotonic()
        while next_at < self.traffic_stop:
            await trio.sleep_until(trio.current_time() + max(0.0, next_at - time.monotonic()))
            sid, _q = targets[seq % len(targets)]
            conn = self.conns[seq % len(self.conns)]
            msg_id = (self.index << 32) | seq
            seq += 1
            next_at += interval
            if conn.stream is not None:
                self.nursery.start_soon(conn.send_message, sid, msg_id)

    async def op_loop_lag(self, req: dict) -> dict:
        """The loop's lag since the last call; `reset` starts a new record."""
        report = self.loop_lag.report()
        if req.get("reset"):
            self.loop_lag.reset()
        return report

    async def op_report(self, req: dict) -> dict:
        return {
            "received": self.received.tolist(),
            "received_ids": sorted(self.received_ids),
            "sent_ok": sorted(self.sent_ok),
            **self.counts,
        }

    def record_message(self, conn: LeanConnection, rid: bytes, msg: MSG) -> None:
        now = time.monotonic_ns()
        try:
            body = crypto.decrypt_msg_body(self.box_key, msg.msg_id, msg.enc_body).body
        except Exception:  # noqa: BLE001 - counted; an undecryptable MSG is a failure
            self.counts["decrypt_errors"] += 1
            return
        sent_ns = int.from_bytes(body[:8], "big")
        msg_id = int.from_bytes(body[8:16], "big")
        if msg_id in self.received_ids:
            self.counts["duplicates"] += 1
            return
        self.received_ids.add(msg_id)
        held = int(sent_ns < conn.subscribed_at_ns)
        self.received.extend((now, now - sent_ns, held))


def _refusal(e: BaseException) -> str:
    if isinstance(e, trio.TooSlowError):
        return "no answer in 30 s"
    if isinstance(e, OSError) and e.errno is not None:
        return f"OSError {e.errno} {os.strerror(e.errno)}"
    return f"{type(e).__name__}: {str(e)[:40]}"


class LeanConnection:
    """One router connection: socket, sans-I/O WebSocket, one reader task."""

    __slots__ = ("fleet", "first", "count", "stream", "protocol", "session_id", "subscribed",
                 "subscribed_at_ns", "lock", "scope", "events", "_all_subscribed", "source")

    def __init__(self, fleet: Fleet, first: int, count: int, source: str) -> None:
        self.fleet = fleet
        self.source = source
        self.first = first
        self.count = count
        self.stream: trio.SocketStream | None = None
        self.protocol: ClientProtocol | None = None
        self.session_id = b""
        self.subscribed = 0
        self.subscribed_at_ns = 0
        self.lock = trio.Lock()
        self.scope: trio.CancelScope | None = None
        self.events: list[object] = []  # parsed but not yet taken
        self._all_subscribed = trio.Event()

    # --- connecting -----------------------------------------------------------------

    async def connect_retrying(self) -> None:
        while True:
            try:
                with trio.fail_after(30):
                    await self._connect()
                return
            except (Refused, OSError, trio.BrokenResourceError, trio.TooSlowError) as e:
                self.fleet.counts["refused"] += 1
                why = _refusal(e)
                self.fleet.refusals[why] = self.fleet.refusals.get(why, 0) + 1
                await self._drop()
                await trio.sleep(random.uniform(*RETRY_DELAY))

    async def _connect(self) -> None:
        fleet = self.fleet
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            await sock.bind((self.source, 0))
            await sock.connect((fleet.host, fleet.port))
        except OSError:
            sock.close()
            raise
        self.stream = trio.SocketStream(sock)
        self.protocol = ClientProtocol(parse_uri(f"ws://{fleet.host}:{fleet.port}/"),
                                       max_size=BLOCK_SIZE)
        self.protocol.send_request(self.protocol.connect())
        self.events = []
        await self._flush()
        while not any(isinstance(e, Response) for e in self.events):
            await self._read_events()
        response = next(e for e in self.events if isinstance(e, Response))
        self.events = self.events[self.events.index(response) + 1:]
        if response.status_code != 101 or self.protocol.handshake_exc is not None:
            raise Refused(f"HTTP {response.status_code}")
        hello = decode_server_hello(unpad_block(await self._next_block()))
        # Lean connections speak v10: plain blocks, no block encryption to keep up.
        version = negotiate_version(hello.min_version, hello.max_version,
                                    SMP_VERSION_MIN, LEGACY_VERSION)
        if version is None:
            raise Refused("no common version")
        reply = ClientHello(version, fleet.key_hash, fleet.client_key)
        await self._send_blocks([pad_block(encode_client_hello(reply))])
        self.session_id = hello.session_id
        self.subscribed = 0
        self._all_subscribed = trio.Event()
        await fleet.nursery.start(self._reader)

    async def _drop(self) -> None:
        self.subscribed_at_ns = NOT_SUBSCRIBED
        if self.scope is not None:
            self.scope.cancel()
            self.scope = None
        stream, self.stream = self.stream, None
        if stream is not None:
            await trio.aclose_forcefully(stream)

    async def storm(self, drop_at: float, back_after: float) -> None:
        await trio.sleep(drop_at)
        await self._drop()
        await trio.sleep(back_after)
        while True:  # until every queue is subscribed again, over however many attempts
            await self.connect_retrying()
            await self.subscribe_all()
            if self.subscribed >= self.count:
                break
            await self._drop()
            await trio.sleep(random.uniform(*RETRY_DELAY))
        self.fleet.storm_connection_done()

    # --- blocks -------------------------------------------------------------------------

    def _live(self) -> tuple[trio.SocketStream, ClientProtocol]:
        if self.stream is None or self.protocol is None:
            raise trio.BrokenResourceError("dropped")
        return self.stream, self.protocol

    async def _flush(self) -> None:
        stream, protocol = self._live()
        data = b"".join(protocol.data_to_send())
        if data:
            await stream.send_all(data)

    async def _send_blocks(self, blocks: list[bytes]) -> None:
        async with self.lock:
            if self.stream is None or self.protocol is None:
                raise trio.BrokenResourceError("not connected")
            for block in blocks:
                self.protocol.send_binary(block)
            await self._flush()

    async def _read_events(self) -> None:
        stream, protocol = self._live()
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise trio.BrokenResourceError("closed by the router")
        protocol.receive_data(data)
        events = protocol.events_received()
        if any(isinstance(e, Frame) and e.opcode is Opcode.PING for e in events):
            async with self.lock:
                await self._flush()  # the pong websockets queued
        self.events.extend(events)

    async def _next_block(self) -> bytes:
        while True:
            while self.events:
                event = self.events.pop(0)
                if isinstance(event, Frame) and event.opcode is Opcode.BINARY:
                    return bytes(event.data)
                if isinstance(event, Frame) and event.opcode is Opcode.CLOSE:
                    raise Refused("closed by the router")
            await self._read_events()

    async def _reader(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                      ) -> None:
        with trio.CancelScope() as self.scope:
            task_status.started()
            try:
                while True:
                    block = await self._next_block()
                    await self._handle_block(block)
            except (Refused, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            except Exception as e:  # noqa: BLE001 - a bench bug: reported, not fatal
                self.fleet.counts["reader_errors"] += 1
                self.fleet.last_error = f"{type(e).__name__}: {e}"
            finally:
                self._all_subscribed.set()  # whoever waits for the SUBs' answers: none come

    # --- SMP ---------------------------------------------------------------------------

    def _signed(self, seed: bytes, corr: bytes, entity: bytes, command: bytes) -> bytes:
        auth = crypto.authorize(seed, self.session_id, corr, entity, command)
        return encode_transmission(Transmission(auth, corr, entity, command))

    async def subscribe_all(self) -> None:
        if not self.count:
            return
        seed = self.fleet.rcv_seed
        transmissions = [
            self._signed(seed, _SUB + q.to_bytes(8, "big"), identities.recipient_id(q),
                         _SUB_COMMAND)
            for q in range(self.first, self.first + self.count)
        ]
        try:
            await self._send_blocks(encode_batches(transmissions))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        await self._all_subscribed.wait()

    async def send_message(self, sender_id: bytes, msg_id: int) -> None:
        body = time.monotonic_ns().to_bytes(8, "big") + msg_id.to_bytes(8, "big")
        command = encode_command(SEND(b"F", body))
        corr = _SEND + msg_id.to_bytes(8, "big")
        try:
            await self._send_blocks(
                encode_batches([self._signed(self.fleet.snd_seed, corr, sender_id, command)]))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.fleet.counts["send_errors"] += 1

    async def _handle_block(self, block: bytes) -> None:
        acks: list[bytes] = []
        for raw in decode_batch(block):
            t = decode_transmission(raw)
            response = decode_response(t.command)
            kind, corr = t.corr_id[:1], t.corr_id[1:]
            if kind == _SUB:
                self._sub_answered(response)
            elif kind == _SEND:
                if type(response) is OK:
                    self.fleet.sent_ok.add(int.from_bytes(corr, "big"))
                else:
                    self.fleet.counts["send_errors"] += 1
            elif kind == _ACK and type(response) is ERR:
                self.fleet.counts["ack_errors"] += 1
            if type(response) is MSG:
                self.fleet.record_message(self, t.entity_id, response)
                acks.append(self._signed(self.fleet.rcv_seed, _ACK + bytes(8), t.entity_id,
                                         encode_command(ACK(response.msg_id))))
            elif type(response) is END:
                self.fleet.counts["ends"] += 1
        if acks:
            try:
                await self._send_blocks(encode_batches(acks))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

    def _sub_answered(self, response: object) -> None:
        if type(response) is ERR:
            self.fleet.counts["sub_errors"] += 1
        self.subscribed += 1
        if self.subscribed == self.count:
            self.subscribed_at_ns = time.monotonic_ns()
            self._all_subscribed.set()
