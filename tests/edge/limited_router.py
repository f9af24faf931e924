"""A router in its own process, under a lowered RLIMIT_NOFILE, for the tests that
exhaust descriptors; at the suites' count of workers, sharing one listener
(worker_count.py).

    python limited_router.py NOFILE '{"max_connections_per_address": 16}'

The JSON object holds RouterConfig fields. Prints `PORT <port> <address>` once
listening, then `OPEN <n>` (the router's connections open now) for each line read
on stdin; ends when stdin closes.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
from functools import partial
from pathlib import Path

import trio

from router.server import RouterConfig, RouterInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from worker_count import serve_router_under_test  # noqa: E402


async def main(nofile: int, options: dict[str, object]) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    async with trio.open_nursery() as nursery:
        info: RouterInfo = await nursery.start(partial(
            serve_router_under_test, RouterConfig(port=0, **options), shared_listener=True))
        assert info.listener is not None
        print("PORT", info.port, info.address, flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(0))
        while await stdin.receive_some(1024):
            print("OPEN", info.listener.open_connections, flush=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    trio.run(main, int(sys.argv[1]), json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
