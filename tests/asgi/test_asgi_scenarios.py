"""The project's end-to-end scenarios, and the protocol page's promises to a
second implementer, against the router mounted in a Starlette application under
Hypercorn's Trio worker, through the mount path (`ws://127.0.0.1:PORT/chat/smp`).

The tests are tests/e2e's and the client's smoke tests against the router
(tests/client/test_client_against_router.py), collected here, where `router`,
`router_factory` (conftest.py), `one_router` and the client tests'
`running_router` (below) start the router behind the ASGI application instead
of on its own listener; nothing in the tests changes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import test_client_against_router
import trio
from asgi_helpers import MOUNT, TEST_DEFAULTS, AsgiRouterInfo, serve_asgi_router
from test_client_against_router import *  # noqa: F403
from test_e2e_errors import *  # noqa: F403
from test_e2e_protocol_page import *  # noqa: F403
from test_e2e_service import *  # noqa: F403

from router.server import RouterConfig

# Native SMP over TLS is the router's own listener's (router.server.edge.native_tls):
# behind an ASGI application the router is reached by WebSocket only, so the client
# test of both transports on one port is not one of the scenarios here.
del test_an_smp_address_is_native_tls_and_a_ws_url_is_websocket_on_the_same_port  # noqa: F821
# Services prove their identity with a TLS client certificate on that listener
# (docs/protocol.md#client-service): behind an ASGI application there is none to
# present, so the scenarios of certificate services are not ones here either.
del test_subs_without_entity_or_signature_is_no_auth_with_or_without_a_service  # noqa: F821
del test_soks_counts_suspended_queues_and_leaves_deleted_ones_out  # noqa: F821
del test_a_takeover_sends_one_ends_for_the_walked_queues_and_an_end_for_a_plain_sub  # noqa: F821
del test_a_notifier_takeover_sends_one_ends_and_an_end_for_a_plain_nsub  # noqa: F821
del test_a_service_by_certificate_connects_and_its_subs_is_answered  # noqa: F821
del test_a_service_chain_other_than_the_tls_one_is_refused  # noqa: F821


@pytest.fixture
async def one_router(nursery: trio.Nursery) -> AsgiRouterInfo:  # replaces the page's own
    return await nursery.start(serve_asgi_router, RouterConfig(**TEST_DEFAULTS))


@asynccontextmanager
async def running_router_behind_asgi(**options: object) -> AsyncIterator[AsgiRouterInfo]:
    async with trio.open_nursery() as nursery:
        config = RouterConfig(**{**TEST_DEFAULTS, **options})
        yield await nursery.start(serve_asgi_router, config)
        nursery.cancel_scope.cancel()


@pytest.fixture(autouse=True)
def client_scenarios_behind_asgi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_client_against_router, "running_router", running_router_behind_asgi)


async def test_the_scenarios_here_reach_the_router_through_the_mount_path(one_router, router):
    async with test_client_against_router.running_router() as client_scenarios_router:
        for info in (one_router, router, client_scenarios_router):
            assert isinstance(info, AsgiRouterInfo)
            assert info.url.endswith(f"{MOUNT}/smp") and info.address.endswith(f"{MOUNT}/smp")
