"""Fixtures for end-to-end tests: a real router on 127.0.0.1, port 0, per test.

Every test that takes `router` or `router_factory` runs once per delivery mode
and once per store kind: memory, journal and sqlite (the durable ones in a
fresh data directory per router). `SMP_E2E_STORES` (comma-separated) narrows
or names the kinds, e.g. ``SMP_E2E_STORES=sqlite pytest tests/e2e``.

Tests marked `scale` (a thousand queues and more) are the slow ones on the
durable stores (on the journal a round of writes fsyncs up to a thousand queue
files); ``pytest -m "not scale"`` leaves them out for a quick run.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable

import pytest
import trio
from postgres_server import router_store_settings
from worker_count import serve_router_under_test

from router.server import DELIVERY_MODES, RouterConfig, RouterInfo

ALL_STORES = "memory,journal,sqlite"
E2E_STORES = [kind for kind in os.environ.get("SMP_E2E_STORES", ALL_STORES).split(",") if kind]

# Short END/DELD batching keeps displacement tests quick; everything else is default.
TEST_DEFAULTS: dict[str, object] = {"host": "127.0.0.1", "port": 0, "end_batch_interval": 0.02}

RouterFactory = Callable[..., Awaitable[RouterInfo]]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scale: a large end-to-end test (a thousand queues or more)")


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
        settings = {**TEST_DEFAULTS, "delivery": delivery,
                    **router_store_settings(store_kind, tmp_path / f"router-{next(numbers)}")}
        settings.update(overrides)
        if settings["store"] == "postgres" and "store_options" not in overrides:
            # the schema follows the data directory, when a test names one
            settings.update(router_store_settings("postgres", settings["data_dir"]))
        return await nursery.start(serve_router_under_test, RouterConfig(**settings))

    return start


@pytest.fixture
async def router(router_factory: RouterFactory) -> RouterInfo:
    return await router_factory()
