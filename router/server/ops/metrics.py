"""Prometheus metrics at `http://METRICS_HOST:METRICS_PORT/metrics` (opt-in).

Nothing on the hot path changes for them: a custom prometheus-client
`Collector` reads the router's live counters (`Router.statistics()`) when a
scrape arrives. The HTTP side is a small Trio server (h11 parses the
request), so the collector runs on the router's own thread and sees a
consistent snapshot; prometheus-client's threaded server would read the
router's dicts while Trio changes them.

Names: where a value means what the reference SMP server's metric of the same
family means, it has that name (`simplex_smp_queues_created`, ...), written
exactly as the reference writes it (so existing dashboards work) and typed
`untyped`, since prometheus-client would add `_total` to a counter's name.
The router's own values are `smp_router_*`, counters ending in `_total`.
The full list is in README, "Metrics".
"""

from __future__ import annotations

import gc
import logging
import math
import secrets
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import h11
import trio
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from store.interfaces import Party

from ..edge.block_stream import STREAM_GONE
from ..edge.listen import bound_port, open_listeners

if TYPE_CHECKING:
    from ..core.counters import RouterStatistics
    from .operated import OperatedRouter

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT = 10.0  # seconds a scraper has to send its request
PAGE_REUSE = 1.0  # seconds a rendered page is served again to other scrapes
MAX_REQUEST = 16 * 1024  # bytes of request head accepted
GC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
STORE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0)

# (reference name, statistics field, help): values with the reference's meaning.
REFERENCE_COUNTERS = (
    ("simplex_smp_queues_created", "queues_created", "Created queues"),
    ("simplex_smp_queues_secured", "queues_secured", "Secured queues"),
    ("simplex_smp_messages_sent", "messages_sent", "Sent messages"),
    ("simplex_smp_messages_received", "messages_delivered", "Messages delivered to recipients"),
    ("simplex_smp_messages_expired", "messages_expired", "Expired messages"),
    ("simplex_smp_subscribtion_end", "subscriptions_displaced",
     "Ended subscriptions (another connection subscribed)"),
)
OWN_COUNTERS = (
    ("smp_router_connections", "connections_total", "Connections accepted (handshake done)"),
    ("smp_router_messages_acked", "messages_acked", "Messages deleted by ACK"),
    ("smp_router_messages_deferred", "messages_deferred",
     "Pushes that found the client's outbox full and waited"),
    ("smp_router_writers_stalled", "writers_stalled", "Clients dropped for not reading"),
)


class RouterCollector(Collector):
    """Reads the router's counters at scrape time; `refresh()` first times one store
    lookup. The queues stored are counted once (`count_queues`, when the endpoint
    starts) and followed from the router's counters of queues created and deleted
    since: a scrape never counts rows on the store's thread (on SQLite with 300k
    queues that moved every client's SEND->MSG from 2.4 to 45 ms)."""

    def __init__(self, router: OperatedRouter) -> None:
        self._router = router
        self._queues_at_count = (0, 0, 0)  # queues stored, created and deleted then
        self.store_latency = Histogram(
            "smp_router_store_lookup_seconds",
            "Time of one queue lookup made at scrape time, waiting behind other store work",
            buckets=STORE_BUCKETS, registry=None,
        )

    async def count_queues(self) -> None:
        s = self._router.statistics()
        stored = await self._router.queues.queue_count()
        self._queues_at_count = (stored, s.queues_created, s.queues_deleted)

    @property
    def _queue_count(self) -> int:
        stored, created, deleted = self._queues_at_count
        s = self._router.statistics()
        return stored + (s.queues_created - created) - (s.queues_deleted - deleted)

    async def refresh(self) -> None:
        started = time.perf_counter()
        await self._router.queues.get_queue(Party.RECIPIENT, secrets.token_bytes(24))
        self.store_latency.observe(time.perf_counter() - started)

    def collect(self) -> Iterator[Metric]:
        s = self._router.statistics()
        for name, field, doc in REFERENCE_COUNTERS:
            yield _untyped(name, doc, getattr(s, field))
        deleted = UnknownMetricFamily("simplex_smp_queues_deleted", "Deleted queues",
                                      labels=["type"])
        deleted.add_metric(["all"], s.queues_deleted)
        yield deleted
        errors = UnknownMetricFamily("simplex_smp_messages_sent_errors",
                                     "Sent messages errors by type", labels=["type"])
        errors.add_metric(["quota"], s.messages_quota_refused)
        yield errors
        yield GaugeMetricFamily("simplex_smp_queues_total1", "Stored queues",
                                value=self._queue_count)
        yield GaugeMetricFamily("simplex_smp_clients_total", "Clients", value=s.connections)
        yield GaugeMetricFamily("simplex_smp_subscribtion_total", "Total subscriptions",
                                value=s.subscriptions)
        yield from self._own(s)

    def _own(self, s: RouterStatistics) -> Iterator[Metric]:
        for name, field, doc in OWN_COUNTERS:
            yield CounterMetricFamily(name, doc, value=getattr(s, field))
        refused = CounterMetricFamily("smp_router_commands_refused",
                                      "Commands refused by a limit", labels=["reason"])
        refused.add_metric(["new_queue_rate"], s.new_queues_rate_limited)
        refused.add_metric(["store_full"], s.messages_store_full)
        yield refused
        yield GaugeMetricFamily("smp_router_open_connections", "Connections open now",
                                value=s.connections)
        yield GaugeMetricFamily("smp_router_subscriptions", "Queues subscribed now",
                                value=s.subscriptions)
        yield GaugeMetricFamily("smp_router_deliveries_waiting",
                                "Messages waiting for room in a client's outbox",
                                value=s.pending_deliveries)
        tasks = sum(self._router.connection_task_counts().values())
        yield GaugeMetricFamily("smp_router_connection_tasks",
                                "Tasks serving connections (receive, send, delivery)",
                                value=tasks)
        yield GaugeMetricFamily("smp_router_suspended", "1 while suspended by the control port",
                                value=int(self._router.gate.suspended))
        yield from self.store_latency.collect()


