"""Routers on 127.0.0.1 for the operation tests, and small clients for their ports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from router.server import RouterConfig, RouterInfo, serve_router

RouterFactory = Callable[..., Awaitable[RouterInfo]]


@pytest.fixture
def start_router(nursery: trio.Nursery) -> RouterFactory:
    """`await start_router(**config)`: a memory router on a free port, stopped after the test."""

    async def start(**overrides: object) -> RouterInfo:
        settings: dict[str, object] = {"host": "127.0.0.1", "port": 0, "store": "memory",
                                       "end_batch_interval": 0.02}
        settings.update(overrides)
        return await nursery.start(serve_router, RouterConfig(**settings))

    return start
