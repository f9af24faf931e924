"""A full disk: SEND is answered ERR (never OK for a message that was not stored),
and the router works again once there is space.

Two ways to fill the disk, both run when they can: a real, small tmpfs holding
the data directory, filled with a filler file (needs the right to mount, as CI
has), and an injected ENOSPC in-process (the journal's writes fail; SQLite
is held to its current size with `PRAGMA max_page_count`, which fails its writes
with SQLITE_FULL, the error a full disk gives).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from small_disk import fill, mounted_tmpfs
from worker_count import serve_router_under_test

import store.journal.messages
from router.client import SMPClient, SMPError, open_client
from router.server import RouterConfig, RouterInfo
from store.sqlite.messages import SqliteMessageStore

BODY = os.urandom(16000)  # a full-size message, so one does not fit in leftover bytes
TMPFS_SIZE = "4m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs mounted for the test."""
    with mounted_tmpfs(tmp_path / "disk", TMPFS_SIZE) as mount:
        yield mount


@asynccontextmanager
async def running_router(kind: str, data_dir: Path) -> AsyncIterator[RouterInfo]:
    config = RouterConfig(port=0, store=kind, data_dir=data_dir, quota=10_000)
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_router_under_test, config)
        nursery.cancel_scope.cancel()


async def send_until_refused(client: SMPClient, sender_id: bytes, limit: int = 50) -> tuple[
    list[bytes], SMPError
]:
    """SENDs until one is refused; returns the bodies answered OK and the refusal."""
    accepted = []
    for i in range(limit):
        body = b"%d " % i + BODY
        try:
            await client.send(sender_id, body)
        except SMPError as e:
            return accepted, e
        accepted.append(body)
    raise AssertionError(f"{limit} SENDs of {len(BODY)} bytes on a full disk were all OK")


async def full_disk_round(client: SMPClient, make_full, make_room) -> None:
    """Before, during and after a full disk; `make_full` and `make_room` are async."""
    q = await client.create_queue()
    await client.send(q.sender_id, b"before")
    await make_full()
    accepted, refusal = await send_until_refused(client, q.sender_id)
    assert refusal.error.tag == "STORE", refusal.error  # e.g. STORE No space left on device
    await make_room()
    await client.send(q.sender_id, b"after")
    await client.subscribe(q)
    received = []
    for _ in range(len(accepted) + 2):
        event = await client.next_event()
        received.append(event.body)
        await client.ack(q, event.msg_id)
    assert received == [b"before", *accepted, b"after"]
    assert (await client.info(q))["qiSize"] == 0


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
async def test_a_full_tmpfs_makes_send_fail_and_the_router_resumes_when_space_returns(
    kind, small_disk
):
    filler: list[Path] = []

    async def make_full() -> None:
        filler.append(fill(small_disk))

    async def make_room() -> None:
        filler.pop().unlink()

    with trio.fail_after(60):
        async with running_router(kind, small_disk / "data") as info:
            async with open_client(info.address) as client:
                await full_disk_round(client, make_full, make_room)


class InjectedFullDisk:
    """ENOSPC for the journal's writes; SQLite held to its current size."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        self.sqlite: SqliteMessageStore | None = None
        real_write_all = store.journal.messages.write_all

        def write_all(fd: int, data: bytes) -> None:
            if self.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real_write_all(fd, data)

        monkeypatch.setattr(store.journal.messages, "write_all", write_all)

    async def make_full(self) -> None:
        self.full = True
        if self.sqlite is not None:
            await self.sqlite.db.write(_hold_size)

    async def make_room(self) -> None:
        self.full = False
        if self.sqlite is not None:
            await self.sqlite.db.write(_let_grow)


def _hold_size(conn: sqlite3.Connection) -> None:
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {int(pages)}")


def _let_grow(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA max_page_count = 4294967294")


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
async def test_an_injected_enospc_makes_send_fail_and_the_router_resumes(
    kind, tmp_path, monkeypatch
):
    disk = InjectedFullDisk(monkeypatch)
    with trio.fail_after(60):
        async with running_router(kind, tmp_path / "data") as info:
            if kind == "sqlite":
                assert isinstance(info.router.messages, SqliteMessageStore)
                disk.sqlite = info.router.messages
            async with open_client(info.address) as client:
                await full_disk_round(client, disk.make_full, disk.make_room)
