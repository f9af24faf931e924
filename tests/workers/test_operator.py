"""One router to the operator with `serve --workers 2` (docs/workers.md#one-router-to-the-operator):
the supervisor's control port and metrics page speak for both workers, every command
reaches the workers it concerns, and the metrics add up."""

from __future__ import annotations

import json
import re
import signal
from contextlib import AsyncExitStack

import trio
from operated import (
    ADMIN,
    clients_on_both_workers,
    control,
    http_get,
    operated,
    queue_id_text,
    sample,
    workers_of,
)
from supervised import alive, run

from router.client import open_client
from router.server.workers.operator import merge_expositions


async def test_one_control_port_speaks_for_both_workers(tmp_path):
    async with operated(tmp_path, "--store", "memory", "--drain-period", "0.2") as r:
        async with AsyncExitStack() as stack:
            # The sender on the other worker than the queue's; the clients between them go.
            a, *between, b = await clients_on_both_workers(r.address, r.control_port, stack)
            for client in between:
                await client.aclose()
            with trio.fail_after(10):
                while (await control(r.control_port, "clients"))[0][-1] != "2 clients":
                    await trio.sleep(0.05)
            # The queue is a's worker's; b's SEND makes b a shadow there.
            queue = await a.create_queue(snd_secure=False)
            await b.send(queue.sender_id, b"hello")
            text = queue_id_text(queue.recipient_id)
            stats, clients, status, block, blocked, unblock, suspend, resume = await control(
                r.control_port, "stats", "clients", f"status {text}", f"block {text}",
                f"status {text}", f"unblock {text}", "suspend", "resume")
            figures = dict(line.split(": ", 1) for line in stats)
            # The two clients, one in each worker; b's shadow in a's worker is not a client.
            assert figures["workers"] == "2" and figures["connections"] == "2"
            assert figures["queues_created"] == "1" and figures["messages_sent"] == "1"
            assert figures["queues_stored"] == "1" and figures["suspended"] == "no"
            assert clients[0] == "worker id remote version subscriptions deliveries_waiting"
            assert clients[-1] == "2 clients" and len(workers_of(clients)) == 2
            # The queue's commands run in its owner, whichever it is.
            assert status == ["status: active, secured: no, messages: 1"]
            assert block == ["ok"] and blocked[0].startswith("status: blocked (spam)")
            assert unblock == ["ok"]
            assert suspend == ["ok: suspended (no new clients, no commands read, no deliveries)"]
            assert resume == ["ok: resumed"]
            assert await a.get(queue) is not None  # resumed in both
        memory, unknown, save, listed, delete, deleted = await control(
            r.control_port, "memory", "status AAAA", "save", "help", f"delete {text}",
            f"status {text}")
        assert memory[0] == "worker 0:" and "worker 1:" in memory
        assert unknown == ["error: no such queue"]
        # Each worker saves its own share: the queue in one, none in the other.
        assert [line[:20] for line in save] == ["worker 0: ok: saved ", "worker 1: ok: saved "]
        assert sorted(int(line.split()[4]) for line in save) == [0, 1]
        assert "drain (admin role)" in listed and "stats (user role)" in listed
        assert delete == ["ok"] and deleted == ["error: no such queue"]
        pids = [int(pid) for pid in re.search(r"pids ([\d ]+)", r.log())[1].split()]
        (drain,) = await control(r.control_port, "drain 0")
        assert drain[0].startswith("ok: draining")
        with trio.fail_after(30):
            assert await r.process.wait() == 0  # every worker drained, none started again
        assert "starting it again" not in r.log()
        assert not any(alive(pid) for pid in pids)


