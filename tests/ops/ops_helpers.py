"""HTTP and control-port clients for the operation tests."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio
from worker_count import one_process


async def http_get(port: int, target: str, headers: dict[str, str] | None = None,
                   method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request to 127.0.0.1:port; (status, lower-cased headers, body)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {k.strip().lower(): v.strip()
              for k, v in (h.split(":", 1) for h in header_lines)}
    return int(status_line.split()[1]), parsed, body


class ControlClient:
    """The control port's line protocol, one command and its answer at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._buffer = b""

    async def command(self, line: str, *, lines: int = 1) -> list[str]:
        """Send `line`; read `lines` lines back, or until the `expect_end` marker."""
        await self.stream.send_all(line.encode() + b"\n")
        return [await self.read_line() for _ in range(lines)]

    async def until(self, line: str, predicate: Callable[[str], bool]) -> list[str]:
        """Send `line`; read lines until one satisfies `predicate` (included)."""
        await self.stream.send_all(line.encode() + b"\n")
        out = [await self.read_line()]
        while not predicate(out[-1]):
            out.append(await self.read_line())
        return out

    async def read_line(self) -> str:
        while b"\n" not in self._buffer:
            chunk = await self.stream.receive_some(4096)
            if not chunk:
                raise EOFError(self._buffer)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


async def open_control(port: int) -> ControlClient:
    return ControlClient(await trio.open_tcp_stream("127.0.0.1", port))


# --- the real command line -------------------------------------------------------------

SMP_ROUTER = Path(sys.executable).with_name("smp-router")
ADDRESS = re.compile(r"(smp://[A-Za-z0-9_=-]{44}@127\.0\.0\.1:(\d+))")


def smp_router(*args: str) -> list[str]:
    if SMP_ROUTER.exists():
        return [str(SMP_ROUTER), *one_process(args)]
    return [sys.executable, "-m", "router.server", *one_process(args)]


async def run_cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """`smp-router ARGS` to its end: (exit code, stdout, stderr)."""
    result = await trio.run_process(smp_router(*args), stdin=stdin, capture_stdout=True,
                                    capture_stderr=True, check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def read_line(stream: trio.abc.ReceiveStream) -> str:
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        line += chunk
    return line.decode()


@asynccontextmanager
async def serving(*args: str, stderr: int | None = subprocess.DEVNULL
                  ) -> AsyncIterator[tuple[trio.Process, str]]:
    """`smp-router serve ARGS` until its address line; yields (process, address) and
    stops it with SIGTERM (unless it ended by itself), which must end it with exit code 0."""
    process = await trio.lowlevel.open_process(smp_router("serve", *args),
                                               stdout=subprocess.PIPE, stderr=stderr)
    try:
        assert process.stdout is not None
        line = await read_line(process.stdout)
        match = ADDRESS.search(line)
        assert match is not None, line
        yield process, match[1]
        if process.poll() is None:
            process.terminate()
        assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
