"""`smp-router serve --workers N` as a process of its own, for the supervisor tests:
started from this checkout, its log in a file the tests read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio
from worker_count import one_process

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"(smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:(\d+))")
PIDS = re.compile(r"(\d+) workers serving, pids ([\d ]+)")


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "router.server", *args]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@dataclass
class Supervised:
    process: trio.Process
    address: str
    log_file: Path

    def log(self) -> str:
        return self.log_file.read_text()

    def worker_pids(self) -> list[int]:
        found = PIDS.search(self.log())
        assert found is not None, self.log()
        return [int(pid) for pid in found[2].split()]

    async def until_logged(self, predicate: Callable[[str], bool], what: str) -> str:
        with trio.move_on_after(30):
            while not predicate(self.log()):
                await trio.sleep(0.05)
            return self.log()
        raise AssertionError(f"never logged: {what}\n{self.log()}")


async def run(*args: str) -> tuple[int, str, str]:
    result = await trio.run_process(command(*one_process(args)), capture_stdout=True,
                                    capture_stderr=True, check=False, env=environment())
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@asynccontextmanager
async def supervised(data_dir: Path, *args: str, workers: int = 2) -> AsyncIterator[Supervised]:
    """The router until its ready line; stopped with SIGTERM after the block (unless the
    test ended it), which must end it with exit code 0."""
    log_file = data_dir.parent / f"{data_dir.name}.log"
    async with serving(log_file, "--data-dir", str(data_dir), "--workers", str(workers),
                       *args) as (process, address):
        yield Supervised(process, address, log_file)


@asynccontextmanager
async def serving(log_file: Path, *args: str) -> AsyncIterator[tuple[trio.Process, str]]:
    """`smp-router serve ARGS` on a port of its own, with its log in `log_file`, until
    its ready line: the process and the router's address."""
    process = await trio.lowlevel.open_process(
        command(*one_process(["serve", "--port", "0", "--host", "127.0.0.1", "--log-file",
                              str(log_file), *args])),
        stdout=subprocess.PIPE, env=environment(),
    )
    try:
        assert process.stdout is not None
        with trio.fail_after(60):
            line = b""
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                if not chunk:
                    break
                line += chunk
        found = ADDRESS.search(line.decode())
        assert found is not None, (line, log_file.read_text() if log_file.exists() else "")
        yield process, found[1]
        if process.poll() is None:
            process.terminate()
            with trio.fail_after(60):
                assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose: only its parent's wait is left.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
