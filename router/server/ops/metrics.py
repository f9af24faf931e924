"""The metrics port (opt-in): Prometheus metrics at `/metrics`, `/healthz`, and for the
admin a JSON view of the clients (`/connz`) and their subscriptions (`/subsz`).

Nothing on the hot path changes for them: a custom prometheus-client
`Collector` reads the router's live counters (`Router.statistics()`) and the
latency histograms the hot path fills (latency.py) when a scrape arrives. The
HTTP side is a small Trio server (h11 parses the request), so the collector
runs on the router's own thread and sees a consistent snapshot;
prometheus-client's threaded server would read the router's dicts while Trio
changes them.

Names and types: where a value means what the reference SMP server's metric of
the same family means, it has that name and the reference's type
(`simplex_smp_queues_created`, a counter without `_total`, exactly as the
reference writes it, so its dashboards work). The router's own values are
`smp_router_*`, counters ending in `_total`. prometheus-client's own text
writer would append `_total` to every counter's TYPE line, so the page is
written by `exposition()` below, in the same text format (version 0.0.4). The
full list is in README, "Metrics".

`/healthz` answers 200 `{"status": "ok"}` while the router accepts clients and
503 while it is suspended or draining, for a load balancer or an orchestrator.
`/connz` and `/subsz` need the control port's admin password
(`Authorization: Bearer PASSWORD`, or basic auth as `admin`), and are refused
when there is none.
"""

from __future__ import annotations

import base64
import binascii
import gc
import hmac
import json
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qs, urlsplit

import h11
import trio
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from store.interfaces import Party

from ..core.latency import Histogram as LatencyHistogram
from ..edge.block_stream import STREAM_GONE
from ..edge.listen import bound_port, open_listeners
from .info import router_version
from .memory import TOP_TYPES, Census

if TYPE_CHECKING:
    from ..core.connection import Connection
    from ..core.counters import RouterStatistics
    from ..core.relays import Relays
    from .operated import OperatedRouter

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JSON_TYPE = "application/json"
REQUEST_TIMEOUT = 10.0  # seconds a scraper has to send its request
PAGE_REUSE = 1.0  # seconds a rendered page is served again to other scrapes
MAX_REQUEST = 16 * 1024  # bytes of request head accepted
GC_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
MEMORY_MAX_AGE = 300.0  # seconds a memory census is reused by later scrapes
STORE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0)
DEFAULT_LIMIT, MAX_LIMIT = 1000, 10_000  # entries a /connz or /subsz answer lists

