"""Private message routing between two `smp-router serve` processes on 127.0.0.1
(docs/protocol.md#private-message-routing, README "Private message routing").

A client of router A sends through A to a queue on router B; the recipient on B gets
the message. B's log and its metrics show one connection of A, the proxy, and never
the senders'. Then B stops: the client gets the proxy's error within the connect
timeout; B starts again on the same port and data directory: sending through A works
again.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from worker_count import one_process

from router.client import MessageEvent, ProxyError, open_client, parse_address
from router.protocol.errors import proxy_error_parts

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
STARTED = re.compile(rb"(smp://([A-Za-z0-9_=-]{44})@127\.0\.0\.1:(\d+))")
METRICS = re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")
PROXY_CONNECTED = re.compile(r"proxy 127\.0\.0\.1:\d+ connected")
CONNECT_TIMEOUT = 3.0


@dataclass
class Served:
    process: trio.Process
    address: str
    port: int
    key_hash: bytes
    log: Path

    def log_text(self) -> str:
        return self.log.read_text()


def smp_router(*args: str) -> list[str]:
    if SMP_ROUTER.exists():
        return [str(SMP_ROUTER), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


@asynccontextmanager
async def serving(data_dir: Path, port: int = 0) -> AsyncIterator[Served]:
    """`smp-router serve` with info logging to a file and metrics; SIGTERM at the end."""
    log = data_dir / "router.log"
    command = smp_router(
        "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir),
        "--store", "journal", "--log-level", "info", "--log-file", str(log),
        "--metrics-port", "0", "--proxy-connect-timeout", str(CONNECT_TIMEOUT),
        "--proxy-error-hold", "0.2", "--proxy-allow-destinations", "127.0.0.0/8",
    )
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                assert chunk, "the router exited before it printed its address"
                line += chunk
        match = STARTED.search(line)
        assert match is not None, line
        parsed = parse_address(match[1].decode())
        yield Served(process, match[1].decode(), parsed.port, parsed.key_hash, log)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(15) as scope:
                scope.shield = True
                await process.wait()
            if process.returncode is None:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()


async def metrics(served: Served) -> dict[str, float]:
    match = METRICS.search(served.log_text())
    assert match is not None, served.log_text()
    stream = await trio.open_tcp_stream("127.0.0.1", int(match[1]))
    async with stream:
        await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    values = {}
    for line in data.decode().split("\r\n\r\n", 1)[1].splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


async def test_two_routers_a_proxies_to_b_b_sees_only_a_b_stops_and_comes_back(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with trio.fail_after(120):
        async with serving(tmp_path / "a") as a:
            async with serving(tmp_path / "b") as b:
                async with open_client(b.address) as recipient:
                    queue = await recipient.create_queue()
                    await recipient.subscribe(queue)
                    for n in range(3):  # three senders, each its own connection to A
                        async with open_client(a.address) as sender:
                            session = await sender.open_proxied_session(b.address)
                            body = f"via A, sender {n}".encode()
                            await sender.proxied_send(session, queue.sender_id, body)
                            event = await recipient.next_event()
                            assert isinstance(event, MessageEvent) and event.body == body
                            await recipient.ack(queue, event.msg_id)
                b_metrics = await metrics(b)
                # B served two connections: the recipient's and A's (the proxy).
                assert b_metrics["smp_router_connections_total"] == 2
                assert b_metrics["simplex_smp_relay_messages_received"] == 3
                assert b_metrics["simplex_smp_messages_sent"] == 3
                assert len(PROXY_CONNECTED.findall(b.log_text())) == 1
                a_metrics = await metrics(a)
                assert a_metrics['simplex_smp_relay_sessions_requests{source="all"}'] == 3
                assert a_metrics['simplex_smp_relay_messages_successes{source="all"}'] == 3
                assert a_metrics["smp_router_proxy_connections"] == 1
                b_port, b_key, b_address = b.port, b.key_hash, b.address
            # B stopped: the proxy's error, within the connect timeout.
            async with open_client(a.address) as sender:
                with trio.fail_after(CONNECT_TIMEOUT + 2), pytest.raises(ProxyError) as down:
                    await sender.open_proxied_session(b_address)
                parts = proxy_error_parts(down.value.error)
                assert parts is not None and (parts.kind, parts.broker) == ("BROKER", b"NETWORK")
                assert "proxy cannot connect to 127.0.0.1" in a.log_text()
                # B again, on its port, with its identity and its queue.
                async with serving(tmp_path / "b", b_port) as b_again:
                    assert (b_again.port, b_again.key_hash) == (b_port, b_key)
                    await trio.sleep(0.3)  # past the proxy's error hold
                    session = await sender.open_proxied_session(b_again.address)
                    await sender.proxied_send(session, queue.sender_id, b"after the restart")
                    async with open_client(b_again.address) as recipient:
                        recipient.add_queue(queue)
                        await recipient.subscribe(queue)
                        with trio.fail_after(10):
                            event = await recipient.next_event()
                        assert isinstance(event, MessageEvent)
                        assert event.body == b"after the restart"
