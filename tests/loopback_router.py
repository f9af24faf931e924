"""The real router on a loopback port for the length of a test (`running_router`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from worker_count import serve_router_under_test

from router.server import RouterConfig
from router.server.router import RouterInfo


@asynccontextmanager
async def running_router(**settings: object) -> AsyncIterator[RouterInfo]:
    """A router on 127.0.0.1 (a free port unless `port` is given), stopped on exit."""
    config = RouterConfig(**{"host": "127.0.0.1", "port": 0, **settings})  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        info: RouterInfo = await nursery.start(serve_router_under_test, config)
        try:
            yield info
        finally:
            nursery.cancel_scope.cancel()
