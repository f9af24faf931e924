"""One router to the operator with `serve --workers 2` (docs/workers.md#one-router-to-the-operator):
the supervisor's control port and metrics page speak for both workers, every command
reaches the workers it concerns, and the metrics add up."""

from __future__ import annotations

import base64
import re
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio
from supervised import ADDRESS, alive, command, environment

from router.client import open_client
from router.server.workers.operator import merge_expositions

ADMIN = "adm"
CONTROL = re.compile(r"smp-router: control port on 127\.0\.0\.1:(\d+)")
METRICS = re.compile(r"smp-router: metrics on http://127\.0\.0\.1:(\d+)/metrics")


@dataclass
class Operated:
    process: trio.Process
    address: str
    log_file: Path
    control_port: int
    metrics_port: int

    def log(self) -> str:
        return self.log_file.read_text()


@asynccontextmanager
async def operated(tmp_path: Path, *args: str) -> AsyncIterator[Operated]:
    """Two workers with the control and metrics ports, until the block ends (SIGTERM,
    exit 0, unless the test ended the router)."""
    config = tmp_path / "r.ini"
    config.write_text(f"[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                      f"[STORE_LOG]\ndata_dir = {tmp_path / 'data'}\n")
    log_file = tmp_path / "router.log"
    process = await trio.lowlevel.open_process(
        command("serve", "--config", str(config), "--port", "0", "--host", "127.0.0.1",
                "--workers", "2", "--control-port", "0", "--metrics-port", "0",
                "--log-file", str(log_file), *args),
        stdout=subprocess.PIPE, env=environment())
    try:
        assert process.stdout is not None
        line = b""
        with trio.fail_after(60):
            while not line.endswith(b"\n"):
                chunk = await process.stdout.receive_some(1)
                if not chunk:
                    break
                line += chunk
        found = ADDRESS.search(line.decode())
        assert found is not None, (line, log_file.read_text() if log_file.exists() else "")
        log = log_file.read_text()
        control, metrics = CONTROL.search(log), METRICS.search(log)
        assert control is not None and metrics is not None, log
        yield Operated(process, found[1], log_file, int(control[1]), int(metrics[1]))
        if process.poll() is None:
            process.terminate()
            with trio.fail_after(60):
                assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def control(port: int, *lines: str) -> list[list[str]]:
    """Each line's answer, in one admin session (an unknown command after each marks
    the end of its answer)."""
    with trio.fail_after(60):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            script = [f"auth {ADMIN}", *(x for line in lines for x in (line, "quit-mark")), "quit"]
            await stream.send_all("".join(f"{x}\n" for x in script).encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    text = data.decode().splitlines()
    assert text[0] == "Current role is admin", text
    answers, current = [], []
    for line in text[1:]:
        if line == "error: unknown command 'quit-mark'; try help":
            answers.append(current)
            current = []
        else:
            current.append(line)
    return answers


async def http_get(port: int, target: str, headers: dict[str, str] | None = None
                   ) -> tuple[int, bytes]:
    lines = [f"GET {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    with trio.fail_after(60):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def sample(page: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", page, re.M)
    assert found is not None, f"{name} not in\n{page}"
    return float(found[1])


def workers_of(clients: list[str]) -> list[int]:
    """The worker column of the `clients` answer."""
    return [int(line.split()[0]) for line in clients[1:-1]]


async def test_one_control_port_speaks_for_both_workers(tmp_path):
    async with operated(tmp_path, "--store", "memory", "--drain-period", "0.2") as r:
        async with open_client(r.address) as a, open_client(r.address) as b:
            queue = await a.create_queue(snd_secure=False)
            await b.send(queue.sender_id, b"hello")
            text = queue_id_text(queue.recipient_id)
            stats, clients, status, block, blocked, unblock, suspend, resume = await control(
                r.control_port, "stats", "clients", f"status {text}", f"block {text}",
                f"status {text}", f"unblock {text}", "suspend", "resume")
            figures = dict(line.split(": ", 1) for line in stats)
            # The two clients, wherever they landed; their shadows are not clients.
            assert figures["workers"] == "2"
            assert figures["connections"] == "2" and figures["connections_total"] == "2"
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
        memory, unknown = await control(r.control_port, "memory", "status AAAA")
        assert memory[0] == "worker 0:" and "worker 1:" in memory
        assert unknown == ["error: no such queue"]
        pids = [int(pid) for pid in re.search(r"pids ([\d ]+)", r.log())[1].split()]
        (drain,) = await control(r.control_port, "drain 0.2")
        assert drain[0].startswith("ok: draining")
        with trio.fail_after(30):
            assert await r.process.wait() == 0  # every worker drained, none started again
        assert "starting it again" not in r.log()
        assert not any(alive(pid) for pid in pids)


def queue_id_text(queue_id: bytes) -> str:
    return base64.urlsafe_b64encode(queue_id).decode().rstrip("=")


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
            assert sample(page, 'smp_router_command_seconds_count{command="NEW"}') == 3
            status, body = await http_get(r.metrics_port, "/healthz")
            assert status == 200 and b'"status": "ok"' in body and b'"workers": 2' in body
            assert b'"connections": 3' in body
            status, _ = await http_get(r.metrics_port, "/connz")
            assert status == 401
            status, body = await http_get(r.metrics_port, "/connz",
                                          {"Authorization": f"Bearer {ADMIN}"})
            assert status == 200 and b'"total": 3' in body and b'"worker":' in body
            status, body = await http_get(r.metrics_port, "/subsz",
                                          {"Authorization": f"Bearer {ADMIN}"})
            assert status == 200 and b'"subscriptions": 3' in body
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