# (reference name, statistics field, help): counters with the reference's meaning.
REFERENCE_COUNTERS = (
    ("simplex_smp_queues_created", "queues_created", "Created queues"),
    ("simplex_smp_queues_secured", "queues_secured", "Secured queues"),
    ("simplex_smp_queues_blocked", "queues_blocked", "Queues blocked from the control port"),
    ("simplex_smp_subscribtion_successes", "subscriptions_ok", "Successful subscriptions"),
    ("simplex_smp_subscribtion_end", "subscriptions_displaced",
     "Ended subscriptions (another connection subscribed)"),
    ("simplex_smp_messages_sent", "messages_sent", "Sent messages"),
    ("simplex_smp_messages_received", "messages_delivered", "Messages delivered to recipients"),
    ("simplex_smp_messages_expired", "messages_expired", "Expired messages"),
    ("simplex_smp_queues_notify_created", "notifiers_created",
     "Created queue notification credentials"),
    ("simplex_smp_queues_notify_deleted", "notifiers_deleted",
     "Deleted queue notification credentials"),
    ("simplex_smp_subscription_ntf_requests", "notifier_subscriptions_ok",
     "Subscription requests with notification flag (from ntf server)"),
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
        self._memory: Census | None = None
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
        self._memory = await self._router.memory.fresh(MEMORY_MAX_AGE)
        started = time.perf_counter()
        await self._router.queues.get_queue(Party.RECIPIENT, secrets.token_bytes(24))
        self.store_latency.observe(time.perf_counter() - started)

    def collect(self) -> Iterator[Metric]:
        s = self._router.statistics()
        yield from self._reference(s)
        yield from self._own(s)
        yield from self._latencies()

    def _reference(self, s: RouterStatistics) -> Iterator[Metric]:
        for name, field, doc in REFERENCE_COUNTERS:
            yield _counter(name, doc, [({}, getattr(s, field))])
        yield _counter("simplex_smp_queues_deleted", "Deleted queues",
                       [({"type": "all"}, s.queues_deleted)])
        yield _counter("simplex_smp_messages_sent_errors", "Sent messages errors by type",
                       [({"type": "quota"}, s.messages_quota_refused),
                        ({"type": "large"}, s.messages_large_refused)])
        notifications = self._router.notifications
        yield _counter("simplex_smp_messages_ntf_successes",
                       "Notification messages handed to the notification server's connection",
                       [({}, notifications.sent)])
        yield _counter("simplex_smp_messages_ntf_errors",
                       "Notification messages dropped: over the bound per notifier, or expired",
                       [({"type": "lost"}, notifications.dropped)])
        subscribed_clients = notifier_subscriptions = 0
        subscriptions = self._router.subscriptions
        for conn in list(self._router.connections.values()):
            subscriber = subscriptions.subscriber_for(conn)
            if subscriber is not None:
                subscribed_clients += bool(subscriber.queues)
                notifier_subscriptions += len(subscriber.notifiers)
        gauges = (
            ("simplex_smp_queues_total1", "Stored queues", self._queue_count),
            ("simplex_smp_clients_total", "Clients", s.connections),
            ("simplex_smp_subscribtion_total", "Total SMP subscriptions", s.subscriptions),
            ("simplex_smp_subscribtion_clients_total", "Subscribed clients", subscribed_clients),
            ("simplex_smp_subscription_ntf_total",
             "Total notification subscriptions (from ntf server)", notifier_subscriptions),
        )
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        yield from _relays(s)
        info = GaugeMetricFamily("simplex_smp_info", "Server information", labels=["version"])
        info.add_metric([router_version()], 1)
        yield info

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
        yield GaugeMetricFamily("smp_router_proxy_connections",
                                "Connections open now from this router, as a proxy, to "
                                "destination routers", value=s.proxy_connections)
        yield from _proxy_pool(self._router.relays)
        yield GaugeMetricFamily("smp_router_suspended", "1 while suspended by the control port",
                                value=int(self._router.gate.suspended))
        yield GaugeMetricFamily("smp_router_draining",
                                "1 from the start of a drain (no new clients) to the stop",
                                value=int(self._router.draining))
        yield from self.store_latency.collect()
        if self._memory is not None:
            yield from _memory(self._memory)

    def _latencies(self) -> Iterator[Metric]:
        latencies = self._router.latencies
        commands = Metric("smp_router_command_seconds",
                          "Time of a command from its verification to its responses",
                          "histogram")
        for name, histogram in sorted(latencies.commands.items()):
            _add_histogram(commands, histogram, {"command": name})
        yield commands
        delivery = Metric("smp_router_delivery_seconds",
                          "Time from a SEND to a subscribed queue to the MSG that carries it "
                          "(including the wait for the ACK of the message before)",
                          "histogram")
        _add_histogram(delivery, latencies.delivery, {})
        yield delivery


def _proxy_pool(relays: Relays) -> Iterator[Metric]:
    """How the proxy's pool is shared between client addresses (core/relays.py)."""
    stats = relays.stats
    yield GaugeMetricFamily("smp_router_proxy_connecting",
                            "Connections to destination routers being made now",
                            value=relays.connecting)
    yield GaugeMetricFamily("smp_router_proxy_pressed_addresses",
                            "Client addresses in a proxy pool pressure episode now",
                            value=relays.pressed_addresses)
    pressure = CounterMetricFamily(
        "smp_router_proxy_pool_pressure",
        "PRXYs and PFWDs held back by the sharing of the proxy's pool, and its pressure "
        "episodes",
        labels=["event"])
    for event, value in (("waited", stats.waited), ("slowed", stats.slowed),
                         ("connect_evicted", stats.evicted), ("no_room", stats.no_room),
                         ("pfwd_waited", stats.forwards_waited),
                         ("episodes", stats.pressure_episodes)):
        pressure.add_metric([event], value)
    yield pressure
    yield CounterMetricFamily(
        "smp_router_proxy_destinations_refused",
        "PRXYs refused because their destination is loopback, private, link-local or "
        "this machine's (PROXY BROKER HOST)", value=stats.refused_destinations)


def _memory(census: Census) -> Iterator[Metric]:
    """The latest memory census (ops/memory.py), at most MEMORY_MAX_AGE seconds old."""
    parts = GaugeMetricFamily("smp_router_memory_bytes",
                              "Live bytes reachable from each part of the router",
                              labels=["component"])
    objects = GaugeMetricFamily("smp_router_memory_objects",
                                "Objects reachable from each part of the router",
                                labels=["component"])
    for name, part in census.parts.items():
        parts.add_metric([name], part.bytes)
        objects.add_metric([name], part.objects)
    yield parts
    yield objects
    types = GaugeMetricFamily("smp_router_memory_type_bytes",
                              f"Live bytes of the {TOP_TYPES} largest types in the router's parts",
                              labels=["type"])
    for name, _, size in census.types(TOP_TYPES):
        types.add_metric([name], size)
    yield types
    allocator = GaugeMetricFamily("smp_router_memory_allocator_bytes",
                                  "glibc malloc and pymalloc: bytes in use and free",
                                  labels=["allocator", "state"])
    for key, value in census.allocator.items():
        kind, _, state = key.partition("_")
        if value is not None and state in ("in_use", "free"):
            allocator.add_metric([kind, state], value)
    yield allocator
    yield GaugeMetricFamily("smp_router_memory_census_seconds",
                            "Time the latest memory census took", value=census.seconds)
    yield GaugeMetricFamily("smp_router_memory_census_complete",
                            "1 if the latest census walked everything, 0 if it stopped "
                            "at its bound", value=int(census.complete))

# The reference's proxy counters (docs/protocol.md#private-message-routing): PRXY
# ("sessions") and PFWD ("messages"); source "own" counts the destinations that are
# this router or the operator's own (also in "all").
_RELAY_METRICS = (
    ("sessions", "Session requests through relay.", "Successful session events through relay.",
     "Error session events through relay."),
    ("messages", "Message requests sent through relay.",
     "Successful messages sent through relay.", "Error events with messages sent through relay."),
)


def _relays(s: RouterStatistics) -> Iterator[Metric]:
    for what, requests, successes, errors in _RELAY_METRICS:
        def count(outcome: str, own: str, what: str = what) -> int:
            return getattr(s, f"proxy_{what}_{outcome}{own}")  # type: ignore[no-any-return]

        sources = (("all", ""), ("own", "_own"))
        yield _counter(f"simplex_smp_relay_{what}_requests", requests,
                       [({"source": source}, count("requests", own)) for source, own in sources])
        yield _counter(f"simplex_smp_relay_{what}_successes", successes,
                       [({"source": source}, count("successes", own))
                        for source, own in sources])
        yield _counter(f"simplex_smp_relay_{what}_errors", errors,
                       [({"source": source, "type": kind}, count(f"errors_{kind}", own))
                        for source, own in sources for kind in ("connect", "compat", "other")])
    yield _counter("simplex_smp_relay_messages_received", "Relay messages statistics.",
                   [({}, s.proxy_messages_received)])


def _counter(name: str, doc: str, values: Iterable[tuple[dict[str, str], float]]) -> Metric:
    """A counter named exactly `name` (the reference's have no `_total`)."""
    metric = Metric(name, doc, "counter")
    for labels, value in values:
        metric.add_sample(name, labels, value)
    return metric


def _add_histogram(metric: Metric, histogram: LatencyHistogram, labels: dict[str, str]) -> None:
    for bound, count in histogram.cumulative():
        metric.add_sample(f"{metric.name}_bucket", {**labels, "le": bound}, count)
    metric.add_sample(f"{metric.name}_count", labels, histogram.count)
    metric.add_sample(f"{metric.name}_sum", labels, histogram.sum)


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format (0.0.4), every family under the name its samples have:
    a counter's TYPE line names `x_total` only when its samples are `x_total`."""
    out: list[str] = []
    for metric in registry.collect():
        # prometheus-client's creation-time samples; the text format has no place for them.
        samples = [s for s in metric.samples if s.name != f"{metric.name}_created"]
        if not samples:
            continue
        name = metric.name
        if metric.type == "counter" and all(s.name == f"{name}_total" for s in samples):
            name = f"{name}_total"
        kind = "untyped" if metric.type == "unknown" else metric.type
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for sample in samples:
            labels = ",".join(f'{k}="{_label_value(v)}"' for k, v in sample.labels.items())
            out.append(f"{sample.name}{{{labels}}} " if labels else f"{sample.name} ")
            out.append(f"{floatToGoString(sample.value)}\n")
    return "".join(out).encode()


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


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
    """Answer the metrics port's requests until cancelled; reports the bound port.

    At most `metrics_max_connections` connections are served at once (one more is
    closed at once), and the metrics page is rendered at most once per `PAGE_REUSE`
    seconds, however many scrapers ask: looping scrapers cost the router no more
    than one."""
    listeners = await open_listeners("metrics", host, port)
    async with open_pages(router) as pages:
        task_status.started(bound_port(listeners))
        await serve_pages(pages, listeners, router.config.metrics_max_connections,
                          REQUEST_TIMEOUT)


class AnswersPages(Protocol):
    async def answer(self, stream: trio.SocketStream) -> None: ...


async def serve_pages(pages: AnswersPages, listeners: list[trio.SocketListener], cap: int,
                      timeout: float) -> None:
    """Answer each connection's request with `pages`, at most `cap` connections at
    once (one more is closed at once), each within `timeout` seconds."""
    open_connections = 0

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal open_connections
        if open_connections >= cap:
            await trio.aclose_forcefully(stream)
            return
        open_connections += 1
        try:
            with trio.fail_after(timeout):
                await pages.answer(stream)
        except (trio.TooSlowError, *STREAM_GONE, h11.ProtocolError) as e:
            log.debug("metrics request failed: %r", e)
        except Exception:  # a failing scrape is logged, never stops the router
            log.exception("metrics scrape failed")
        finally:
            open_connections -= 1
            await trio.aclose_forcefully(stream)

    await trio.serve_listeners(handle, listeners)


@asynccontextmanager
async def open_pages(router: OperatedRouter) -> AsyncIterator[Pages]:
    """The metrics port's pages of `router`, its garbage collections timed meanwhile."""
    with GcPauses() as gc_pauses:
        registry, collector = build_registry(router, gc_pauses)
        await collector.count_queues()
        yield Pages(router, registry, collector)


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
                self._body = exposition(self._registry)
                self._rendered_at = trio.current_time()
            return self._body


class Pages:
    """The metrics port's paths."""

    def __init__(self, router: OperatedRouter, registry: CollectorRegistry,
                 collector: RouterCollector) -> None:
        self._router = router
        self._registry = registry
        self._page = RenderedPage(registry, collector)
        self._started = time.monotonic()

    async def answer(self, stream: trio.SocketStream) -> None:
        request = await read_request(stream)
        if request is None:
            return
        method, target, headers = request
        status, body, kind = await self.page(method, target, lambda: self._admin(headers))
        await send_response(stream, status, b"" if method == "HEAD" else body, kind)

    async def page(self, method: str, target: str,
                   admin: Callable[[], bool]) -> tuple[int, bytes, str]:
        """The answer to a request of `target`; `admin()` tells whether it may see the
        clients (also asked by the supervisor of several workers: workers/operator.py)."""
        url = urlsplit(target)
        page = {"/metrics": self._metrics, "/healthz": self._health,
                "/connz": self._clients, "/subsz": self._subscriptions}.get(url.path)
        if page is None:
            return 404, b"only /metrics, /healthz, /connz, /subsz\n", "text/plain"
        if method not in ("GET", "HEAD"):
            return 405, b"only GET\n", "text/plain"
        if page in (self._clients, self._subscriptions) and not admin():
            return self._refusal()
        return await page(parse_qs(url.query))

    async def _metrics(self, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        return 200, await self._page.body(), CONTENT_TYPE

    async def _health(self, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        router = self._router
        status = health_status(router)
        facts = {"status": status, "version": router_version(),
                 "uptime_seconds": round(time.monotonic() - self._started, 1),
                 "connections": router.statistics().connections}
        return (200 if status == "ok" else 503), _json(facts), JSON_TYPE

    async def _clients(self, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        limit = _limit(query)
        router = self._router
        subscriptions = router.subscriptions
        connections = _clients_of(router)
        clients = []
        for conn in connections[:limit]:
            s = subscriptions.subscriber_for(conn)
            clients.append({
                "id": conn.id, "remote": str(conn.transport.remote),
                "version": conn.version,
                "subscriptions": 0 if s is None else len(s.queues),
                "notifier_subscriptions": 0 if s is None else len(s.notifiers),
                "deliveries_waiting": 0 if s is None else len(s.deliveries),
                "service": conn.service is not None,
                "idle_seconds": round(max(0.0, trio.current_time() - conn.last_activity), 1),
            })
        return 200, _json({"total": len(connections), "limit": limit,
                           "clients": clients}), JSON_TYPE

    async def _subscriptions(self, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        """Per client the number of subscriptions; with `?client=ID` that client's queues
        (recipient ids, base64url) and notifiers (notifier ids)."""
        limit = _limit(query)
        router = self._router
        subscriptions = router.subscriptions
        wanted = query.get("client", [""])[-1]
        answer: dict[str, object] = {"subscriptions": len(subscriptions), "limit": limit}
        if wanted:
            conn = router.connections.get(int(wanted)) if wanted.isdigit() else None
            s = None if conn is None else subscriptions.subscriber_for(conn)
            if conn is None:
                return 404, _json({"error": f"no client {wanted}"}), JSON_TYPE
            answer["client"] = conn.id
            answer["queues"] = [_b64(rid) for rid in list(s.queues)[:limit]] if s else []
            answer["notifiers"] = [_b64(nid) for nid in list(s.notifiers)[:limit]] if s else []
            return 200, _json(answer), JSON_TYPE
        by_client = []
        for conn in _clients_of(router):
            s = subscriptions.subscriber_for(conn)
            if s is not None and (s.queues or s.notifiers):
                by_client.append({"id": conn.id, "queues": len(s.queues),
                                  "notifiers": len(s.notifiers)})
        answer["clients"] = by_client[:limit]
        return 200, _json(answer), JSON_TYPE

    def _admin(self, headers: dict[str, str]) -> bool:
        return is_admin(self._router.config.control_admin_password, headers)

    def _refusal(self) -> tuple[int, bytes, str]:
        return admin_refusal(self._router.config.control_admin_password)


def is_admin(password: str | None, headers: dict[str, str]) -> bool:
    """Whether the request's Authorization header gives the control port's admin password."""
    if not password:
        return False
    given = headers.get("authorization", "")
    scheme, _, credentials = given.partition(" ")
    if scheme.lower() == "bearer":
        offered = credentials.strip()
    elif scheme.lower() == "basic":
        try:
            user, _, offered = base64.b64decode(credentials).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if user != "admin":
            return False
    else:
        return False
    return hmac.compare_digest(offered.encode(), password.encode())


def admin_refusal(password: str | None) -> tuple[int, bytes, str]:
    if not password:
        return (403, b"set control_port_admin_password to see clients and subscriptions\n",
                "text/plain")
    return 401, b"the admin password is needed (Authorization: Bearer PASSWORD)\n", \
        "text/plain"


def _clients_of(router: OperatedRouter) -> list[Connection]:
    """The router's connections but another worker's clients served here (shadows,
    workers/handoff.py): that worker lists them."""
    return [conn for conn in list(router.connections.values())
            if not getattr(conn.transport, "shadow", False)]


def health_status(router: OperatedRouter) -> str:
    """"ok", or why the router is not taking clients now."""
    if router.draining:
        return "draining"
    if router.gate.suspended:
        return "suspended"
    return "ok"


def _limit(query: dict[str, list[str]]) -> int:
    text = query.get("limit", [""])[-1]
    return min(int(text), MAX_LIMIT) if text.isdigit() else DEFAULT_LIMIT


def _b64(value: bytes) -> str:
    return base64.urlsafe_b64encode(value).decode().rstrip("=")


def _json(value: object) -> bytes:
    return json.dumps(value, indent=1).encode() + b"\n"


async def read_request(stream: trio.SocketStream) -> tuple[str, str, dict[str, str]] | None:
    """(method, target, lower-cased headers) of one HTTP/1.x request, or None if the peer
    left first."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Request):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in event.headers}
            return event.method.decode(), event.target.decode("latin-1"), headers
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


_REASONS = {200: "OK", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 503: "Service Unavailable"}
