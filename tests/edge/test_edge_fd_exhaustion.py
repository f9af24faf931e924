"""Descriptor exhaustion, in a router subprocess under a lowered RLIMIT_NOFILE."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio
from edge_helpers import SERVED_WITHIN, exchange, read_response_head, upgrade_request

from router.client import open_client

HELPER = Path(__file__).with_name("fd_limited_router.py")
NOFILE = 256


class Lines:
    """A subprocess's stdout, line by line."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> str:
        while b"\n" not in self._buffer:
            data = await self._stream.receive_some(4096)
            assert data, "the router process ended"
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()


async def collect(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    while data := await stream.receive_some(65536):
        into += data


@pytest.mark.one_process("a router of one process out of descriptors: workers under the "
                         "supervisor each have their own, the suites' share one process's")
async def test_out_of_descriptors_established_clients_go_on_and_new_ones_follow():
    process = await trio.lowlevel.open_process(
        [sys.executable, str(HELPER), str(NOFILE)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    stderr = bytearray()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect, process.stderr, stderr)
            lines = Lines(process.stdout)
            with trio.fail_after(20):
                _, port, address = (await lines.next()).split()
            async with open_client(address) as established:
                await process.stdin.send_all(b"hog\n")
                with trio.fail_after(10):
                    assert (await lines.next()).startswith("HOGGED")
                waiting = []
                for _ in range(20):  # they wait in the backlog; every accept fails
                    stream = await trio.open_tcp_stream("127.0.0.1", int(port))
                    await stream.send_all(upgrade_request())
                    waiting.append(stream)
                await trio.sleep(1.0)  # ten accept retries
                with trio.fail_after(SERVED_WITHIN):
                    await exchange(established)  # established clients keep working
                await process.stdin.send_all(b"free\n")
                with trio.fail_after(10):
                    failures = int((await lines.next()).split()[1])
                with trio.fail_after(SERVED_WITHIN):
                    for stream in waiting:  # the backlog is served once descriptors are free
                        assert (await read_response_head(stream)).startswith(b"HTTP/1.1 101")
                        await stream.aclose()
                    async with open_client(address) as newcomer:
                        await exchange(newcomer)
            await process.stdin.aclose()
            with trio.fail_after(10):
                await process.wait()
    finally:
        process.kill()
    log = stderr.decode()
    assert failures >= 5  # the accepts did fail, repeatedly
    assert log.count("cannot accept connections") == 1  # one line, not one per retry
    assert "Traceback" not in log
