"""One control port and one metrics port for a router of several workers
(docs/workers.md#one-router-to-the-operator).

The supervisor serves both ports; a session's password, role and throttling
are checked here (ops/control.py, the same code as one process's), and each
command goes to the workers it concerns (operations.py answers there):

- a queue's command (`status`, `delete`, `block`, `unblock`) to its owner,
  found from the queue id as every worker finds it (core/ownership.py);
- `stats` to every worker, the figures added (`queues_stored` of a shared store
  is the store's, not added); `clients` to every worker, one list with a
  `worker` column;
- `save`, `suspend`, `resume`, `memory`, `drain` to every worker: one answer if
  they all answer the same, else one line per worker; a refusal comes first.
  After `drain` no worker is started again, and the supervisor ends once they
  have all ended, as after SIGUSR2.

The metrics page adds up the workers' pages (every counter, gauge and histogram
bucket; a few gauges take the largest or smallest value instead: `_TAKE_MAX`,
`_TAKE_MIN`), and adds `smp_router_workers` and, per worker,
`smp_router_worker_up` and `smp_router_worker_connections`. `/healthz` is ok
only if every worker is; `/connz` and `/subsz` list every worker's clients with
a `worker` field (`/subsz?worker=I&client=ID` for one client's queues).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

import trio
from prometheus_client.utils import floatToGoString

from ..core.ownership import Ownership
from ..edge.admission import Admission
from ..edge.block_stream import STREAM_GONE
from ..edge.identity import host_port
from ..edge.listen import bound_port, open_listeners
from ..ops.control import (
    COMMANDS,
    CONTROL_HOST,
    MAX_DRAIN_PERIOD,
    ControlSession,
    Handler,
    Role,
    queue_id_of,
    refusal,
    serve_control,
)
from ..ops.info import router_version
from ..ops.metrics import (
    CONTENT_TYPE,
    JSON_TYPE,
    PAGE_REUSE,
    REQUEST_TIMEOUT,
    admin_refusal,
    is_admin,
    read_request,
    send_response,
    serve_pages,
)
from ..settings.config import RouterConfig
from .layout import SHARED_STORES
from .operations import operations_address

log = logging.getLogger("smp-router")

ASK_TIMEOUT = 60.0  # seconds a worker has to answer (a fresh memory census takes a while)
_TAKE_MAX = frozenset({
    "simplex_smp_info", "smp_router_suspended", "smp_router_draining",
    "smp_router_memory_census_seconds",
})
_TAKE_MIN = frozenset({
    "smp_router_memory_census_complete", "process_start_time_seconds", "process_max_fds",
})
# Each worker counts the whole of a shared store (PostgreSQL): not added up.
_STORE_WIDE_METRICS = frozenset({"simplex_smp_queues_total1"})
_STORE_WIDE_STATS = frozenset({"queues_stored"})


class Stoppable(Protocol):
    stopping: bool  # its end is not a death to start it again from (supervisor.py)


@dataclass
class SupervisedRouter:
    """What the supervisor's operation ports act on: the configuration (passwords,
    limits) and the workers."""

    config: RouterConfig
    group: str
    workers: Sequence[Stoppable]
    admission: Admission | None = None  # the router's caps on connections (admission.py)
    started: float = field(default_factory=time.monotonic)

    @property
    def count(self) -> int:
        return len(self.workers)

    def reload_passwords(self, new: RouterConfig) -> None:
        """SIGHUP: the control port's passwords of `new`, as one process takes them
        (router.py, LIVE_SETTINGS); the other settings of the ports need a restart."""
        self.config = replace(self.config, control_admin_password=new.control_admin_password,
                              control_user_password=new.control_user_password)

    async def ask(self, index: int, request: str) -> bytes | None:
        """Worker `index`'s answer to `request`; None if it cannot answer now."""
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        try:
            with trio.fail_after(ASK_TIMEOUT):
                await sock.connect(operations_address(self.group, index))
                stream = trio.SocketStream(sock)
                async with stream:
                    await stream.send_all(request.encode() + b"\n")
                    chunks = []
                    while data := await stream.receive_some(65536):
                        chunks.append(data)
                    return b"".join(chunks)
        except (OSError, trio.TooSlowError, *STREAM_GONE) as e:
            log.warning("worker %d did not answer %r: %r", index, request.split(" ")[0], e)
            return None
        finally:
            sock.close()

    async def ask_all(self, request: str) -> list[bytes | None]:
        answers: list[bytes | None] = [None] * self.count

        async def one(index: int) -> None:
            answers[index] = await self.ask(index, request)

        async with trio.open_nursery() as nursery:
            for index in range(self.count):
                nursery.start_soon(one, index)
        return answers

    def owner_of(self, queue_id: bytes) -> int:
        return Ownership(self.count, 0).owner_of(queue_id)


