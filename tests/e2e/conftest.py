"""Fixtures for end-to-end tests: a real router on 127.0.0.1, port 0, per test.

Every test that takes `router` or `router_factory` runs once per delivery mode
and once per store kind: memory, journal and sqlite (the durable ones in a
fresh data directory per router). `SMP_E2E_STORES` (comma-separated) narrows
or names the kinds, e.g. ``SMP_E2E_STORES=sqlite pytest tests/e2e``.

Tests marked `scale` (a thousand queues and more) run on the memory store only
in the default run: on the journal each of their rounds fsyncs a thousand
queue files, which makes them take minutes without testing anything the other
tests do not. Setting `SMP_E2E_STORES` runs them on the kinds it names too.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable

import pytest
import trio

from router.server import DELIVERY_MODES, RouterConfig, RouterInfo, serve_router

ALL_STORES = "memory,journal,sqlite"
STORES_CHOSEN = "SMP_E2E_STORES" in os.environ
E2E_STORES = [kind for kind in os.environ.get("SMP_E2E_STORES", ALL_STORES).split(",") if kind]

# Short END/DELD batching keeps displacement tests quick; everything else is default.
TEST_DEFAULTS: dict[str, object] = {"host": "127.0.0.1", "port": 0, "end_batch_interval": 0.02}

RouterFactory = Callable[..., Awaitable[RouterInfo]]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "scale: a large end-to-end test; durable stores only when SMP_E2E_STORES is set"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if STORES_CHOSEN:
        return
    keep, drop = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        kind = params.params.get("store_kind") if params is not None else None
        scale = item.get_closest_marker("scale") is not None
        (drop if scale and kind not in (None, "memory") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=DELIVERY_MODES)
def delivery(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=E2E_STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def router_factory(
    nursery: trio.Nursery, delivery: str, store_kind: str, tmp_path
) -> RouterFactory:
    """`await router_factory(**config_overrides)` starts a router; stopped after the test."""
    numbers = itertools.count()

    async def start(**overrides: object) -> RouterInfo:
        settings = {**TEST_DEFAULTS, "delivery": delivery, "store": store_kind}
        if store_kind != "memory":
            settings["data_dir"] = tmp_path / f"router-{next(numbers)}"
        settings.update(overrides)
        return await nursery.start(serve_router, RouterConfig(**settings))

    return start


@pytest.fixture
async def router(router_factory: RouterFactory) -> RouterInfo:
    return await router_factory()
