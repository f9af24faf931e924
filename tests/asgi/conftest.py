"""Fixtures for the router as an ASGI application (asgi_helpers.py): a
Starlette application with the gateway (pages and the SMP WebSocket) mounted at
`/chat`, served by Hypercorn's Trio worker on 127.0.0.1 in the test's nursery.

`AsgiRouterInfo` has what the end-to-end tests use of a `RouterInfo` (`url`,
`address`, `key_hash`, `router`), with the mount path in the URL and the
address, so the e2e and protocol-page scenarios of tests/e2e run through the
path unchanged: test_asgi_scenarios.py collects them here, where `router`,
`router_factory` and `one_router` are these fixtures.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import trio

# The scenarios and their helpers come from tests/e2e and tests/client.
for scenarios in ("e2e", "client"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / scenarios))

from asgi_helpers import TEST_DEFAULTS, AsgiRouterInfo, serve_asgi_router  # noqa: E402

from router.server import DELIVERY_MODES, RouterConfig  # noqa: E402


@pytest.fixture(params=DELIVERY_MODES)
def delivery(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_kind() -> str:
    return "memory"


@pytest.fixture
def router_factory(nursery: trio.Nursery, delivery: str, store_kind: str, tmp_path):
    numbers = itertools.count()

    async def start(**overrides: object) -> AsgiRouterInfo:
        settings = {**TEST_DEFAULTS, "delivery": delivery, "store": store_kind}
        if store_kind != "memory":
            settings["data_dir"] = tmp_path / f"router-{next(numbers)}"
        settings.update(overrides)
        return await nursery.start(serve_asgi_router, RouterConfig(**settings))

    return start


@pytest.fixture
async def router(router_factory) -> AsgiRouterInfo:
    return await router_factory()


@pytest.fixture
async def one_router(nursery: trio.Nursery) -> AsgiRouterInfo:
    return await nursery.start(serve_asgi_router, RouterConfig(**TEST_DEFAULTS))