# --- the control port ---------------------------------------------------------------------


def _no_answer(index: int) -> str:
    return f"error: worker {index} did not answer (it may be starting again)"


def _lines(answer: bytes) -> list[str]:
    return answer.decode("utf-8", "replace").splitlines()


async def _control_everywhere(router: SupervisedRouter, line: str) -> list[list[str]] | str:
    """Every worker's answer lines, or the error line of the first that did not answer."""
    answers = await router.ask_all(f"control {line}")
    for index, answer in enumerate(answers):
        if answer is None:
            return _no_answer(index)
    return [_lines(answer) for answer in answers if answer is not None]


def _one_answer(answers: list[list[str]]) -> list[str]:
    """The workers' answers to a command each runs: once if they agree, else per worker,
    a refusal first (so `smp-router control` sees it)."""
    if all(answer == answers[0] for answer in answers):
        return answers[0]
    lines = []
    for index, answer in enumerate(answers):
        refused = refusal(answer)
        if refused is not None and not lines:
            lines.append(refused.replace("error: ", f"error: worker {index}: ", 1)
                         if refused.startswith("error:") else refused)
    for index, answer in enumerate(answers):
        lines.extend(f"worker {index}: {line}" for line in answer)
    return lines


def _everywhere(name: str) -> Handler:
    async def handler(session: ControlSession, args: list[str]) -> list[str]:
        router: SupervisedRouter = session.router  # type: ignore[assignment]
        answers = await _control_everywhere(router, " ".join([name, *args]))
        return [answers] if isinstance(answers, str) else _one_answer(answers)

    return handler


def _to_owner(name: str) -> Handler:
    async def handler(session: ControlSession, args: list[str]) -> list[str]:
        router: SupervisedRouter = session.router  # type: ignore[assignment]
        queue_id = queue_id_of(args[:1])
        owner = 0 if queue_id is None else router.owner_of(queue_id)  # 0: its usage error
        answer = await router.ask(owner, " ".join(["control", name, *args]))
        return [_no_answer(owner)] if answer is None else _lines(answer)

    return handler


async def _stats(session: ControlSession, args: list[str]) -> list[str]:
    router: SupervisedRouter = session.router  # type: ignore[assignment]
    answers = await _control_everywhere(router, "stats")
    if isinstance(answers, str):
        return [answers]
    shared_store = router.config.store in SHARED_STORES
    names: dict[str, list[str]] = {}
    for answer in answers:
        for line in answer:
            name, _, value = line.partition(": ")
            names.setdefault(name, []).append(value)
    lines = [f"workers: {router.count}"]
    for name, values in names.items():
        if all(value.lstrip("-").isdigit() for value in values):
            numbers = [int(value) for value in values]
            total = max(numbers) if shared_store and name in _STORE_WIDE_STATS else sum(numbers)
            lines.append(f"{name}: {total}")
        elif all(value == values[0] for value in values):
            lines.append(f"{name}: {values[0]}")
        else:
            lines.append(f"{name}: " + ", ".join(f"worker {i}: {value}"
                                                  for i, value in enumerate(values)))
    return lines


