"""`smp-router serve --workers 2` with its control and metrics ports, for the tests of
one router to the operator: started from this checkout, its ports read from its log."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio
from supervised import Supervised, serving

from router.client import open_client

ADMIN = "adm"
CONTROL = re.compile(r"smp-router: control port on 127\.0\.0\.1:(\d+)")
METRICS = re.compile(r"smp-router: metrics on http://127\.0\.0\.1:(\d+)/metrics")

@dataclass
class Operated(Supervised):
    control_port: int
    metrics_port: int


@asynccontextmanager
async def operated(tmp_path: Path, *args: str) -> AsyncIterator[Operated]:
    """Two workers with the control and metrics ports, until the block ends (SIGTERM,
    exit 0, unless the test ended the router)."""
    config = tmp_path / "r.ini"
    config.write_text(f"[AUTH]\ncontrol_port_admin_password = {ADMIN}\n"
                      f"[STORE_LOG]\ndata_dir = {tmp_path / 'data'}\n")
    log_file = tmp_path / "router.log"
    async with serving(log_file, "--config", str(config), "--workers", "2",
                       "--control-port", "0", "--metrics-port", "0", *args) as (process, address):
        log = log_file.read_text()
        control, metrics = CONTROL.search(log), METRICS.search(log)
        assert control is not None and metrics is not None, log
        yield Operated(process, address, log_file, int(control[1]), int(metrics[1]))


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


async def clients_on_both_workers(address: str, control_port: int,
                                  stack: AsyncExitStack) -> list:
    """Clients of the router until one landed on each of its two workers; the first and
    the last are on different ones. Each stays open meanwhile: which idle worker accepts
    a connection is the kernel's choice, and the same one may take every connection
    opened and closed in turn, but no worker takes more than its share of the open
    ones by `SHARE_SLACK` (docs/workers.md "The listener")."""
    clients = []
    for _ in range(40):
        clients.append(await stack.enter_async_context(open_client(address)))
        (listed,) = await control(control_port, "clients")
        if set(workers_of(listed)) == {0, 1}:
            return clients
    raise AssertionError(f"every connection landed on one worker: {listed}")


def queue_id_text(queue_id: bytes) -> str:
    return base64.urlsafe_b64encode(queue_id).decode().rstrip("=")
