"""Prometheus metrics scraped over HTTP from a running router under light load."""

from __future__ import annotations

import base64
import gc
import json
import re
import socket

import pytest
import trio
from ops_helpers import http_get, serving

from router.client import open_client
from router.server.ops import metrics
from router.server.ops.metrics import REFERENCE_COUNTERS

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample under the exact name the page gives it (a scraper keeps the names;
    prometheus-client's own parser would rename counters)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match is not None, line
        labels = tuple(sorted(LABEL.findall(match[2] or "")))
        out[(match[1], labels)] = float(match[3])
    return out


def types(text: str) -> dict[str, str]:
    return dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return samples(await scrape_text(port))


async def scrape_text(port: int) -> str:
    status, headers, body = await http_get(port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    return body.decode()


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
            text = await scrape_text(info.metrics_port)
            got = samples(text)
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
    # the receive loop of each client; a delivery task only while it has work
    assert value("smp_router_connection_tasks") >= 2
    assert value("smp_router_store_lookup_seconds_count") == 1
    assert sum(v for (name, _), v in got.items()
               if name == "smp_router_gc_pause_seconds_count") >= 1
    assert value("smp_router_suspended") == 0
    assert value("process_resident_memory_bytes") > 0
    # NEW's own subscription is not a SUB (the reference counts SUBs).
    assert value("simplex_smp_subscribtion_successes") == stats.subscriptions_ok == 0
    assert value("simplex_smp_subscribtion_clients_total") == 1
    assert value("simplex_smp_info", version=got_version(got)) == 1
    # Latency histograms: every command timed, every MSG of a timed SEND too.
    assert value("smp_router_command_seconds_count", command="SEND") == 12
    assert value("smp_router_command_seconds_count", command="ACK") == 10
    assert value("smp_router_command_seconds_bucket", command="SEND", le="+Inf") == 12
    assert value("smp_router_delivery_seconds_count") == stats.messages_delivered == 12
    assert value("smp_router_delivery_seconds_sum") > 0
    buckets = sorted((float(dict(labels)["le"]), v) for (name, labels), v in got.items()
                     if name == "smp_router_delivery_seconds_bucket")
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    typed = types(text)
    assert typed["smp_router_delivery_seconds"] == "histogram"
    assert typed["smp_router_command_seconds"] == "histogram"
    assert typed["smp_router_connections_total"] == "counter"
    assert typed["simplex_smp_clients_total"] == "gauge"
    for name, _, _ in REFERENCE_COUNTERS:  # the reference's names: counters, no _total
        assert typed[name] == "counter" and (name, ()) in got, name
    assert "untyped" not in typed.values()


def got_version(got) -> str:
    [labels] = [labels for name, labels in got if name == "simplex_smp_info"]
    return dict(labels)["version"]


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
    assert (await http_get(info.metrics_port, "/healthz", method="POST"))[0] == 405
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


async def test_healthz_is_ok_while_accepting_and_503_while_suspended(start_router):
    info = await start_router(metrics_port=0)
    with trio.fail_after(10):
        status, headers, body = await http_get(info.metrics_port, "/healthz")
        facts = json.loads(body)
        assert status == 200 and headers["content-type"] == "application/json"
        assert facts["status"] == "ok" and facts["connections"] == 0
        info.router.suspend()
        status, _, body = await http_get(info.metrics_port, "/healthz")
        assert status == 503 and json.loads(body)["status"] == "suspended"
        info.router.resume()
        assert (await http_get(info.metrics_port, "/healthz"))[0] == 200


ADMIN = "admin-pw"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.mark.parametrize("path", ["/connz", "/subsz"])
async def test_the_json_views_are_for_the_admin_only(start_router, path):
    closed = await start_router(metrics_port=0)
    info = await start_router(metrics_port=0, control_port=0, control_admin_password=ADMIN,
                              control_user_password="user-pw")
    with trio.fail_after(10):
        assert (await http_get(closed.metrics_port, path))[0] == 403
        for headers in ({}, {"Authorization": "Bearer wrong"}, basic("admin", "wrong"),
                        basic("someone", ADMIN), {"Authorization": "Bearer user-pw"},
                        {"Authorization": "Basic !!!"}):
            assert (await http_get(info.metrics_port, path, headers))[0] == 401, headers
        assert (await http_get(info.metrics_port, path, basic("admin", ADMIN)))[0] == 200
        status, headers, _ = await http_get(info.metrics_port, path,
                                            {"Authorization": f"Bearer {ADMIN}"})
        assert status == 200 and headers["content-type"] == "application/json"


async def test_connz_and_subsz_list_the_clients_and_their_subscriptions(start_router):
    info = await start_router(metrics_port=0, control_port=0, control_admin_password=ADMIN)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with trio.fail_after(20):
        async with open_client(info.address) as recipient, open_client(info.address) as idle:
            queues = [await recipient.create_queue(subscribe=True) for _ in range(3)]
            await idle.ping()
            connz = json.loads((await http_get(info.metrics_port, "/connz", admin))[2])
            assert connz["total"] == 2 and len(connz["clients"]) == 2
            by_subs = sorted(c["subscriptions"] for c in connz["clients"])
            assert by_subs == [0, 3]
            busy = next(c for c in connz["clients"] if c["subscriptions"] == 3)
            assert busy["remote"].startswith("127.0.0.1") and busy["version"] >= 9
            assert json.loads((await http_get(info.metrics_port, "/connz?limit=1",
                                              admin))[2])["clients"].__len__() == 1
            subsz = json.loads((await http_get(info.metrics_port, "/subsz", admin))[2])
            assert subsz["subscriptions"] == 3
            assert subsz["clients"] == [{"id": busy["id"], "queues": 3, "notifiers": 0}]
            one = json.loads((await http_get(
                info.metrics_port, f"/subsz?client={busy['id']}", admin))[2])
            rids = {base64.urlsafe_b64encode(q.recipient_id).decode().rstrip("=")
                    for q in queues}
            assert set(one["queues"]) == rids and one["notifiers"] == []
            assert (await http_get(info.metrics_port, "/subsz?client=999", admin))[0] == 404


async def test_smp_router_serve_exposes_metrics_health_and_clients(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        metrics_port = probe.getsockname()[1]
    config = tmp_path / "r.ini"
    config.write_text(f"[TRANSPORT]\nport = 0\nmetrics_port = {metrics_port}\n"
                      f"control_port = 0\n[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                      "[STORE_LOG]\nstore = memory\n")
    with trio.fail_after(60):
        async with serving("--config", str(config), "--log-level", "error") as (_, address):
            async with open_client(address) as client:
                q = await client.create_queue()
                await client.subscribe(q)
                await client.send(q.sender_id, b"timed")
                await client.next_event()
                got = await scrape(metrics_port)
                assert got[("simplex_smp_subscribtion_successes", ())] == 1
                assert got[("smp_router_delivery_seconds_count", ())] == 1
                assert got[("smp_router_command_seconds_count", (("command", "NEW"),))] == 1
                status, _, body = await http_get(metrics_port, "/healthz")
                assert status == 200 and json.loads(body)["status"] == "ok"
                status, _, body = await http_get(metrics_port, "/connz",
                                                 {"Authorization": f"Bearer {ADMIN}"})
                assert status == 200 and json.loads(body)["total"] == 1


async def test_the_proxy_counters_are_the_reference_families_with_their_labels(start_router):
    """A proxies one message to itself (own) and one to B: A's relay families count
    them by source; B counts the RFWD it executed."""
    a = await start_router(metrics_port=0, allow_proxy=True,
                           proxy_allow_destinations=("127.0.0.0/8",))
    b = await start_router(metrics_port=0)
    with trio.fail_after(30):
        async with open_client(a.address) as client:
            for destination in (a, b):
                queue = await client.create_queue() if destination is a else None
                async with open_client(destination.address) as owner:
                    queue = queue or await owner.create_queue()
                    session = await client.open_proxied_session(destination.address)
                    await client.proxied_send(session, queue.sender_id, b"through A")
            page = await scrape_text(a.metrics_port)
    got, kinds = samples(page), types(page)
    for what in ("sessions", "messages"):
        assert got[(f"simplex_smp_relay_{what}_requests", (("source", "all"),))] == 2
        assert got[(f"simplex_smp_relay_{what}_requests", (("source", "own"),))] == 1
        assert got[(f"simplex_smp_relay_{what}_successes", (("source", "all"),))] == 2
        for source in ("all", "own"):
            for kind in ("connect", "compat", "other"):
                labels = (("source", source), ("type", kind))
                assert got[(f"simplex_smp_relay_{what}_errors", labels)] == 0
        assert kinds[f"simplex_smp_relay_{what}_requests"] == "counter"
    assert got[("simplex_smp_relay_messages_received", ())] == 1  # its own one
    assert got[("smp_router_proxy_connections", ())] == 2
    # The sharing of A's pool (core/relays.py): nothing held back under this light load.
    assert got[("smp_router_proxy_destinations_refused_total", ())] == 0
    assert got[("smp_router_proxy_connecting", ())] == 0
    for event in ("waited", "slowed", "connect_evicted", "no_room", "pfwd_waited", "episodes"):
        assert got[("smp_router_proxy_pool_pressure_total", (("event", event),))] == 0
    b_page = samples(await scrape_text(b.metrics_port))
    assert b_page[("simplex_smp_relay_messages_received", ())] == 1
    assert b_page[("simplex_smp_relay_sessions_requests", (("source", "all"),))] == 0
