"""Prometheus metrics scraped over HTTP from a running router under light load."""

from __future__ import annotations

import gc

import trio
from ops_helpers import http_get
from prometheus_client.parser import text_string_to_metric_families

from router.client import open_client
from router.server.ops import metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, headers, body = await http_get(port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(body.decode())


async def test_scraped_values_match_the_router_statistics_under_load(start_router):
    info = await start_router(metrics_port=0, quota=3)
    assert info.metrics_port
    with trio.fail_after(30):
        async with open_client(info.address) as recipient, open_client(info.address) as sender:
            queues = [await recipient.create_queue(subscribe=True) for _ in range(4)]
            for q in queues:
                for i in range(3):
                    await sender.send(q.sender_id, b"m%d" % i)
            for _ in range(4 * 3 - 2):  # two left unacknowledged
                event = await recipient.next_event()
                queue = next(q for q in queues if q.recipient_id == event.recipient_id)
                await recipient.ack(queue, event.msg_id)
            await recipient.delete(queues[0])
            gc.collect()  # at least one timed collection
            got = await scrape(info.metrics_port)
            stats = info.router.statistics()
    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    assert value("simplex_smp_queues_created") == stats.queues_created == 4
    assert value("simplex_smp_queues_deleted", type="all") == stats.queues_deleted == 1
    assert value("simplex_smp_messages_sent") == stats.messages_sent == 12
    assert value("simplex_smp_messages_received") == stats.messages_delivered
    assert value("smp_router_messages_acked_total") == stats.messages_acked == 10
    assert value("simplex_smp_queues_total1") == 3
    assert value("simplex_smp_clients_total") == stats.connections == 2
    assert value("smp_router_open_connections") == 2
    assert value("smp_router_connections_total") == stats.connections_total == 2
    assert value("simplex_smp_subscribtion_total") == stats.subscriptions == 3
    assert value("smp_router_deliveries_waiting") == stats.pending_deliveries
    assert value("smp_router_connection_tasks") >= 6  # receive, send, delivery per client
    assert value("smp_router_store_lookup_seconds_count") == 1
    assert sum(v for (name, _), v in got.items()
               if name == "smp_router_gc_pause_seconds_count") >= 1
    assert value("smp_router_suspended") == 0
    assert value("process_resident_memory_bytes") > 0


async def test_a_quota_refusal_and_a_second_scrape_are_counted(start_router, monkeypatch):
    monkeypatch.setattr(metrics, "PAGE_REUSE", 0.0)  # each scrape renders the page
    info = await start_router(metrics_port=0, quota=1)
    with trio.fail_after(30):
        async with open_client(info.address) as client:
            q = await client.create_queue()
            await client.send(q.sender_id, b"one")
            for _ in range(2):
                try:
                    await client.send(q.sender_id, b"over")
                except Exception as e:  # noqa: BLE001 - the ERR QUOTA the test wants
                    assert "QUOTA" in str(e)
            first = await scrape(info.metrics_port)
            second = await scrape(info.metrics_port)
    key = ("simplex_smp_messages_sent_errors", (("type", "quota"),))
    assert first[key] == info.router.statistics().messages_quota_refused == 2
    assert second[("smp_router_store_lookup_seconds_count", ())] == 2


async def test_other_paths_and_methods_are_refused(start_router):
    info = await start_router(metrics_port=0)
    assert (await http_get(info.metrics_port, "/"))[0] == 404
    assert (await http_get(info.metrics_port, "/metrics", method="POST"))[0] == 405
    status, _, body = await http_get(info.metrics_port, "/metrics", method="HEAD")
    assert status == 200 and body == b""


async def test_a_client_that_sends_nothing_does_not_block_the_next_scrape(start_router):
    info = await start_router(metrics_port=0)
    with trio.fail_after(10):
        idle = await trio.open_tcp_stream("127.0.0.1", info.metrics_port)
        async with idle:
            assert (await http_get(info.metrics_port, "/metrics"))[0] == 200


async def test_metrics_are_off_unless_asked_for(start_router):
    info = await start_router()
    assert info.metrics_port is None
