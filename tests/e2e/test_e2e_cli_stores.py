"""The command line and the stores, on the real executable: the default durable
store in the default data directory, the memory store's snapshot on SIGINT and
SIGTERM, migrate-store's progress and count check, a corrupt store log."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from worker_count import one_process

from router.client import RecipientQueue, SMPError, open_client
from router.server.cli.settings import DEFAULT_STORE
from router.server.ops.stats_lines import HEADER
from store import KIND_FILE

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
ADDRESS = re.compile(rb"smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:\d+")


def smp_router(*args: str) -> list[str]:
    if SMP_ROUTER.exists():
        return [str(SMP_ROUTER), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


async def read_line(stream: trio.abc.ReceiveStream) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        line += chunk
    return line


@asynccontextmanager
async def serving(*args: str, stop: signal.Signals = signal.SIGTERM) -> AsyncIterator[str]:
    """`smp-router serve --port 0 ARGS`; yields its address; stopped by `stop` (exit 0)."""
    process = await trio.lowlevel.open_process(
        smp_router("serve", "--port", "0", "--log-level", "warning", *args),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = await read_line(process.stdout)
        match = ADDRESS.search(line)
        assert match is not None, line
        yield match.group().decode()
        process.send_signal(stop)
        assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def leave_a_message(address: str) -> RecipientQueue:
    async with open_client(address) as client:
        q = await client.create_queue()
        await client.send(q.sender_id, b"still here")
        return q


async def receive(address: str, q: RecipientQueue) -> bytes:
    async with open_client(address) as client:
        await client.subscribe(q)
        return (await client.next_event()).body


async def test_serve_without_store_flags_keeps_messages_in_the_default_data_directory():
    data_dir = Path(os.environ["XDG_DATA_HOME"]) / "smp-router"  # a temporary one in tests
    with trio.fail_after(60):
        async with serving() as address:
            q = await leave_a_message(address)
        assert (data_dir / KIND_FILE).read_text().strip() == DEFAULT_STORE
        assert (data_dir / "stats.csv").read_text().splitlines()[0] == HEADER
        async with serving() as address:
            assert await receive(address, q) == b"still here"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
async def test_the_memory_store_saves_undelivered_messages_on_a_signal_and_restores_them(
    stop, tmp_path
):
    args = ("--store", "memory", "--data-dir", str(tmp_path))
    with trio.fail_after(60):
        async with serving(*args, stop=stop) as address:
            q = await leave_a_message(address)
        async with serving(*args, stop=stop) as address:
            assert await receive(address, q) == b"still here"


async def test_the_memory_store_without_a_data_directory_writes_nothing():
    home = Path(os.environ["XDG_DATA_HOME"])
    with trio.fail_after(30):
        async with serving("--store", "memory") as address:
            await leave_a_message(address)
    assert list(home.iterdir()) == []


async def test_migrate_store_shows_progress_checks_counts_and_the_router_serves_the_copy(
    tmp_path,
):
    args = ("--data-dir", str(tmp_path))
    with trio.fail_after(60):
        async with serving("--store", "journal", *args) as address:
            q = await leave_a_message(address)
        result = await trio.run_process(
            smp_router("migrate-store", *args, "--to", "sqlite"), capture_stdout=True,
            capture_stderr=True,
        )
        err = result.stderr.decode()
        assert "queues [" in err and "1/1" in err and "messages [" in err
        assert "1 queues and 1 messages" in result.stdout.decode()
        assert "counts checked" in result.stdout.decode()
        async with serving(*args) as address:  # no --store: the kind the directory holds
            assert await receive(address, q) == b"still here"


async def test_a_corrupt_store_log_line_stops_the_start_naming_it_unless_skipped(tmp_path):
    args = ("--store", "journal", "--data-dir", str(tmp_path))
    with trio.fail_after(60):
        async with serving(*args) as address:
            async with open_client(address) as client:
                await client.create_queue()
                q = await client.create_queue()
                await client.create_queue()
        log = tmp_path / "journal-store" / "queues.log"
        lines = log.read_bytes().splitlines(keepends=True)
        lines[1] = b"0" + lines[1][1:] if lines[1][:1] != b"0" else b"1" + lines[1][1:]
        log.write_bytes(b"".join(lines))
        result = await trio.run_process(
            smp_router("serve", "--port", "0", *args), capture_stdout=True,
            capture_stderr=True, check=False,
        )
        err = result.stderr.decode().strip().splitlines()
        assert result.returncode == 2 and len(err) == 1, err
        assert f"{log}:2" in err[0] and "--skip-corrupt" in err[0]
        async with serving(*args, "--skip-corrupt") as address:
            async with open_client(address) as client:
                await client.create_queue()  # the router works
                with pytest.raises(SMPError, match="AUTH"):
                    await client.subscribe(q)  # the queue of the skipped line is gone