async def test_one_metrics_page_adds_up_both_workers(tmp_path):
    async with operated(tmp_path, "--store", "memory") as r:
        async with open_client(r.address) as a, open_client(r.address) as b, \
                open_client(r.address) as c:
            for client in (a, b, c):
                await client.create_queue(subscribe=True, snd_secure=False)
            status, body = await http_get(r.metrics_port, "/metrics")
            page = body.decode()
            assert status == 200
            assert sample(page, "smp_router_workers") == 2
            assert sample(page, 'smp_router_worker_up{worker="0"}') == 1
            assert sample(page, 'smp_router_worker_up{worker="1"}') == 1
            assert sample(page, "simplex_smp_clients_total") == 3
            assert sample(page, "smp_router_connections_total") == 3
            assert sample(page, "simplex_smp_queues_created") == 3
            assert sample(page, "simplex_smp_queues_total1") == 3
            assert sample(page, "simplex_smp_subscribtion_total") == 3
            assert sample(page, "smp_router_admitted_connections") == 3
            assert (sample(page, 'smp_router_worker_connections{worker="0"}')
                    + sample(page, 'smp_router_worker_connections{worker="1"}')) == 3
            assert sample(page, "simplex_smp_info" + '{version="' + re.search(
                r'simplex_smp_info\{version="([^"]*)"\}', page)[1] + '"}') == 1
            assert page.count("# TYPE simplex_smp_queues_created counter") == 1
            types = re.findall(r"^# TYPE (\S+) ", page, re.M)
            assert len(types) == len(set(types)) and len(types) > 50  # each family once
            for family in ("smp_router_gc_pause_seconds", "process_resident_memory_bytes",
                           "smp_router_memory_bytes", "simplex_smp_relay_messages_requests"):
                assert family in types, family
            assert sample(page, 'smp_router_command_seconds_count{command="NEW"}') == 3
            status, body = await http_get(r.metrics_port, "/healthz")
            assert status == 200 and b'"status": "ok"' in body and b'"workers": 2' in body
            assert b'"connections": 3' in body
            status, _ = await http_get(r.metrics_port, "/connz")
            assert status == 401
            status, connz = await http_get(r.metrics_port, "/connz",
                                           {"Authorization": f"Bearer {ADMIN}"})
            assert status == 200 and b'"total": 3' in connz and b'"worker":' in connz
            status, body = await http_get(r.metrics_port, "/subsz",
                                          {"Authorization": f"Bearer {ADMIN}"})
            assert status == 200 and b'"subscriptions": 3' in body
            first = json.loads(connz)["clients"][0]
            status, body = await http_get(
                r.metrics_port, f"/subsz?worker={first['worker']}&client={first['id']}",
                {"Authorization": f"Bearer {ADMIN}"})
            assert status == 200 and len(json.loads(body)["queues"]) == 1
            status, _ = await http_get(r.metrics_port, f"/subsz?client={first['id']}",
                                       {"Authorization": f"Bearer {ADMIN}"})
            assert status == 404  # a client's id is its worker's
        # The information page, from whichever worker accepts: one page.
        port = int(r.address.rsplit(":", 1)[1])
        pages = {await http_get(port, "/?format=json") for _ in range(6)}
        assert len(pages) == 1 and next(iter(pages))[0] == 200
        await control(r.control_port, "suspend")
        status, body = await http_get(r.metrics_port, "/healthz")
        assert status == 503 and b'"status": "suspended"' in body


def test_pages_are_added_up_but_for_the_gauges_that_are_not_sums():
    one = ("# HELP c Things\n# TYPE c counter\nc 2\nh_bucket{le=\"+Inf\"} 1\n"
           "# HELP simplex_smp_info Server information\n# TYPE simplex_smp_info gauge\n"
           'simplex_smp_info{version="1"} 1\n'
           "# HELP smp_router_memory_census_complete x\n"
           "# TYPE smp_router_memory_census_complete gauge\n"
           "smp_router_memory_census_complete 1\n")
    two = one.replace("c 2", "c 5").replace("census_complete 1", "census_complete 0") + \
        '# HELP d D\n# TYPE d gauge\nd{command="SEND"} 1.5\n'
    merged = merge_expositions([one, two])
    assert "c 7.0\n" in merged and 'h_bucket{le="+Inf"} 2.0\n' in merged
    assert 'simplex_smp_info{version="1"} 1.0\n' in merged
    assert "smp_router_memory_census_complete 0.0\n" in merged
    assert 'd{command="SEND"} 1.5\n' in merged
    assert merged.count("# TYPE c counter") == 1
    shared = "# HELP simplex_smp_queues_total1 x\n# TYPE simplex_smp_queues_total1 gauge\n"
    assert "simplex_smp_queues_total1 4.0" in merge_expositions(
        [shared + "simplex_smp_queues_total1 4\n", shared + "simplex_smp_queues_total1 3\n"],
        shared_store=True)


async def test_sighup_gives_the_supervisors_ports_the_new_passwords(tmp_path):
    async with operated(tmp_path, "--store", "memory") as r:
        config = tmp_path / "r.ini"
        config.write_text(config.read_text().replace(f"= {ADMIN}", "= changed"))
        r.process.send_signal(signal.SIGHUP)
        with trio.fail_after(30):
            while "SIGHUP: passed on to 2 workers" not in r.log():
                await trio.sleep(0.05)
        stream = await trio.open_tcp_stream("127.0.0.1", r.control_port)
        async with stream:
            await stream.send_all(b"auth changed\nquit\n")
            data = b""
            with trio.fail_after(30):
                while chunk := await stream.receive_some(4096):
                    data += chunk
        assert data.decode().splitlines() == ["Current role is admin"]
        status, _ = await http_get(r.metrics_port, "/connz", {"Authorization": "Bearer changed"})
        assert status == 200


async def test_smp_router_control_speaks_to_the_router_of_two_workers(tmp_path):
    async with operated(tmp_path, "--store", "memory") as r:
        async with open_client(r.address):
            code, out, err = await run("control", "--config", str(tmp_path / "r.ini"),
                                       "--port", str(r.control_port), "stats")
            assert (code, err) == (0, "")
            assert out.splitlines()[0] == "workers: 2" and "connections: 1\n" in out
            code, out, err = await run("control", "--config", str(tmp_path / "r.ini"),
                                       "--port", str(r.control_port), "status AAAA")
            assert code == 1 and "error: no such queue" in err