async def _clients(session: ControlSession, args: list[str]) -> list[str]:
    router: SupervisedRouter = session.router  # type: ignore[assignment]
    answers = await _control_everywhere(router, "clients")
    if isinstance(answers, str):
        return [answers]
    lines = ["worker id remote version subscriptions deliveries_waiting"]
    for index, answer in enumerate(answers):
        lines.extend(f"{index} {line}" for line in answer[1:-1])  # no header, no count
    lines.append(f"{len(lines) - 1} clients")
    return lines


async def _drain(session: ControlSession, args: list[str]) -> list[str]:
    router: SupervisedRouter = session.router  # type: ignore[assignment]
    if _drain_period_given(args):
        # Before the workers hear of it: one drained at once ends at once, and is not a
        # death to start again from.
        for worker in router.workers:
            worker.stopping = True
        log.info("control port: drain passed on to %d workers", router.count)
    answers = await _control_everywhere(router, " ".join(["drain", *args]))
    if isinstance(answers, str):
        return [answers]
    return _one_answer(answers)


def _drain_period_given(args: list[str]) -> bool:
    """Whether the workers will take `drain ARGS` (else each answers its usage error)."""
    if len(args) > 1:
        return False
    try:
        return not args or 0 <= float(args[0]) <= MAX_DRAIN_PERIOD
    except ValueError:
        return False


async def _memory(session: ControlSession, args: list[str]) -> list[str]:
    router: SupervisedRouter = session.router  # type: ignore[assignment]
    answers = await _control_everywhere(router, " ".join(["memory", *args]))
    if isinstance(answers, str):
        return [answers]
    refused = next((refusal(answer) for answer in answers if refusal(answer)), None)
    if refused is not None:
        return [refused]
    lines = []
    for index, answer in enumerate(answers):
        lines.append(f"worker {index}:")
        lines.extend(f"  {line}" for line in answer)
    return lines


def router_commands() -> dict[str, tuple[Role, Handler]]:
    """The control port's commands for the router of several workers (module doc)."""
    commands: dict[str, tuple[Role, Handler]] = {}
    for name, (role, handler) in COMMANDS.items():
        if name in ("status", "delete", "block", "unblock"):
            handler = _to_owner(name)
        elif name in ("save", "suspend", "resume"):
            handler = _everywhere(name)
        else:
            handler = {"stats": _stats, "clients": _clients, "drain": _drain,
                       "memory": _memory}.get(name, handler)  # auth, help, quit: here
        commands[name] = (role, handler)
    return commands