def _untyped(name: str, doc: str, value: float) -> Metric:
    return UnknownMetricFamily(name, doc, value=value)


class GcPauses:
    """Full and partial garbage collections, timed through `gc.callbacks` (called only
    when the collector runs, so the hot path pays nothing)."""

    def __init__(self) -> None:
        self.histogram = Histogram(
            "smp_router_gc_pause_seconds", "Garbage collection pauses by generation",
            labelnames=["generation"], buckets=GC_BUCKETS, registry=None,
        )
        self._started = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            pause = time.perf_counter() - self._started
            self.histogram.labels(str(info["generation"])).observe(pause)

    def collect(self) -> Iterator[Metric]:
        return iter(self.histogram.collect())


def build_registry(
    router: OperatedRouter, gc_pauses: GcPauses
) -> tuple[CollectorRegistry, RouterCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = RouterCollector(router)
    registry.register(collector)
    registry.register(gc_pauses)  # type: ignore[arg-type]
    ProcessCollector(registry=registry)  # RSS, CPU seconds, open fds (Linux)
    return registry, collector


async def serve_metrics(
    router: OperatedRouter, host: str, port: int,
    *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer `GET /metrics` until cancelled; reports the bound port.

    At most `metrics_max_connections` connections are served at once (one more is
    closed at once), and the page is rendered at most once per `PAGE_REUSE`
    seconds, however many scrapers ask: looping scrapers cost the router no more
    than one."""
    listeners = await open_listeners("metrics", host, port)
    cap = router.config.metrics_max_connections
    with GcPauses() as gc_pauses:
        registry, collector = build_registry(router, gc_pauses)
        await collector.count_queues()
        page = RenderedPage(registry, collector)
        open_connections = 0

        async def handle(stream: trio.SocketStream) -> None:
            nonlocal open_connections
            if open_connections >= cap:
                await trio.aclose_forcefully(stream)
                return
            open_connections += 1
            try:
                with trio.fail_after(REQUEST_TIMEOUT):
                    await _answer(stream, page)
            except (trio.TooSlowError, *STREAM_GONE, h11.ProtocolError) as e:
                log.debug("metrics request failed: %r", e)
            except Exception:  # a failing scrape is logged, never stops the router
                log.exception("metrics scrape failed")
            finally:
                open_connections -= 1
                await trio.aclose_forcefully(stream)

        task_status.started(bound_port(listeners))
        await trio.serve_listeners(handle, listeners)


class RenderedPage:
    """The metrics page, rendered once per `PAGE_REUSE` seconds at most; scrapes that
    arrive while it renders wait for that rendering."""

    def __init__(self, registry: CollectorRegistry, collector: RouterCollector) -> None:
        self._registry = registry
        self._collector = collector
        self._lock = trio.Lock()
        self._body = b""
        self._rendered_at = -math.inf

    async def body(self) -> bytes:
        async with self._lock:
            if trio.current_time() - self._rendered_at >= PAGE_REUSE:
                await self._collector.refresh()
                self._body = generate_latest(self._registry)
                self._rendered_at = trio.current_time()
            return self._body


async def _answer(stream: trio.SocketStream, page: RenderedPage) -> None:
    request = await read_request(stream)
    if request is None:
        return
    method, target = request
    if target.split("?")[0] != "/metrics":
        await send_response(stream, 404, b"only /metrics here\n", "text/plain")
    elif method not in ("GET", "HEAD"):
        await send_response(stream, 405, b"only GET\n", "text/plain")
    else:
        body = await page.body()
        await send_response(stream, 200, b"" if method == "HEAD" else body, CONTENT_TYPE)


async def read_request(stream: trio.SocketStream) -> tuple[str, str] | None:
    """(method, target) of one HTTP/1.x request, or None if the peer left first."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Request):
            return event.method.decode(), event.target.decode("latin-1")
        if event is h11.NEED_DATA:
            data = await stream.receive_some(4096)
            if not data:
                return None
            conn.receive_data(data)
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def send_response(
    stream: trio.SocketStream, status: int, body: bytes, content_type: str
) -> None:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    await stream.send_all(head + body)


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}
