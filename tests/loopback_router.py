"""The real router on a loopback port for the length of a test (`running_router`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import trio
from worker_count import serve_router_under_test

from router.server import RouterConfig
from router.server.router import RouterInfo


@asynccontextmanager
async def running_router(*, shared_listener: bool = False,
                         **settings: object) -> AsyncIterator[RouterInfo]:
    """A router on 127.0.0.1 (a free port unless `port` is given), stopped on exit;
    its workers, if several, behind one listening socket with `shared_listener`
    (worker_count.py)."""
    config = RouterConfig(**{"host": "127.0.0.1", "port": 0, **settings})  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        info: RouterInfo = await nursery.start(partial(
            serve_router_under_test, config, shared_listener=shared_listener))
        try:
            yield info
        finally:
            nursery.cancel_scope.cancel()
