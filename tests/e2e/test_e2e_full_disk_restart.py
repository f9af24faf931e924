"""A full disk across stops and starts, on every store kind: nothing answered OK is
lost, ACK keeps working, SIGTERM exits 0, a start on the full disk serves what it
has, and a store that could not save refuses to start with one line naming the file.

The router runs as `smp-router serve` in its own process (its exit codes are part
of what is checked), on a small tmpfs filled up by the test (needs the right to
mount, as CI has), or with ENOSPC injected in that process
(enospc_router.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from small_disk import fill, mounted_tmpfs

from router.client import SMPClient, SMPError, open_client

ENOSPC_ROUTER = Path(__file__).with_name("enospc_router.py")
DISK_SIZE = "24m"  # room for the sqlite store's 8 MiB reserve and its files
BODY = os.urandom(15000)
STARTED_WITHIN = 30.0


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", DISK_SIZE) as mount:
        yield mount


class RouterProcess:
    """`smp-router serve` in a process of its own; `address` once it listens."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.address = ""
        self.stderr = b""

    async def stop(self) -> int:
        """SIGTERM; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            return await self.process.wait()


def serve_command(kind: str, data_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ENOSPC_ROUTER), "serve", "--workers", "1", "--store", kind,
            "--data-dir", str(data_dir), "--port", "0", "--log-level", "warning", "--quota",
            "5000", *extra]


@asynccontextmanager
async def router_process(kind: str, data_dir: Path, *extra: str,
                         enospc: str = "") -> AsyncIterator[RouterProcess]:
    env = {**os.environ, "SMP_ENOSPC": enospc}
    process = await trio.lowlevel.open_process(
        serve_command(kind, data_dir, *extra), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env,
    )
    router = RouterProcess(process)
    try:
        with trio.fail_after(STARTED_WITHIN):
            line = b""
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(4096)
                if not chunk:
                    err = await process.stderr.receive_some(65536)
                    raise AssertionError(f"the router did not start: {err.decode()}")
                line += chunk
        router.address = next(w for w in line.decode().split() if w.startswith("smp://"))
        yield router
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


def start_refused(kind: str, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(serve_command(kind, data_dir, *extra), capture_output=True,
                          text=True, timeout=60)


async def send_until_refused(client: SMPClient, sender_id: bytes, limit: int = 3000
                             ) -> tuple[list[bytes], SMPError]:
    accepted = []
    for i in range(limit):
        body = b"%05d " % i + BODY
        try:
            await client.send(sender_id, body)
        except SMPError as e:
            return accepted, e
        accepted.append(body)
    raise AssertionError(f"{limit} SENDs on a full disk were all OK")


async def receive_all(client: SMPClient, queue, count: int) -> list[bytes]:
    """Subscribe, then take and ACK `count` messages; every ACK must be answered OK."""
    await client.subscribe(queue)
    received = []
    for _ in range(count):
        with trio.fail_after(10):
            event = await client.next_event()
        received.append(event.body)
        await client.ack(queue, event.msg_id)
    return received


@pytest.mark.parametrize("kind", ["memory", "journal", "sqlite"])
async def test_a_full_disk_loses_nothing_answered_ok_across_stops_and_starts(kind, tmpfs):
    data_dir = tmpfs / "data"
    filler = tmpfs / "filler"
    async with router_process(kind, data_dir) as router:
        async with open_client(router.address) as client:
            queue = await client.create_queue()
            first = [b"before %d " % i + BODY for i in range(3)]
            for body in first:
                await client.send(queue.sender_id, body)
            fill(tmpfs)
            accepted, refusal = await send_until_refused(client, queue.sender_id)
            assert refusal.error.tag == "STORE", refusal.error
            # ACK works on the full disk: the first message goes.
            assert await receive_all(client, queue, 1) == first[:1]
        assert await router.stop() == 0, "SIGTERM on a full disk"
    waiting = [*first[1:], *accepted]
    # A start on the still-full disk serves what it has.
    async with router_process(kind, data_dir) as router:
        async with open_client(router.address) as client:
            received = await receive_all(client, queue, len(waiting))
            assert received == waiting
            try:
                await client.send(queue.sender_id, b"during " + BODY)
                during = [b"during " + BODY]
            except SMPError as e:
                assert e.error.tag == "STORE", e.error
                during = []
        assert await router.stop() == 0
    filler.unlink()
    async with router_process(kind, data_dir) as router:
        async with open_client(router.address) as client:
            await client.send(queue.sender_id, b"after")
            assert await receive_all(client, queue, len(during) + 1) == [*during, b"after"]
        assert await router.stop() == 0


async def test_a_memory_store_that_could_not_save_refuses_to_start_and_names_the_file(tmp_path):
    data_dir = tmp_path / "data"
    async with router_process("memory", data_dir) as router:  # a first, complete save
        async with open_client(router.address) as client:
            queue = await client.create_queue()
            await client.send(queue.sender_id, b"saved")
        assert await router.stop() == 0
    async with router_process("memory", data_dir, enospc="snapshot") as router:
        async with open_client(router.address) as client:
            await client.send(queue.sender_id, b"not saved")
        assert await router.stop() == 2  # the snapshot failed: one line, exit code 2
    refused = start_refused("memory", data_dir)
    assert refused.returncode == 2
    lines = refused.stderr.splitlines()
    reserve = data_dir / "memory-store" / "snapshot.reserve"
    assert len(lines) == 1 and str(reserve) in lines[0], refused.stderr
    assert "--after-failed-save" in lines[0]
    # Told to, it starts from the last complete save.
    async with router_process("memory", data_dir, "--after-failed-save") as router:
        async with open_client(router.address) as client:
            assert await receive_all(client, queue, 1) == [b"saved"]
        assert await router.stop() == 0
    async with router_process("memory", data_dir) as router:  # saved again: starts as usual
        assert await router.stop() == 0


async def test_a_memory_store_without_room_for_its_snapshot_refuses_sends_not_the_save(
    tmp_path,
):
    data_dir = tmp_path / "data"
    async with router_process("memory", data_dir, enospc="reserve") as router:
        async with open_client(router.address) as client:
            with pytest.raises(SMPError) as refused:
                await client.create_queue()
            assert refused.value.error.tag == "STORE"
        assert await router.stop() == 0
