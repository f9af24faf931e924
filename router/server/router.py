"""The router: where the parts are put together, the connection life cycle, and
the ways to run it.

`Router` builds the parts (stores, `Subscriptions`, delivery, services,
notifications, the command handlers and their dispatcher) and wires each to
only what it uses; none of them holds the `Router`. It serves connections and
offers the control port's operations.

`open_router(config)` gives a running `Router` (stores open, identity loaded,
the END/DELD flush, message expiration and stats log tasks started) for as
long as the `async with` lasts;
`handle_websocket(router, ws)` serves one WebSocket that a host program has
already accepted; `serve_router(config)` does both on its own listener
(`edge/listener.py`), reporting a `RouterInfo` through `task_status` so a caller can
`await nursery.start(...)`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, fields, replace
from functools import partial
from itertools import count
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import trio
from trio_websocket import WebSocketConnection

from router.protocol.handshake import SERVICE_ID_SIZE
from router.protocol.types import ACK, SEND
from store.factory import MESSAGES_SNAPSHOT, QUEUES_SNAPSHOT, store_dir
from store.interfaces import MessageRuns, MessageStore, Party, QueueStore, ServiceRecord
from store.memory.stores import MemoryMessageStore, MemoryQueueStore

from .core.blocked import BlockedQueues
from .core.commands import CommandContext, Commands, not_logged, nothing_to_expire
from .core.connection import Cancellable, ClientHandler, Connection
from .core.counters import Counters, RouterStatistics
from .core.delivery import Deliverer
from .core.dispatch import Dispatcher
from .core.expiry import Expirer
from .core.latency import Latencies
from .core.notifications import Notifications
from .core.ownership import ONE_WORKER, Ownership
from .core.proxy import Proxy
from .core.proxy_destinations import DestinationPolicy
from .core.relays import Destination, RelayLimits, Relays
from .core.services import Services
from .core.serving import ClientServing
from .core.subscriptions import ClientSubscriptions, Event, Subscriptions
from .edge.admission import SharedCaps
from .edge.block_stream import BlockStream, TransportClosed
from .edge.encrypted import EncryptedTransport
from .edge.gate import GatedTransport, Suspendable, SuspendGate
from .edge.handshake import Handshake, server_handshake
from .edge.http import ACCEPT_WEBSOCKET, HttpRequest, HttpResponse
from .edge.identity import RouterIdentity, host_port, load_or_create_identity
from .edge.listen import naming_address
from .edge.listener import EdgeListener, serve_edge
from .edge.native_tls import TlsBlockTransport, identity_tls_context, web_tls_context
from .edge.transports import BlockTransport
from .open_stores import open_router_stores
from .ops.active_queues import HyperLogLog, queue_hash
from .ops.control import CONTROL_HOST, serve_control
from .ops.memory import MemoryCensus
from .ops.metrics import serve_metrics
from .ops.statslog import StatsLog
from .settings.config import PER_QUEUE_TASK, ConfigError, RouterConfig, os_error_reason

log = logging.getLogger(__name__)

InfoPage = Callable[[HttpRequest], HttpResponse]


class FrontServing(ClientHandler[ClientSubscriptions], Protocol):
    """How a worker of several serves its connections (workers/handoff.py)."""

    def forget(self, conn: Connection) -> None:
        """The connection ended."""
        ...


# What `Router.reconfigure` takes from a new configuration while the router runs; the
# rest (addresses, ports, the store, the delivery design, the listener's limits, ...)
# needs a restart.
LIVE_SETTINGS = frozenset({
    "quota", "password", "allow_new_queues", "control_admin_password",
    "control_user_password", "new_queue_rate", "new_queue_burst", "new_queue_address_rate",
    "new_queue_address_burst", "new_queue_total_rate", "new_queue_total_burst",
    "memory_store_max_bytes",
    "information", "tls_cert", "tls_key", "drain_period", "allow_proxy", "proxy_password",
})


class Router:
    """The assembled router: its parts, the connections it serves and the control
    port's operations; created by `open_router`."""

    def __init__(
        self,
        config: RouterConfig,
        identity: RouterIdentity,
        queues: QueueStore,
        messages: MessageStore,
        ownership: Ownership = ONE_WORKER,
    ) -> None:
        self.config = config
        self.ownership = ownership  # this process's share of the queues (docs/workers.md)
        self.identity = identity
        self.queues = queues
        self.messages = messages
        self.counters = Counters()
        self.latencies = Latencies()
        self.connections: dict[int, Connection] = {}
        self.shadows = 0  # of `connections`, other workers' clients (open_shadow)
        self._ids = count(1)
        self.gate = SuspendGate()  # closed by the control port's suspend
        self.listener: Suspendable | None = None  # the listener, once it is accepting
        self.blocked = BlockedQueues(config.data_dir)  # recipient id -> reason
        self.subscriptions = Subscriptions(self.counters, config.end_batch_interval)
        self.memory = MemoryCensus(self)  # the control port's `memory`, the memory gauges
        self.expirer = Expirer(
            messages, ttl=config.message_ttl, interval=config.expire_interval,
            on_expired=self._count_expired,
        )
        self.info_page: InfoPage | None = None  # answers a plain GET of "/", if set
        self.tls: ssl.SSLContext | None = None  # the listener's, once it is accepting
        self.draining = False  # no new clients; the connected ones are being closed
        self.drained = trio.Event()  # set when a drain is done: whoever runs the router stops it
        self._background: trio.Nursery | None = None
        self._fronts: FrontServing | None = None  # with several workers (install_serving)
        self.stats_log: StatsLog | None = None
        # A worker of several counts its active queues for the supervisor's one stats
        # log (workers/operations.py `stats`), which writes the file.
        self.active_queues: HyperLogLog | None = None
        # The proxy's connections to destination routers (docs/protocol.md#private-message-routing).
        self.relays = Relays(RelayLimits(
            max_relays=config.proxy_max_connections,
            connect_timeout=config.proxy_connect_timeout,
            answer_timeout=config.proxy_answer_timeout,
            idle_timeout=config.proxy_idle_timeout,
            error_hold=config.proxy_error_hold,
            connects_per_address=config.proxy_connects_per_address,
            held_per_address=config.proxy_max_connections_per_address,
        ), is_own=self._is_own_destination,
            policy=DestinationPolicy(config.proxy_allow_destinations))
        if config.stats_log is not None and ownership.workers > 1:
            self.active_queues = HyperLogLog()
        elif config.stats_log is not None:
            self.stats_log = StatsLog(
                config.stats_log, self.statistics, interval=config.stats_interval
            )
        self._assemble_parts()

    def _assemble_parts(self) -> None:
        """Delivery, services, notifications, the command handlers and how each
        client is served, each given only what it uses."""
        config, counters = self.config, self.counters
        self.notifications = Notifications(
            self.subscriptions.notifier_connection, config.ntf_batch_interval,
            service_holder=self.subscriptions.notifier_service_connection,
        )
        self.deliverer = Deliverer(
            self.subscriptions, self.messages, counters, self.latencies,
            per_queue_task=config.delivery == PER_QUEUE_TASK,
        )
        self.services = Services(
            self.queues, self.messages, self.subscriptions, self.deliverer, self.notifications
        )
        self.proxy = Proxy(self.relays, counters, lambda: self.config)
        self.commands = commands = Commands(CommandContext(
            config, self.queues, self.messages, counters, self.latencies, self.subscriptions,
            self.deliverer,
            self.services, self.notifications, self.blocked,
            # The command handlers call these directly, not through the router.
            queue_active=self._queue_active(),
            expire_before_send=(self.expirer.expire_queue if config.expire_on_send
                                else nothing_to_expire),
            proxy=self.proxy,
            ownership=self.ownership,
        ))
        self.dispatcher = Dispatcher(self.queues, commands.execute, self.latencies,
                                     counters=counters,
                                     awaits_ack=self.subscriptions.awaits_ack,
                                     subscribe_run=commands.subscribe_run,
                                     store_runs=(
                                         {SEND: commands.send_run, ACK: commands.ack_run}
                                         if isinstance(self.messages, MessageRuns) else None))
        self._serving: ClientHandler[ClientSubscriptions] = ClientServing(
            self.dispatcher, self.deliverer, self.services, self.subscriptions.events
        )
        self._shadow_serving = self._serving

    def _queue_active(self) -> Callable[[bytes], None]:
        if self.stats_log is not None:
            return self.stats_log.record_active_queue
        if self.active_queues is not None:
            sketch = self.active_queues
            return lambda recipient_id: sketch.add_hash(queue_hash(recipient_id))
        return not_logged

    @property
    def key_hash(self) -> bytes:
        return self.identity.key_hash

    def _is_own_destination(self, dest: Destination) -> bool:
        """This router itself, or a host of the operator's own domains (the reference's
        own_server_domains): counted apart in the proxy statistics."""
        if dest.key_hash == self.identity.key_hash:
            return True
        host = dest.host.lower()
        return any(host == d or host.endswith("." + d) for d in self.config.proxy_own_domains)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The router's own background work: flushing END/DELD batches, expiring old
        messages, writing the stats log."""
        async with trio.open_nursery() as nursery:
            self._background = nursery
            if self.stats_log is not None:
                await nursery.start(self.stats_log.run)
            await nursery.start(self.expirer.run)
            await nursery.start(self.relays.run)
            nursery.start_soon(self.subscriptions.events.run)
            nursery.start_soon(self.notifications.run)
            if self.config.idle_timeout is not None:
                nursery.start_soon(self._drop_idle_clients, self.config.idle_timeout)
            task_status.started()

    async def _drop_idle_clients(self, timeout: float) -> None:
        """Close connections without subscriptions that sent nothing for `timeout` s."""
        while True:
            await trio.sleep(max(timeout / 4, 0.05))
            oldest = trio.current_time() - timeout
            for conn in list(self.connections.values()):
                if getattr(conn.transport, "shadow", False):
                    continue  # another worker's client: its own worker times it out
                if conn.last_activity < oldest and not (
                    conn.service or self._subscribed_anything(conn)
                ):
                    conn.close_now(f"idle for {timeout} s without subscriptions")

    def _subscribed_anything(self, conn: Connection) -> bool:
        client = self.subscriptions.subscriber_for(conn)
        return client is not None and bool(client.queues or client.notifiers)

    def _count_expired(self, n: int) -> None:
        self.counters.messages_expired += n

    # --- connections ------------------------------------------------------------------

    async def request_hook(self, request: HttpRequest) -> HttpResponse | object:
        """The listener's request hook: an upgrade on any path is accepted; a plain
        GET of "/" gets the information page, if there is one."""
        if request.is_websocket_upgrade:
            return ACCEPT_WEBSOCKET
        if (request.method == "GET" and urlsplit(request.target).path == "/"
                and self.info_page is not None):  # "/?format=json" too (info.py)
            return self.info_page(request)
        return HttpResponse(404, b"Not Found\n")

    async def serve_connection(self, ws: WebSocketConnection) -> None:
        """Serve one trio-websocket connection a host program accepted."""
        transport = BlockTransport(ws, stalled_timeout=self.config.stalled_writer_timeout)
        await self.serve_transport(transport)

    async def serve_transport(
        self, transport: BlockStream, scope: trio.CancelScope | None = None
    ) -> None:
        """Handshake, then serve one client until it leaves; never raises for its faults.
        `scope` is the cancel scope the caller runs this in (the listener's, for the
        connection's whole life): the router ends the connection by cancelling it.
        Without one, a scope is made here."""
        if scope is None:
            with trio.CancelScope() as scope:
                await self.serve_transport(transport, scope)
            return
        try:
            native = transport if isinstance(transport, TlsBlockTransport) else None
            handshake = await server_handshake(
                transport, self.key_hash, self.config.handshake_timeout, self.identity,
                transport.web_challenge,
                session_id=None if native is None else native.session_id,
                legacy=native is not None and native.legacy,
                # the client certificate chain the edge verified (native TLS; none
                # over WebSocket); an in-memory transport may carry one
                peer_chain=getattr(transport, "peer_chain", ()),
                services=self._service_id,
            )
            transport.established()
            if handshake.proxy_server:
                log.info("proxy %s connected (v%d)", transport.remote, handshake.version)
            blocks: BlockStream = transport
            if handshake.cipher is not None:
                blocks = EncryptedTransport(transport, handshake.cipher)
            gated = GatedTransport(blocks, self.gate)
            conn = Connection(next(self._ids), gated, handshake, self.config.send_queue_size)
            del handshake, blocks, gated, native  # nothing of the handshake is kept
            # Served here, not in a method of its own: an idle connection waits in
            # this frame, and each frame it waits in is memory it keeps.
            assert self._background is not None, "connections are served while it runs"
            self.connections[conn.id] = conn
            client = self.subscriptions.open(conn)
            self.counters.connections_total += 1
            log.debug("%r connected", conn)
            try:
                await conn.run(self._serving, client, scope, self._background)
            finally:
                self._cleanup(client)
            log.debug("%r closed: %s", conn, conn.close_reason or "done")
        except TransportClosed as e:
            log.debug("connection from %s closed: %s", transport.remote, e)
        except Exception:
            log.exception("connection from %s failed", transport.remote)
        finally:
            if transport.stalled:
                self.counters.writers_stalled += 1
                log.info("dropped %s: it stopped reading", transport.remote)
            # A connection the router ended (its scope cancelled) still says goodbye,
            # within close_timeout.
            with trio.CancelScope(shield=scope.cancel_called):
                await transport.aclose(0 if transport.stalled else self.config.close_timeout)

    async def _service_id(self, role: bytes, cert: bytes, cert_hash: bytes) -> bytes:
        """The id of the service of this certificate and role, made on its first
        session (docs/protocol.md#client-service)."""
        if self.ownership.workers == 1:
            service_id = secrets.token_bytes(SERVICE_ID_SIZE)
        else:
            # Every worker makes the same id for a certificate, in its own store, so the
            # service is one for the router (docs/workers.md#service-subscriptions).
            service_id = hmac.new(self.identity.seed, b"service id " + role + cert_hash,
                                  hashlib.sha256).digest()[:SERVICE_ID_SIZE]
        record = ServiceRecord(service_id, role, cert, cert_hash, int(time.time()))
        return (await self.queues.add_service(record)).service_id

    def _cleanup(self, client: ClientSubscriptions) -> None:
        """Forget the connection and every subscription it still holds."""
        if self._fronts is not None:
            self._fronts.forget(client.conn)
        self.subscriptions.forget(client)
        self.proxy.forget(client.conn.id)
        self.connections.pop(client.conn.id, None)
        client.conn.close()

    # --- several workers (docs/workers.md) -----------------------------------------------

    def install_serving(self, fronts: FrontServing) -> ClientServing:
        """Serve this worker's connections through `fronts` (which hands each queue's
        commands to its owner); returns the router's own serving, for their parts."""
        own = self._shadow_serving
        assert isinstance(own, ClientServing)
        self._serving = fronts
        self._fronts = fronts
        return own

    def open_shadow(self, transport: BlockStream, handshake: Handshake,
                    serving: ClientHandler[ClientSubscriptions],
                    ender: Cancellable) -> ClientSubscriptions:
        """Another worker's client, served here for the queues this worker owns: a
        connection whose transport is the channel (workers/handoff.py), served on
        demand (no task while it is idle); `ender.cancel()` ends it, and
        `close_shadow` forgets it."""
        assert self._background is not None, "connections are served while it runs"
        conn = Connection(next(self._ids), transport, handshake, self.config.send_queue_size)
        self.connections[conn.id] = conn
        self.shadows += 1
        client = self.subscriptions.open(conn)
        conn.serve_on_demand(serving, client, ender, self._background)
        return client

    def close_shadow(self, client: ClientSubscriptions) -> None:
        """Forget a shadow whose tasks are gone (`Connection.end_on_demand`)."""
        self.shadows -= 1
        self.subscriptions.forget(client)
        self.proxy.forget(client.conn.id)
        self.connections.pop(client.conn.id, None)
        client.conn.close()

    # --- operation (the control port) ---------------------------------------------------

    def suspend(self) -> None:
        """Stop accepting clients, reading commands and delivering; `resume` undoes it."""
        self.gate.suspend()
        if self.listener is not None:
            self.listener.suspend()

    def resume(self) -> None:
        self.gate.resume()
        if self.listener is not None:
            self.listener.resume()

    async def delete_queue(self, recipient_id: bytes) -> bool:
        """Delete a queue and its messages as its recipient's DEL would; False if unknown."""
        return await self.commands.delete_queue(recipient_id) is None

    async def block_queue(self, recipient_id: bytes, reason: str) -> bool:
        """Every command on the queue but DEL gets ERR BLOCKED; its subscriber gets END."""
        if await self.queues.get_queue(Party.RECIPIENT, recipient_id) is None:
            return False
        self.blocked.add(recipient_id, reason)
        self.counters.queues_blocked += 1
        self.subscriptions.end_queue(recipient_id, Event.END)
        return True

    def unblock_queue(self, recipient_id: bytes) -> bool:
        return self.blocked.remove(recipient_id)

    def save_now(self) -> str:
        """Write the memory store's snapshot now; the durable stores are on disk already."""
        if not isinstance(self.messages, MemoryMessageStore):
            return f"ok: the {self.config.store} store is on disk already"
        if self.config.data_dir is None or not isinstance(self.queues, MemoryQueueStore):
            return "error: no data directory, nothing can be saved"
        directory = store_dir(self.config.data_dir, "memory")
        # Messages first, as at a clean stop: a crash between the two loses no queue.
        messages = self.messages.save(directory / MESSAGES_SNAPSHOT)
        queues = self.queues.save(directory / QUEUES_SNAPSHOT)
        return f"ok: saved {queues} queues and {messages} messages"

    # --- changes while running (SIGHUP, the control port's drain) -------------------------

    def reconfigure(self, new: RouterConfig) -> tuple[list[str], list[str]]:
        """Take the settings of `new` that can change while the router runs
        (`LIVE_SETTINGS`); returns (settings changed, settings that differ but need a
        restart). A TLS certificate is loaded for the next handshakes; one that cannot be
        used raises ConfigError and nothing changes."""
        old = self.config
        changed = [f.name for f in fields(RouterConfig)
                   if f.compare and getattr(old, f.name) != getattr(new, f.name)]
        live = [name for name in changed if name in LIVE_SETTINGS]
        if old.tls_cert is None or new.tls_cert is None:  # ws:// <-> wss:// is a new listener
            live = [name for name in live if name not in ("tls_cert", "tls_key")]
        if {"tls_cert", "tls_key"} & set(live) or self._tls_files_changed(new):
            fresh = listener_tls(new)  # checks the files; raises before anything changes
            assert fresh is not None and self.tls is not None
            self.tls.load_cert_chain(new.tls_cert, new.tls_key)  # type: ignore[arg-type]
            live = sorted({*live, "tls_cert"})
        self.config = replace(old, **{name: getattr(new, name) for name in live})
        self.commands.reconfigure(self.config)
        if isinstance(self.messages, MemoryMessageStore):
            self.messages.max_bytes = self.config.memory_store_max_bytes
        return live, [name for name in changed if name not in live]

    def _tls_files_changed(self, new: RouterConfig) -> bool:
        """The same paths, new contents (a renewed certificate): load them again too."""
        return (self.tls is not None and new.tls_cert is not None
                and new.tls_cert == self.config.tls_cert and new.tls_key == self.config.tls_key)

    def start_drain(self, period: float) -> bool:
        """Drain in the background, then set `drained`; False if a drain is under way."""
        if self.draining or self._background is None:
            return False
        self.draining = True
        self._background.start_soon(self._drain_then_stop, period)
        return True

    async def _drain_then_stop(self, period: float) -> None:
        await self.drain(period)
        self.drained.set()

    async def drain(self, period: float) -> None:
        """Stop accepting clients, then close the connected ones spread over `period`
        seconds (so that their reconnections do not arrive at once), oldest first, and
        return once they are gone (or `period` and one second more have passed)."""
        self.draining = True
        if self.listener is not None:
            self.listener.suspend()
        log.info("draining: not accepting clients, closing %d over %.0f s",
                 len(self.connections), period)
        connections = sorted(self.connections.values(), key=lambda conn: conn.id)
        pause = period / len(connections) if connections else 0.0
        with trio.move_on_after(period + 1.0):
            for n, conn in enumerate(connections):
                if n:
                    await trio.sleep(pause)
                conn.close_now("the router is draining")
            while self.connections:
                await trio.sleep(0.05)
        left = len(self.connections)
        (log.warning if left else log.info)("drained: %d clients still connected", left)

    # --- observation ---------------------------------------------------------------------

    def statistics(self) -> RouterStatistics:
        return self.counters.snapshot(
            # another worker's clients served here (workers/handoff.py) are not counted
            connections=len(self.connections) - self.shadows,
            subscriptions=len(self.subscriptions),
            pending_deliveries=self.subscriptions.pending_deliveries(),
            proxy_connections=len(self.relays),
        )

    def connection_task_counts(self) -> dict[int, int]:
        """Connection id -> tasks serving it (its receiving task and its helpers: the
        delivery task, per-queue tasks, proxied commands)."""
        return {cid: conn.task_count() for cid, conn in self.connections.items()}

    def connection_for_session(self, session_id: bytes) -> Connection | None:
        """The open connection with this session id (tests find their own connection so)."""
        for conn in self.connections.values():
            if conn.session_id == session_id:
                return conn
        return None


@dataclass(frozen=True, slots=True)
class RouterInfo:
    host: str
    port: int
    router: Router
    listener: EdgeListener | None = None  # suspend() / resume() accepting
    metrics_port: int | None = None  # bound ports of the opt-in operation listeners
    control_port: int | None = None

    @property
    def key_hash(self) -> bytes:
        return self.router.key_hash

    @property
    def url(self) -> str:
        scheme = "wss" if self.router.config.tls_cert is not None else "ws"
        return f"{scheme}://{host_port(self.host, self.port)}"

    @property
    def address(self) -> str:
        """The address clients use: with the public host, never a wildcard (0.0.0.0)."""
        return self.router.identity.address(self.router.config.advertised_host, self.port)


@asynccontextmanager
async def open_router(
    config: RouterConfig, ownership: Ownership = ONE_WORKER, identity_dir: Path | None = None
) -> AsyncIterator[Router]:
    """A running router (without a listener) for the duration of the block; with
    `ownership`, one worker of several (docs/workers.md), whose data directory is its
    share and whose identity is in `identity_dir`."""
    identity = load_or_create_identity(config.data_dir if identity_dir is None else identity_dir)
    async with open_router_stores(config) as (queues, messages):
        if isinstance(messages, MemoryMessageStore):
            messages.max_bytes = config.memory_store_max_bytes
        router = Router(config, identity, queues, messages, ownership)
        async with trio.open_nursery() as nursery:
            await nursery.start(router.run)
            try:
                yield router
            finally:
                nursery.cancel_scope.cancel()


async def handle_websocket(router: Router, ws: WebSocketConnection) -> None:
    """Serve one WebSocket the caller has already accepted, until the client leaves."""
    await router.serve_connection(ws)


async def serve_router(
    config: RouterConfig,
    *,
    info_page: InfoPage | None = None,
    ownership: Ownership = ONE_WORKER,
    listening: socket.socket | None = None,
    identity_dir: Path | None = None,
    prepare: Callable[[Router], None] | None = None,
    shared_admission: SharedCaps | None = None,
    task_status: trio.TaskStatus[RouterInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the router on `config.host:config.port` until cancelled; `info_page`
    answers a plain GET of "/". A worker of several (docs/workers.md) is given its
    `ownership`, the `listening` socket its supervisor bound, the `identity_dir` and
    the router's `shared_admission`; `prepare` is called with the router before its
    listener accepts."""
    tls = listener_tls(config)
    async with (
        open_router(config, ownership, identity_dir) as router,
        trio.open_nursery() as nursery,
    ):
        router.info_page = info_page
        if prepare is not None:
            prepare(router)
        with naming_address("the router", config.host, config.port):
            listener: EdgeListener = await nursery.start(partial(
                serve_edge, router.serve_transport, config.host, config.port,
                hook=router.request_hook, limits=config.edge_limits(), tls=tls,
                identity_tls=identity_tls_context(router.identity), listening=listening,
                shared_admission=shared_admission,
            ))
        router.listener = listener
        router.tls = tls
        if router.gate.suspended:  # suspended before the listener was there
            listener.suspend()
        metrics_port, control_port = await start_operation_ports(nursery, router)
        info = RouterInfo(config.host, listener.port, router, listener, metrics_port,
                          control_port)
        log.info("router listening at %s and %s", info.address, info.url)
        task_status.started(info)
        await router.drained.wait()  # a drain ends the router (control port, SIGUSR2)
        nursery.cancel_scope.cancel()


def listener_tls(config: RouterConfig) -> ssl.SSLContext | None:
    """The TLS context of the configured certificate and key (None without them);
    a file that cannot be used is a ConfigError, exit code 2 at the command line."""
    cert, key = config.tls_cert, config.tls_key
    if cert is None or key is None:
        return None
    for what, path, marker in (("certificate", cert, b"-----BEGIN CERTIFICATE-----"),
                               ("key", key, b"PRIVATE KEY-----")):
        try:
            pem = path.read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read the TLS {what} {path}: {os_error_reason(e)}") from e
        if marker not in pem:
            raise ConfigError(f"the TLS {what} {path} is not a PEM {what} file")
    try:
        return web_tls_context(cert, key)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e):
            raise ConfigError(f"the TLS key {key} is not the key of the certificate {cert}") from e
        raise ConfigError(f"cannot use the TLS certificate {cert} with the key {key}: "
                          f"{e.reason or e}") from e


async def start_operation_ports(
    nursery: trio.Nursery, router: Router
) -> tuple[int | None, int | None]:
    """The opt-in metrics and control ports of the configuration; their bound ports."""
    config = router.config
    metrics_port = control_port = None
    if config.metrics_port is not None:
        metrics_port = await nursery.start(
            serve_metrics, router, config.metrics_host, config.metrics_port
        )
        log.info("metrics on http://%s/metrics", host_port(config.metrics_host, metrics_port))
    if config.control_port is not None:
        control_port = await nursery.start(serve_control, router, config.control_port)
        log.info("control port on %s", host_port(CONTROL_HOST, control_port))
    return metrics_port, control_port
