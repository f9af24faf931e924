"""The `smp-router` command-line contract, tested on the real executable."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import pytest
import trio
from worker_count import one_process

from router.client import RecipientQueue, SMPClient, open_client
from router.server import RouterConfig, serve_router
from router.server.cli.main import main

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "embedded_gateway.py"
T = TypeVar("T")
STARTED = re.compile(r"(smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:(\d+)) and (ws://127\.0\.0\.1:(\d+))")


def smp_router(*args: str) -> list[str]:
    if SMP_ROUTER.exists():
        return [str(SMP_ROUTER), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


async def read_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        data += chunk
    return data


async def read_rest(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


@asynccontextmanager
async def running(command: list[str]) -> AsyncIterator[tuple[trio.Process, str]]:
    """The process and the first line it printed; killed if the test leaves early."""
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert process.stdout is not None
        line = (await read_line(process.stdout)).decode()
        yield process, line
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
@pytest.mark.parametrize("delivery", ["single-task", "per-queue-task"])
async def test_serve_prints_one_line_with_both_addresses_and_stops_cleanly_on_a_signal(
    stop_signal, delivery
):
    command = smp_router(
        "serve", "--host", "127.0.0.1", "--port", "0", "--store", "memory",
        "--delivery", delivery, "--log-level", "warning",
    )
    with trio.fail_after(30):
        async with running(command) as (process, line):
            match = STARTED.search(line)
            assert match is not None, line
            assert match.group(2) == match.group(4) != "0"
            async with open_client(match.group(1)) as client:
                q = await client.create_queue(subscribe=True)
                await client.send(q.sender_id, b"via the cli")
                assert (await client.next_event()).body == b"via the cli"
            process.send_signal(stop_signal)
            assert await process.wait() == 0
            assert process.stdout is not None
            assert await read_rest(process.stdout) == b""  # exactly one line


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--port", "not-a-port"],
        ["serve", "--delivery", "threads"],
        ["serve", "--quota", "-3"],
        ["serve", "--password", "has space"],
        ["serve", "--fsync", "sometimes"],
        ["launch"],
    ],
)
def test_a_bad_flag_or_configuration_exits_2_with_one_line_and_no_traceback(args):
    result = subprocess.run(smp_router(*args), capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0]
    assert "Traceback" not in result.stderr


def test_a_port_that_is_taken_exits_2_with_one_line_naming_the_address():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            smp_router("serve", "--port", port, "--store", "memory", "--log-level", "error"),
            capture_output=True, text=True, timeout=30,
        )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert f"127.0.0.1:{port}" in result.stderr


async def test_a_data_directory_keeps_the_router_address_across_restarts(tmp_path):
    command = smp_router(
        "serve", "--port", "0", "--data-dir", str(tmp_path), "--log-level", "error"
    )
    addresses = []
    with trio.fail_after(30):
        for _ in range(2):
            async with running(command) as (process, line):
                match = STARTED.search(line)
                assert match is not None, line
                addresses.append(match.group(1).split("@")[0])
                process.send_signal(signal.SIGTERM)
                assert await process.wait() == 0
    assert addresses[0] == addresses[1]


async def test_the_gateway_example_runs_as_a_script_and_stops_on_sigint():
    command = [sys.executable, str(EXAMPLE), "--port", "0", "--health-port", "0"]
    with trio.fail_after(30):
        async with running(command) as (process, line):
            assert "ws://127.0.0.1:" in line and "/smp" in line
            process.send_signal(signal.SIGINT)
            assert await process.wait() == 0



def test_migrate_store_moves_queues_and_messages_to_another_kind_keeping_the_address(tmp_path):
    async def run(kind: str, work: Callable[[SMPClient], Awaitable[T]]) -> tuple[str, T]:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                config = RouterConfig(port=0, store=kind, data_dir=tmp_path)
                info = await nursery.start(serve_router, config)
                async with open_client(info.address) as client:
                    result = await work(client)
                nursery.cancel_scope.cancel()
        return info.address, result

    async def create_and_send(client: SMPClient) -> RecipientQueue:
        q = await client.create_queue()
        await client.send(q.sender_id, b"kept")
        return q

    async def receive(client: SMPClient) -> bytes:
        await client.subscribe(q)
        return (await client.next_event()).body

    # a sync test: each router gets its own trio.run, as the command line does
    address, q = trio.run(run, "journal", create_and_send)
    assert main(["migrate-store", "--data-dir", str(tmp_path), "--to", "sqlite"]) == 0
    new_address, body = trio.run(run, "sqlite", receive)
    assert new_address.split("@")[0] == address.split("@")[0] and body == b"kept"
