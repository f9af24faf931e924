"""One process per data directory: a second `serve`, `init` or `migrate-store` on a
directory a router is using refuses with one line naming it and the router's pid
(exit 2), and a router killed with SIGKILL leaves no lock behind."""

from __future__ import annotations

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

from router.client import open_client
from router.server.settings.datadir import LOCK_FILE, DataDirInUse, lock_data_dir

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
ADDRESS = re.compile(rb"smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:\d+")
STORES = ["memory", "journal", "sqlite"]


def smp_router(*args: str) -> list[str]:
    if SMP_ROUTER.exists():
        return [str(SMP_ROUTER), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


def serve_args(data_dir: Path, store: str) -> list[str]:
    return smp_router(
        "serve", "--port", "0", "--store", store, "--data-dir", str(data_dir),
        "--log-level", "warning",
    )


@asynccontextmanager
async def serving(command: list[str]) -> AsyncIterator[tuple[trio.Process, str]]:
    """A router process and its address, once it listens; killed if still running."""
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert process.stdout is not None
        line = b""
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, f"the router ended before listening: {line!r}"
            line += chunk
        match = ADDRESS.search(line)
        assert match is not None, line
        yield process, match.group().decode()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def refused(command: list[str], data_dir: Path, pid: int) -> None:
    result = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1, lines
    assert str(data_dir) in lines[0] and f"process {pid}" in lines[0], lines[0]


@pytest.mark.parametrize("store", STORES)
async def test_a_second_router_on_a_data_directory_in_use_refuses_naming_the_first(
    tmp_path, store
):
    data_dir = tmp_path / "data"
    with trio.fail_after(60):
        async with serving(serve_args(data_dir, store)) as (first, address):
            await refused(serve_args(data_dir, store), data_dir, first.pid)
            await refused(smp_router("init", "--data-dir", str(data_dir)), data_dir, first.pid)
            async with open_client(address) as client:  # the first one is unharmed
                q = await client.create_queue()
                await client.send(q.sender_id, b"still here")


async def test_migrate_store_refuses_while_the_router_runs_and_leaves_its_data_alone(tmp_path):
    data_dir = tmp_path / "data"
    with trio.fail_after(60):
        async with serving(serve_args(data_dir, "journal")) as (router, address):
            async with open_client(address) as client:
                q = await client.create_queue()
                await client.send(q.sender_id, b"kept")
            migrate = smp_router("migrate-store", "--data-dir", str(data_dir), "--to", "sqlite")
            await refused(migrate, data_dir, router.pid)
            router.send_signal(signal.SIGTERM)
            assert await router.wait() == 0
        assert not (data_dir / "sqlite-store").exists()
        async with serving(serve_args(data_dir, "journal")) as (_, address):
            async with open_client(address) as client:
                await client.subscribe(q)
                assert (await client.next_event()).body == b"kept"


@pytest.mark.parametrize("store", STORES)
async def test_a_lock_left_by_a_killed_router_does_not_block_the_next_start(tmp_path, store):
    data_dir = tmp_path / "data"
    with trio.fail_after(60):
        async with serving(serve_args(data_dir, store)) as (first, _):
            first.send_signal(signal.SIGKILL)
            await first.wait()
        assert (data_dir / LOCK_FILE).exists()
        # A killed memory store did not save: its next start must be told to go on
        # from the last complete save (docs/stores.md, "A full disk").
        again = ["--after-failed-save"] if store == "memory" else []
        async with serving([*serve_args(data_dir, store), *again]) as (second, address):
            assert (data_dir / LOCK_FILE).read_text().strip() == str(second.pid)
            async with open_client(address) as client:
                await client.create_queue()


def test_the_lock_is_exclusive_between_open_files_and_free_again_once_released(tmp_path):
    with lock_data_dir(tmp_path):
        with pytest.raises(DataDirInUse) as refusal, lock_data_dir(tmp_path):
            pass
        assert refusal.value.data_dir == tmp_path
    with lock_data_dir(tmp_path):
        pass


def test_migrate_store_on_a_missing_directory_creates_nothing(tmp_path):
    with lock_data_dir(tmp_path / "missing", create=False):
        pass
    assert not (tmp_path / "missing").exists()
