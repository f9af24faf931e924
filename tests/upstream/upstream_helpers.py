"""Upstream's browser SMP client (simplexmq `smp-web`, unmodified) driven from pytest.

`scripts/build-upstream-web-client.sh` builds it from ../shared/upstream/ into a cache
outside the repository; `UpstreamRepl` runs its own REPL driver (`dist-test/
client-repl.js`: one command a line on stdin, one result a line on stdout) under Node,
with `ws_early_messages.mjs` preloaded for the Node-only race its README describes.
These tests never skip: without Node.js or without the archive they fail and say what
is missing (CI has both).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

REPO = Path(__file__).resolve().parents[2]
ARCHIVE_DIR = Path(os.environ.get("SMP_UPSTREAM_ARCHIVE", REPO.parent / "shared" / "upstream"))
BUILD_SCRIPT = REPO / "scripts" / "build-upstream-web-client.sh"
PRELOAD = Path(__file__).with_name("ws_early_messages.mjs")


def build_upstream_client() -> Path:
    """The built client's directory (smp-web), building it first if the cache lacks it."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("tests/upstream need Node.js on PATH")
    if not any(ARCHIVE_DIR.glob("simplexmq-smp-web-*.tar.gz")):
        pytest.fail(f"tests/upstream need upstream's client archive in {ARCHIVE_DIR}")
    proc = subprocess.run(
        [str(BUILD_SCRIPT), str(ARCHIVE_DIR)], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        pytest.fail(f"building upstream's client failed:\n{proc.stderr[-4000:]}")
    client_dir = Path(proc.stdout.strip().splitlines()[-1])
    if not (client_dir / "dist-test" / "client-repl.js").exists():
        pytest.fail(f"no dist-test/client-repl.js in {client_dir}")
    return client_dir


class UpstreamRepl:
    """One client-repl process: `await repl.command("PING")` returns its one-line answer."""

    def __init__(self, process: trio.Process) -> None:
        self._process = process
        self._buffer = b""

    async def command(self, line: str, timeout: float = 30) -> str:
        assert self._process.stdin is not None
        await self._process.stdin.send_all(line.encode() + b"\n")
        with trio.fail_after(timeout):
            return await self._line()

    async def _line(self) -> str:
        assert self._process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self._process.stdout.receive_some(65536)
            if not chunk:
                raise AssertionError("upstream's client REPL exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()


@asynccontextmanager
async def upstream_repl(client_dir: Path) -> AsyncIterator[UpstreamRepl]:
    """A running REPL, ended (CLOSE, stdin closed, then killed if it lingers) on exit."""
    node = shutil.which("node")
    assert node is not None
    env = {**os.environ, "SMP_UPSTREAM_CLIENT_DIR": str(client_dir)}
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            partial(
                trio.run_process,
                [node, "--import", PRELOAD.as_uri(), "dist-test/client-repl.js"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, check=False,
                cwd=client_dir, env=env,
            )
        )
        repl = UpstreamRepl(process)
        try:
            yield repl
        finally:
            assert process.stdin is not None
            with trio.move_on_after(5):
                await repl.command("CLOSE")
            await process.stdin.aclose()
            with trio.move_on_after(5):
                await process.wait()
            process.kill()


async def run_node_script(client_dir: Path, script: str, timeout: float = 60) -> str:
    """Run an ES module in the client's directory (so its imports resolve as upstream's
    own tests do) with the preload, and return what it prints; fail with its stderr."""
    node = shutil.which("node")
    assert node is not None
    env = {**os.environ, "SMP_UPSTREAM_CLIENT_DIR": str(client_dir)}
    with trio.fail_after(timeout):
        proc = await trio.run_process(
            [node, "--import", PRELOAD.as_uri(), "--input-type=module", "-e", script],
            capture_stdout=True, capture_stderr=True, check=False, cwd=client_dir, env=env,
        )
    if proc.returncode != 0:
        pytest.fail(f"node script failed ({proc.returncode}):\n{proc.stderr.decode()[-4000:]}")
    return proc.stdout.decode()
