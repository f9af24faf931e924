"""A router under a lowered RLIMIT_NOFILE, for the descriptor-exhaustion test.

    python fd_limited_router.py NOFILE

Prints `PORT <port> <address>` once listening, then obeys stdin lines: `hog`
opens /dev/null until no descriptor is left (`HOGGED <n>`), `free` closes them
again (`FREED <accept failures so far>`). Ends when stdin closes.
"""

from __future__ import annotations

import logging
import os
import resource
import sys

import trio

from router.server import RouterConfig, RouterInfo, serve_router


def hog() -> list[int]:
    fds = []
    while True:
        try:
            fds.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            return fds


async def main(nofile: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    async with trio.open_nursery() as nursery:
        info: RouterInfo = await nursery.start(serve_router, RouterConfig(port=0))
        assert info.listener is not None
        print("PORT", info.port, info.address, flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(0))
        held: list[int] = []
        buffer = b""
        while True:
            data = await stdin.receive_some(1024)
            if not data:
                break
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line == b"hog":
                    held = hog()
                    print("HOGGED", len(held), flush=True)
                elif line == b"free":
                    for fd in held:
                        os.close(fd)
                    held = []
                    print("FREED", info.listener.fd_exhaustions, flush=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    trio.run(main, int(sys.argv[1]))