async def serve_router_control(
    router: SupervisedRouter, port: int,
    *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    await serve_control(router, port, commands=router_commands(),  # type: ignore[arg-type]
                        task_status=task_status)


# --- the metrics port ----------------------------------------------------------------------


@dataclass
class _Family:
    lines: list[str]  # HELP and TYPE
    samples: dict[str, list[float]] = field(default_factory=dict)


def merge_expositions(pages: Sequence[str], *, shared_store: bool = False) -> str:
    """The workers' metrics pages as one: each sample added up over the workers, but
    the families of `_TAKE_MAX` / `_TAKE_MIN` (module doc)."""
    families: dict[str, _Family] = {}
    current: _Family | None = None
    for page in pages:
        for line in page.splitlines():
            if line.startswith("# "):
                _, kind, name, *_ = line.split(" ", 3)
                current = families.get(name)
                if current is None:
                    current = families[name] = _Family([])
                if len(current.lines) < 2 and line not in current.lines:
                    current.lines.append(line)
                continue
            if not line or current is None:
                continue
            sample, _, value = line.rpartition(" ")
            current.samples.setdefault(sample, []).append(float(value))
    out = []
    for name, family in families.items():
        if shared_store and name in _STORE_WIDE_METRICS:
            combine: Callable[[list[float]], float] = max
        else:
            combine = max if name in _TAKE_MAX else min if name in _TAKE_MIN else math.fsum
        out.extend(f"{line}\n" for line in family.lines)
        out.extend(f"{sample} {floatToGoString(combine(values))}\n"
                   for sample, values in family.samples.items())
    return "".join(out)


def _per_worker(pages: Sequence[str | None]) -> str:
    """The families with a `worker` label: up, and each worker's open connections."""
    out = ["# HELP smp_router_workers Worker processes of the router\n",
           "# TYPE smp_router_workers gauge\n", f"smp_router_workers {len(pages)}\n",
           "# HELP smp_router_worker_up 1 if the worker answered this scrape\n",
           "# TYPE smp_router_worker_up gauge\n"]
    out.extend(f'smp_router_worker_up{{worker="{i}"}} {int(page is not None)}\n'
               for i, page in enumerate(pages))
    out.extend(["# HELP smp_router_worker_connections Connections open now in each worker "
                "(its clients, not other workers' clients whose queues it holds)\n",
                "# TYPE smp_router_worker_connections gauge\n"])
    for i, page in enumerate(pages):
        for line in (page or "").splitlines():
            if line.startswith("smp_router_open_connections "):
                out.append(f'smp_router_worker_connections{{worker="{i}"}} '
                           f'{line.rpartition(" ")[2]}\n')
    return "".join(out)


def _admission(admission: Admission | None) -> str:
    """The router's counts its caps are checked on (admission.py)."""
    if admission is None:
        return ""
    return ("# HELP smp_router_admitted_connections Connections open now in every worker, "
            "from their accept (the caps' count)\n"
            "# TYPE smp_router_admitted_connections gauge\n"
            f"smp_router_admitted_connections {admission.open}\n"
            "# HELP smp_router_pending_connections Connections in the upgrade or the SMP "
            "handshake now, in every worker (the pending pool)\n"
            "# TYPE smp_router_pending_connections gauge\n"
            f"smp_router_pending_connections {admission.pending}\n"
            "# HELP smp_router_pending_evicted Pending connections dropped from the full "
            "pool for a newcomer from a less represented address\n"
            "# TYPE smp_router_pending_evicted counter\n"
            f"smp_router_pending_evicted {admission.evicted}\n")


def _page_of(answer: bytes | None) -> tuple[int, str, bytes] | None:
    """(status, content type, body) of a worker's `page` answer."""
    if answer is None:
        return None
    status, _, rest = answer.partition(b"\n")
    kind, _, body = rest.partition(b"\n")
    try:
        return int(status), kind.decode(), body
    except ValueError:
        return None


class RouterPages:
    """The metrics port's paths for the router of several workers (module doc)."""

    def __init__(self, router: SupervisedRouter) -> None:
        self._router = router
        self._lock = trio.Lock()
        self._body = b""
        self._rendered_at = -math.inf

    async def answer(self, stream: trio.SocketStream) -> None:
        request = await read_request(stream)
        if request is None:
            return
        method, target, headers = request
        status, body, kind = await self.page(method, target, headers)
        await send_response(stream, status, b"" if method == "HEAD" else body, kind)

    async def page(self, method: str, target: str,
                   headers: dict[str, str]) -> tuple[int, bytes, str]:
        url = urlsplit(target)
        pages: dict[str, Callable[[str], Awaitable[tuple[int, bytes, str]]]] = {
            "/metrics": self._metrics, "/healthz": self._health,
            "/connz": self._clients, "/subsz": self._subscriptions}
        page = pages.get(url.path)
        if page is None:
            return 404, b"only /metrics, /healthz, /connz, /subsz\n", "text/plain"
        if method not in ("GET", "HEAD"):
            return 405, b"only GET\n", "text/plain"
        password = self._router.config.control_admin_password
        if url.path in ("/connz", "/subsz") and not is_admin(password, headers):
            return admin_refusal(password)
        return await page(target)

    async def _worker_pages(self, target: str) -> list[tuple[int, str, bytes] | None]:
        return [_page_of(answer)
                for answer in await self._router.ask_all(f"page GET {target}")]

    async def _metrics(self, target: str) -> tuple[int, bytes, str]:
        async with self._lock:  # rendered once per PAGE_REUSE, however many scrape
            if trio.current_time() - self._rendered_at >= PAGE_REUSE:
                found = await self._worker_pages("/metrics")
                texts = [None if page is None else page[2].decode() for page in found]
                merged = merge_expositions(
                    [text for text in texts if text is not None],
                    shared_store=self._router.config.store in SHARED_STORES)
                self._body = (merged + _per_worker(texts)
                              + _admission(self._router.admission)).encode()
                self._rendered_at = trio.current_time()
            return 200, self._body, CONTENT_TYPE

    async def _health(self, target: str) -> tuple[int, bytes, str]:
        found = await self._worker_pages("/healthz")
        statuses, connections = [], 0
        for index, page in enumerate(found):
            if page is None:
                statuses.append(f"worker {index} down")
                continue
            facts = json.loads(page[2])
            statuses.append(facts["status"])
            connections += facts["connections"]
        status = next((s for s in statuses if s != "ok"), "ok")
        facts = {"status": status, "version": router_version(),
                 "uptime_seconds": round(time.monotonic() - self._router.started, 1),
                 "connections": connections, "workers": self._router.count}
        return (200 if status == "ok" else 503), _json(facts), JSON_TYPE

    async def _clients(self, target: str) -> tuple[int, bytes, str]:
        total, limit, clients = await self._listed(target, "total")
        return 200, _json({"total": total, "limit": limit, "workers": self._router.count,
                           "clients": clients}), JSON_TYPE

    async def _subscriptions(self, target: str) -> tuple[int, bytes, str]:
        query = parse_qs(urlsplit(target).query)
        if query.get("client"):
            worker = query.get("worker", [""])[-1]
            if not worker.isdigit() or int(worker) >= self._router.count:
                return 404, _json({"error": "name the client's worker too: "
                                   "?worker=I&client=ID (I from /connz)"}), JSON_TYPE
            page = _page_of(await self._router.ask(int(worker), f"page GET {target}"))
            if page is None:
                return 503, _json({"error": f"worker {worker} did not answer"}), JSON_TYPE
            status, kind, body = page
            answer = json.loads(body)
            answer["worker"] = int(worker)
            return status, _json(answer), kind
        subscriptions, limit, clients = await self._listed(target, "subscriptions")
        return 200, _json({"subscriptions": subscriptions, "limit": limit,
                           "clients": clients}), JSON_TYPE

    async def _listed(self, target: str, counted: str) -> tuple[int, int, list[object]]:
        """Every worker's page of clients put together: the `counted` figure summed,
        the clients (each with its worker) up to the pages' limit."""
        count, limit, clients = 0, 0, []
        for index, page in enumerate(await self._worker_pages(target)):
            if page is None:
                continue
            listed = json.loads(page[2])
            count += listed[counted]
            limit = listed["limit"]
            clients.extend({"worker": index, **client} for client in listed["clients"])
        return count, limit, clients[:limit]


def _json(value: object) -> bytes:
    return json.dumps(value, indent=1).encode() + b"\n"


async def serve_router_metrics(
    router: SupervisedRouter, host: str, port: int,
    *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The metrics port of the router of several workers, until cancelled."""
    listeners = await open_listeners("metrics", host, port)
    task_status.started(bound_port(listeners))
    await serve_pages(RouterPages(router), listeners, router.config.metrics_max_connections,
                      REQUEST_TIMEOUT + ASK_TIMEOUT)


async def start_router_ports(nursery: trio.Nursery, router: SupervisedRouter) -> None:
    """The configuration's metrics and control ports, for the router as a whole."""
    config = router.config
    if config.metrics_port is not None:
        port = await nursery.start(serve_router_metrics, router, config.metrics_host,
                                   config.metrics_port)
        log.info("metrics on http://%s/metrics", host_port(config.metrics_host, port))
    if config.control_port is not None:
        port = await nursery.start(serve_router_control, router, config.control_port)
        log.info("control port on %s", host_port(CONTROL_HOST, port))
