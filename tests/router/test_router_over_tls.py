"""The router-level conformance scenarios again, over native TLS
(docs/protocol.md#native-tls).

Every scenario of test_router_queues, test_router_delivery and test_router_errors
that needs only a router runs here unchanged, except that its sessions connect
through the router's real listener with the client written from the TLS
handshake's description (tests/edge/tls_smp_client.py: ALPN smp/1, the chain
checked against the key hash, the session id against tls-unique) instead of an
in-memory pair.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType

import pytest
import test_router_delivery
import test_router_errors
import test_router_queues
import trio
from smp_session import Session

from router.protocol.block import pad_block
from router.protocol.handshake import ClientHello, encode_client_hello
from router.server import Router, RouterConfig, open_router
from router.server.edge.block_stream import STREAM_GONE, TransportClosed
from router.server.edge.listener import EdgeListener, serve_edge
from router.server.edge.native_tls import identity_tls_context

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "edge"))
from tls_smp_client import TlsSmpConnection, tls_connect  # noqa: E402

SCENARIO_MODULES = (test_router_queues, test_router_delivery, test_router_errors)
# Scenarios about the in-memory transport itself, with what checks the same over TLS.
NOT_OVER_TLS = {
    # It asserts a random 32-byte session id; over TLS it is tls-unique (48 bytes
    # with a SHA-384 suite): test_edge_native_tls checks that and that it is fresh.
    "test_the_server_hello_offers_9_to_19_and_a_fresh_session_id_per_connection",
}


def _scenarios() -> list[tuple[ModuleType, str]]:
    found = []
    for module in SCENARIO_MODULES:
        for name, function in vars(module).items():
            if not name.startswith("test_") or not inspect.iscoroutinefunction(function):
                continue
            if name in NOT_OVER_TLS:
                continue
            if list(inspect.signature(function).parameters) != ["router"]:
                continue  # parametrized or with a router of its own configuration
            if any(mark.name == "scale" for mark in getattr(function, "pytestmark", [])):
                continue
            found.append((module, name))
    return found


SCENARIOS = _scenarios()


class _TlsBlocks:
    """The TLS connection as a scenario's session uses it: the errors of a closed
    connection are `TransportClosed`, as the in-memory pair's are."""

    def __init__(self, connection: TlsSmpConnection) -> None:
        self.connection = connection

    async def send_block(self, block: bytes) -> None:
        try:
            await self.connection.send_block(block)
        except (*STREAM_GONE, OSError) as e:
            raise TransportClosed("router closed the connection") from e

    async def receive_block(self) -> bytes:
        try:
            return await self.connection.receive_block()
        except (*STREAM_GONE, OSError) as e:
            raise TransportClosed("router closed the connection") from e

    async def aclose(self, timeout: float = 0) -> None:
        await self.connection.aclose()


async def _hold_router(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with open_router(RouterConfig(end_batch_interval=0.02)) as router:
        async with trio.open_nursery() as nursery:
            edge: EdgeListener = await nursery.start(
                lambda task_status: serve_edge(
                    router.serve_transport, "127.0.0.1", 0, hook=router.request_hook,
                    limits=router.config.edge_limits(),
                    identity_tls=identity_tls_context(router.identity),
                    task_status=task_status,
                )
            )
            task_status.started((router, edge.port))


@asynccontextmanager
async def _connect_over_tls(
    port: int, router: Router, *, version: int = 10, key_hash: bytes | None = None,
    hello: bool = True, capacity: int = 4,
) -> AsyncIterator[Session]:
    """`smp_session.connect`, over TLS to the router's listener (no service: the
    service scenarios are over TLS in test_router_service_certificates)."""
    with trio.fail_after(10):
        connection = await tls_connect(port, router.key_hash)
    blocks = _TlsBlocks(connection)
    key_hash = router.key_hash if key_hash is None else key_hash
    if hello:
        await blocks.send_block(pad_block(encode_client_hello(ClientHello(version, key_hash))))
    try:
        yield Session(blocks, connection.server_hello)  # type: ignore[arg-type]
    finally:
        await blocks.aclose()


@pytest.mark.parametrize(("module", "name"), SCENARIOS, ids=[name for _, name in SCENARIOS])
async def test_scenario_over_tls(module, name, nursery, monkeypatch):
    router, port = await nursery.start(_hold_router)

    def connect(router_: Router, **options: object):
        return _connect_over_tls(port, router_, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "connect", connect)
    await getattr(module, name)(router)


def test_the_scenarios_are_found():
    assert len(SCENARIOS) >= 25
