"""What the router creates in its data directory is private: `init` makes a missing
directory 0700, and every file and directory the router writes there afterwards
(identity, configuration, lock, stores, statistics) is its owner's alone."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import trio
from ops_helpers import run_cli, serving

from router.client import open_client


def modes_open_to_others(root: Path) -> list[str]:
    """Every path under `root` (itself included) that group or others may use."""
    paths = [root, *root.rglob("*")]
    return [f"{p}: {stat.S_IMODE(p.stat().st_mode):o}" for p in paths
            if stat.S_IMODE(p.stat().st_mode) & 0o077]


@pytest.mark.parametrize("store", ["journal", "sqlite"])
async def test_init_then_serve_leaves_only_private_files(tmp_path, store):
    data = tmp_path / "new" / "data"
    with trio.fail_after(60):
        code, _, err = await run_cli("init", "--data-dir", str(data))
        assert code == 0, err
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert modes_open_to_others(data) == []
        async with serving("--data-dir", str(data), "--store", store, "--port", "0",
                           "--stats-interval", "1") as (_, address):
            async with open_client(address) as client:
                q = await client.create_queue()
                await client.send(q.sender_id, b"kept for later")
    names = {p.name for p in data.rglob("*")}
    assert f"{store}-store" in names and "identity.key" in names, names
    assert modes_open_to_others(data) == []


def test_main_called_in_a_process_leaves_its_umask_as_it_was(tmp_path):
    import os

    from router.server.cli.main import main

    before = os.umask(0o022)
    try:
        assert main(["init", "--data-dir", str(tmp_path / "data")]) == 0
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(before)
    assert modes_open_to_others(tmp_path / "data") == []
