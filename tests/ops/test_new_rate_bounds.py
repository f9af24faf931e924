"""NEW is bounded router-wide and per client address, beside the per-connection bucket:
queues cannot be created at will by spreading NEWs over many connections."""

from __future__ import annotations

import contextvars

import pytest
import trio

from router.client import SMPError, _transport, open_client
from router.protocol.types import ErrorType

SOURCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("source", default=None)


@pytest.fixture
def from_address(monkeypatch):
    """Clients connect from SOURCE's address (another loopback address) when it is set,
    by SMP over TLS (an smp:// address) as by WebSocket."""
    real = _transport._open_tcp

    async def open_tcp(address):
        source = SOURCE.get()
        if source is None:
            return await real(address)
        return await trio.open_tcp_stream(address.host, address.port, local_address=source)

    monkeypatch.setattr(_transport, "_open_tcp", open_tcp)


async def _spread_news(info, sources: list[str], connections: int, each: int) -> dict[str, int]:
    """`connections` clients per source address each try `each` NEWs; created per source."""
    created = dict.fromkeys(sources, 0)

    async def one(source: str) -> None:
        SOURCE.set(source)
        async with open_client(info.address) as client:
            for _ in range(each):
                try:
                    await client.create_queue()
                except SMPError as e:
                    assert e.error == ErrorType("STORE", "NEW_RATE_LIMIT")
                    continue
                created[source] += 1

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for source in sources:
                for _ in range(connections):
                    nursery.start_soon(one, source)
    return created


async def test_news_spread_over_connections_stop_at_the_router_wide_bucket(
    start_router, from_address
):
    info = await start_router(new_queue_rate=100.0, new_queue_burst=10,
                              new_queue_total_rate=0.5, new_queue_total_burst=20)
    sources = [f"127.0.0.{2 + i}" for i in range(4)]
    created = await _spread_news(info, sources, connections=5, each=10)  # 200 NEWs
    total = sum(created.values())
    assert 20 <= total <= 20 + 30, f"{total} of 200 NEWs created"  # the burst, then 0.5/s
    assert info.router.counters.new_queues_rate_limited == 200 - total


async def test_one_address_stops_at_its_bucket_and_others_go_on(start_router, from_address):
    info = await start_router(new_queue_rate=100.0, new_queue_burst=10,
                              new_queue_address_rate=0.5, new_queue_address_burst=15)
    greedy = await _spread_news(info, ["127.0.0.2"], connections=6, each=10)  # 60 NEWs
    assert 15 <= greedy["127.0.0.2"] <= 15 + 30, greedy
    other = await _spread_news(info, ["127.0.0.3"], connections=1, each=10)
    assert other["127.0.0.3"] == 10
