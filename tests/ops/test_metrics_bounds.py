"""The metrics port against hoarding and hammering: connections are capped, a burst of
scrapes renders the page once, and a scrape reads nothing on the store's thread."""

from __future__ import annotations

import trio
from ops_helpers import http_get
from test_metrics import samples

from router.client import open_client
from router.server.ops import metrics

CAP = 4


async def test_connections_beyond_the_cap_are_closed_at_once(start_router):
    info = await start_router(metrics_port=0, metrics_max_connections=CAP)
    held = [await trio.open_tcp_stream("127.0.0.1", info.metrics_port) for _ in range(CAP)]
    await trio.sleep(0.2)  # the router has taken them
    closed = 0
    for _ in range(6):
        extra = await trio.open_tcp_stream("127.0.0.1", info.metrics_port)
        with trio.move_on_after(5):
            try:
                closed += await extra.receive_some(4096) == b""
            except trio.BrokenResourceError:
                closed += 1
    assert closed == 6
    for stream in held:
        await stream.aclose()
    with trio.fail_after(10):
        status, _, _ = await http_get(info.metrics_port, "/metrics")
    assert status == 200


async def test_a_burst_of_scrapes_renders_the_page_once(start_router, monkeypatch):
    info = await start_router(metrics_port=0, metrics_max_connections=64)
    renders = []
    real = metrics.RouterCollector.collect

    def collect(self):
        renders.append(1)
        return real(self)

    monkeypatch.setattr(metrics.RouterCollector, "collect", collect)
    bodies = []

    async def scrape() -> None:
        status, _, body = await http_get(info.metrics_port, "/metrics")
        assert status == 200
        bodies.append(body)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(scrape)
    assert len(bodies) == 20
    assert len(renders) <= 2, f"{len(renders)} renders for 20 scrapes"


async def test_a_scrape_reads_nothing_on_the_sqlite_thread(start_router, tmp_path):
    info = await start_router(metrics_port=0, store="sqlite", data_dir=tmp_path / "d")
    async with open_client(info.address) as client:
        for _ in range(3):
            await client.create_queue()
    db = info.router.messages.db
    before = db.reads
    with trio.fail_after(10):
        status, _, body = await http_get(info.metrics_port, "/metrics")
    assert status == 200 and db.reads == before, f"{db.reads - before} reads per scrape"
    assert samples(body.decode())[("simplex_smp_queues_total1", ())] == 3
