"""The durability toolkit: atomic file replacement, the fsync policy, group commit."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

from store import durability
from store.durability import FsyncPolicy, GroupCommit, atomic_write, replace_durably


def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Patch os.fsync in the toolkit to note whether each call synced a directory or a file."""
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(durability.os, "fsync", fsync)
    return seen


def test_atomic_write_syncs_the_file_then_its_directory(tmp_path: Path, monkeypatch):
    seen = record_fsyncs(monkeypatch)
    target = tmp_path / "kind"
    target.write_bytes(b"old")
    assert atomic_write(target, (b"ne", b"w")) == 3
    assert target.read_bytes() == b"new"
    assert seen == ["file", "dir"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kind"]


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path: Path):
    target = tmp_path / "kind"
    target.write_bytes(b"old")

    def chunks():
        yield b"half"
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(target, chunks(), temp_suffix=".new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kind"]


def test_replace_durably_syncs_the_directory(tmp_path: Path, monkeypatch):
    seen = record_fsyncs(monkeypatch)
    (tmp_path / "a").write_bytes(b"x")
    replace_durably(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == b"x" and not (tmp_path / "a").exists()
    assert seen == ["dir"]


def test_the_fsync_policy_is_its_name_and_refuses_others():
    assert FsyncPolicy.parse("batch") is FsyncPolicy.BATCH
    assert FsyncPolicy.ALWAYS == "always"
    with pytest.raises(ValueError, match="fsync must be one of never, batch, always, not 'x'"):
        FsyncPolicy.parse("x")


async def test_one_group_commit_round_covers_every_waiter_that_arrived_during_the_last():
    rounds: list[int] = []
    handed: list[int] = []
    release = trio.Event()

    async def commit() -> None:
        rounds.append(len(handed))
        handed.clear()
        if len(rounds) == 1:
            await release.wait()  # the first round is slow: the others gather behind it

    group = GroupCommit(commit)

    async def writer(n: int) -> None:
        handed.append(n)
        await group.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer, 0)
        await trio.testing.wait_all_tasks_blocked()
        for n in range(1, 6):
            nursery.start_soon(writer, n)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert rounds == [1, 5]


_WRITER = """
import sys
from store.durability import atomic_write, own_temp_suffix
for n in range(int(sys.argv[2])):
    atomic_write(sys.argv[1], (sys.argv[3].encode() * 100,), temp_suffix=own_temp_suffix())
"""


def test_processes_writing_one_file_at_once_each_replace_it_whole(tmp_path: Path):
    """Workers starting together write the same file of a shared data directory (its
    STORE_KIND): each write replaces the file whole, none fails for the other's
    temporary file, and none is left behind."""
    target = tmp_path / "STORE_KIND"
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(target), "300", letter],
                                cwd=Path(__file__).resolve().parents[2], stderr=subprocess.PIPE)
               for letter in "ab"]
    errors = [w.communicate(timeout=60)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    assert target.read_bytes() in (b"a" * 100, b"b" * 100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["STORE_KIND"]
