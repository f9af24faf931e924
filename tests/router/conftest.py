"""Fixtures for the router-level tests: a real router without a listener, per test.

The router runs as in production (`open_router`: its stores, its background
tasks), but clients reach it through `memory_block_pair` instead of a socket, and
the tests speak SMP with the protocol codec (router/protocol) instead of the
client library: a block in, the transmissions out. Every test that takes
`router` or `router_factory` runs once per delivery mode and once per store
kind of the store contract (memory, journal, sqlite, postgres; the durable ones in a
fresh data directory per router, postgres in a schema of the test run's own PostgreSQL,
tests/postgres_server.py, with one delivery mode unless `SMP_ROUTER_STORES` names it).
`SMP_ROUTER_STORES` (comma-separated) narrows them;
``pytest -m "not scale"`` leaves out the large ones.

The large tests run at full size on the memory store and at a quarter of it on
the durable stores (`router_scale.scaled`): what they check is the same at both sizes, and a
thousand queues on the journal or SQLite cost half a minute each, most of it the
stores' file work. `SMP_SCALE_FULL=1` runs every store at full size.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable

import pytest
import trio
from postgres_server import router_store_settings
from worker_count import open_router_under_test

from router.server import DELIVERY_MODES, Router, RouterConfig
from router.server.settings.config import STORE_KINDS

ALL_STORES = ",".join(STORE_KINDS)
STORES = [kind for kind in os.environ.get("SMP_ROUTER_STORES", ALL_STORES).split(",") if kind]
# The postgres store runs with one delivery mode unless SMP_ROUTER_STORES names it: the
# delivery modes do not touch the store, and a round trip to the database per command
# makes the whole suite there take minutes.
POSTGRES_EVERY_MODE = "SMP_ROUTER_STORES" in os.environ
CASES = [
    (delivery, kind)
    for kind in STORES
    for delivery in DELIVERY_MODES
    if kind != "postgres" or POSTGRES_EVERY_MODE or delivery == DELIVERY_MODES[0]
]

# Short END/DELD batching keeps displacement tests quick; everything else is default.
TEST_DEFAULTS: dict[str, object] = {"end_batch_interval": 0.02}

RouterFactory = Callable[..., Awaitable[Router]]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scale: a large test (a thousand queues or more)")


@pytest.fixture(params=CASES, ids=lambda case: "-".join(case))
def router_case(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param


@pytest.fixture
def delivery(router_case: tuple[str, str]) -> str:
    return router_case[0]


@pytest.fixture
def store_kind(router_case: tuple[str, str]) -> str:
    return router_case[1]


async def _hold_router(
    config: RouterConfig, *, task_status: trio.TaskStatus[Router] = trio.TASK_STATUS_IGNORED
) -> None:
    async with open_router_under_test(config) as router:
        task_status.started(router)
        await trio.sleep_forever()


@pytest.fixture
def router_factory(
    nursery: trio.Nursery, delivery: str, store_kind: str, tmp_path
) -> RouterFactory:
    """`await router_factory(**config_overrides)` starts a router; stopped after the test."""
    numbers = itertools.count()

    async def start(**overrides: object) -> Router:
        settings = {**TEST_DEFAULTS, "delivery": delivery,
                    **router_store_settings(store_kind, tmp_path / f"router-{next(numbers)}")}
        settings.update(overrides)
        if settings["store"] == "postgres" and "store_options" not in overrides:
            # the schema follows the data directory, when a test names one
            settings.update(router_store_settings("postgres", settings["data_dir"]))
        return await nursery.start(_hold_router, RouterConfig(**settings))

    return start


@pytest.fixture
async def router(router_factory: RouterFactory) -> Router:
    return await router_factory()
