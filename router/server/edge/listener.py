"""The router's own listener: TCP (or TLS), the HTTP upgrade, the caps on connections.

Theory of operation: one accept loop takes sockets off the listening socket and
starts one task per connection. Each time the socket is readable it takes every
connection waiting in the backlog (up to `ACCEPT_BATCH`), not one: a pass of
Trio's scheduler over thousands of busy connections can take a second, and at
one accept per pass a router busy with a reconnecting crowd would let the rest
of the crowd wait in the kernel, retrying.

A connection's task is its own for its whole life: it reads the HTTP request
head under a fixed deadline (a trickle of bytes cannot extend it, EOF ends it
at once), asks the request hook what to do (`http.py`), and either answers
plain HTTP and closes, or completes the WebSocket upgrade and runs the
connection handler with a `WebSocketTransport` (`websocket.py`: blocks in and
out, docs/protocol.md "Transport") and the connection's one cancel scope (the
admission ticket's), which the handler keeps for ending the connection: no
wrapper task, and no scope left behind by the upgrade. The listener's
`Keepalive` sweep pings silent WebSocket peers and drops dead ones. With the
router's identity the same port also serves SMP straight over TLS
(`native_tls.py` tells the two apart before the request head); such a
connection is admitted, counted and capped exactly as a WebSocket one, and is
pending until its SMP handshake is through.

The limits are set in `EdgeLimits` (settings):

- connections still in the upgrade or the SMP handshake ("pending") are capped
  per remote address and in total, and a full pool drops the oldest pending
  connection of the most represented address for a newcomer from a less
  represented one (`admission.py`); the handler calls the transport's
  `established()` (`WebSocketTransport`, `TlsBlockTransport`) once its handshake
  is through;
- all connections are capped per remote address (an IPv6 client by its /64)
  and in total, below the process's file-descriptor limit with headroom; above
  a cap a client gets `503` before the upgrade;
- an accept failing for lack of descriptors (EMFILE) is logged at most once per
  `FD_LOG_INTERVAL` and retried after a pause, never a traceback per retry.
"""

from __future__ import annotations

import errno
import logging
import math
import resource
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable

import trio
from OpenSSL import SSL
from websockets.http11 import Request
from websockets.server import ServerProtocol

from router.protocol.handshake import web_challenge

from ..settings.edge_limits import EdgeLimits
from .admission import (
    Admission,
    AdmissionLimits,
    AdmittedConnection,
    Refused,
    SharedCaps,
    address_key,
)
from .block_stream import STREAM_GONE, BlockStream
from .http import (
    ACCEPT_WEBSOCKET,
    BadRequest,
    HttpResponse,
    RequestHook,
    accept_every_upgrade,
    drop_header,
    read_request_head,
    request_for_hook,
    serialize_response,
)
from .native_tls import NativeEdge, TlsBlockTransport
from .websocket import Keepalive, WebSocketTransport, end_framing, framing, new_framing

log = logging.getLogger(__name__)


FD_LOG_INTERVAL = 10.0  # seconds between two log lines about descriptor exhaustion
EVICTION_LOG_INTERVAL = 10.0  # seconds between two log lines about a full pending pool
ACCEPT_RETRY_DELAY = 0.1  # seconds to wait for a free descriptor after EMFILE
REFUSAL_TIMEOUT = 1.0  # seconds a refused client gets to send its request for the 503
MAX_REFUSING = 64  # refusals answered at once; beyond that a refused socket just closes
_FD_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# A connection that went away while in the backlog: skip it, accept the next.
_GONE_ERRORS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})
ACCEPT_BATCH = 256  # connections taken off the backlog per wake-up at most
# One worker of several, holding more than its share of the router's connections:
SHARE_WAIT = 0.005  # seconds it leaves the backlog to the others before it accepts anyway
SHARE_BATCH = 8  # connections it then takes per wake-up at most
DEFAULT_LIMITS = EdgeLimits()
# A peer gone in the middle of the TLS handshake raises the ssl module's own error.
_GONE_OR_TLS_FAILED = (*STREAM_GONE, ssl.SSLError)


def connection_cap(limits: EdgeLimits) -> int:
    """`max_connections`, lowered to leave `fd_headroom` below RLIMIT_NOFILE."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.max_connections
    return max(1, min(limits.max_connections, soft - limits.fd_headroom))




# --- the listener ------------------------------------------------------------------------


# Given the transport and the cancel scope the connection's task runs in, for its life.
ConnectionHandler = Callable[[BlockStream, trio.CancelScope], Awaitable[None]]


class EdgeListener:
    """The listening socket, its accept loop, and the counts its caps are checked on."""

    def __init__(
        self,
        listener: socket.socket,
        handler: ConnectionHandler,
        hook: RequestHook,
        limits: EdgeLimits,
        tls: ssl.SSLContext | None,
        identity_tls: SSL.Context | None = None,
        shared_admission: SharedCaps | None = None,
    ) -> None:
        self._listener = listener
        self._handler = handler
        self._hook = hook
        self.limits = limits
        self._tls = tls
        # Native SMP over TLS beside HTTP (native_tls.py), when the router has an identity.
        self._native = None if identity_tls is None else NativeEdge(identity_tls, tls, limits)
        self.max_connections = connection_cap(limits)
        # One worker of several: the router's caps are the supervisor's, asked at each
        # accept (workers/admission.py); this process keeps its cap on descriptors.
        self._shared = shared_admission
        self.admission = Admission(AdmissionLimits(
            limits.max_pending, limits.max_pending_per_address, self.max_connections,
            limits.max_connections_per_address,
        ) if shared_admission is None else AdmissionLimits(
            sys.maxsize, sys.maxsize, self.max_connections, None))
        self._last_eviction_log = -math.inf
        self._refusing = 0
        self.refused = 0  # connections answered 503 or closed at once, since start
        self._suspended = False
        self._resumed = trio.Event()
        self._accept_scope: trio.CancelScope | None = None
        self._last_fd_log = -math.inf
        self.fd_exhaustions = 0  # accepts that failed for lack of descriptors
        self._closed_one = trio.Event()  # set (and renewed) whenever a connection ends
        self.keepalive = Keepalive(limits)  # pings silent WebSocket peers, drops dead ones

    @property
    def open_connections(self) -> int:
        return self.admission.open

    @property
    def pending(self) -> int:
        """Connections in the upgrade or the SMP handshake."""
        return self.admission.pending

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    @property
    def host(self) -> str:
        return self._listener.getsockname()[0]

    @property
    def suspended(self) -> bool:
        return self._suspended

    async def wait_connections_at_most(self, count: int) -> None:
        """Return once no more than `count` connections are open."""
        while self.open_connections > count:
            await self._closed_one.wait()

    def suspend(self) -> None:
        """Stop accepting; open connections go on, new ones wait in the kernel's backlog."""
        if not self._suspended:
            self._suspended = True
            self._resumed = trio.Event()
            if self._accept_scope is not None:
                self._accept_scope.cancel()

    def resume(self) -> None:
        """Accept again after `suspend()`."""
        if self._suspended:
            self._suspended = False
            self._resumed.set()

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.keepalive.run)
            while True:
                if self._suspended:
                    await self._resumed.wait()
                    continue
                for stream in await self._accept_waiting():
                    nursery.start_soon(self._serve_socket, stream)

    async def _accept_waiting(self) -> list[trio.SocketStream]:
        """The connections waiting in the backlog, once there is one (none if
        suspended meanwhile or out of descriptors)."""
        shared, batch = self._shared, ACCEPT_BATCH
        with trio.CancelScope() as self._accept_scope:
            await trio.lowlevel.wait_readable(self._listener)
            if shared is not None and shared.over_share(self.admission.open):
                # Every idle worker was woken: one under its share takes these. If none
                # has within SHARE_WAIT (all busy, or restarting), a few are taken here.
                await trio.sleep(SHARE_WAIT)
                shared, batch = None, SHARE_BATCH
        self._accept_scope = None
        streams: list[trio.SocketStream] = []
        while not self._suspended and len(streams) < batch:
            if shared is not None and shared.over_share(self.admission.open, len(streams)):
                break  # the rest of the backlog to the others first (above)
            try:
                sock, _ = self._listener.accept()
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno in _GONE_ERRORS:
                    continue
                if e.errno not in _FD_ERRORS:
                    raise
                self._log_fd_exhaustion(e)
                if not streams:
                    await trio.sleep(ACCEPT_RETRY_DELAY)
                break
            streams.append(trio.SocketStream(trio.socket.from_stdlib_socket(sock)))
        return streams

    def _log_fd_exhaustion(self, e: OSError) -> None:
        self.fd_exhaustions += 1
        now = trio.current_time()
        if now - self._last_fd_log >= FD_LOG_INTERVAL:
            self._last_fd_log = now
            log.warning(
                "cannot accept connections: %s (%d open, %d such failures so far); "
                "retrying every %.1f s", e.strerror or e, self.open_connections,
                self.fd_exhaustions, ACCEPT_RETRY_DELAY,
            )

    async def _serve_socket(self, stream: trio.SocketStream) -> None:
        remote_host, remote = _peer(stream)
        evicted = self.admission.evicted
        key = address_key(remote_host)
        try:
            local = self.admission.admit(key)
            ticket: AdmittedConnection = local
            if self._shared is not None:
                ticket = await self._shared.admit(key, local)
        except Refused as refusal:
            await self._refuse(stream, str(refusal))
            return
        except BaseException:  # cancelled while the router's caps were asked
            stream.socket.close()
            raise
        if self.admission.evicted != evicted:
            self._log_eviction()
        # Not `with framing()`: the context manager would be one more object kept for
        # the connection's life.
        protocol = new_framing()
        transport = None
        try:
            # The connection's one cancel scope: a full pool cancels it to drop this one
            # while pending, the handler to end it once established.
            with ticket.scope:
                transport = await self._upgrade(stream, protocol, remote, ticket.established)
                if transport is not None:
                    await self._handler(transport, ticket.scope)
        finally:
            if transport is not None:
                self.keepalive.discard(transport)
            end_framing(protocol)
            ticket.close()
            await trio.aclose_forcefully(stream)
            self._closed_one.set()
            self._closed_one = trio.Event()

    def _log_eviction(self) -> None:
        now = trio.current_time()
        if now - self._last_eviction_log >= EVICTION_LOG_INTERVAL:
            self._last_eviction_log = now
            log.warning(
                "the pool of connections being opened is full (%d): the most represented "
                "address's oldest ones are dropped for newcomers (%d so far)",
                self.limits.max_pending, self.admission.evicted,
            )

    async def _refuse(self, stream: trio.SocketStream, why: str) -> None:
        """503 for a client the caps keep out; a flood of them is just closed."""
        self.refused += 1
        if self._refusing >= MAX_REFUSING or self._tls is not None:
            await trio.aclose_forcefully(stream)
            return
        self._refusing += 1
        try:
            with trio.move_on_after(REFUSAL_TIMEOUT):
                with framing() as protocol:
                    await read_request_head(stream, protocol, self.limits.max_request_bytes)
                await stream.send_all(serialize_response(HttpResponse(503, why.encode() + b"\n")))
        except (*STREAM_GONE, BadRequest):
            pass
        finally:
            self._refusing -= 1
            await trio.aclose_forcefully(stream)

    async def _upgrade(
        self, raw: trio.SocketStream, protocol: ServerProtocol, remote: str,
        on_established: Callable[[], None],
    ) -> WebSocketTransport | TlsBlockTransport | None:
        """Read the request and answer it; the transport if it became a WebSocket, or
        the native SMP transport if the client speaks SMP over TLS."""
        stream: trio.abc.Stream = raw
        if self._tls is not None and self._native is None:
            stream = trio.SSLStream(raw, self._tls, server_side=True)
        with trio.move_on_after(self.limits.upgrade_timeout):
            try:
                if self._native is not None:
                    opened = await self._native.open(raw, remote, on_established)
                    if opened is None or isinstance(opened, TlsBlockTransport):
                        return opened
                    stream = opened
                request, events = await read_request_head(
                    stream, protocol, self.limits.max_request_bytes
                )
                return await self._answer(stream, protocol, request, events, remote,
                                          on_established)
            except BadRequest as e:
                log.debug("bad request from %s: %s", remote, e)
                if e.response:
                    await _send_quietly(stream, e.response)
            except _GONE_OR_TLS_FAILED:
                pass
        return None

    async def _answer(
        self,
        stream: trio.abc.Stream,
        protocol: ServerProtocol,
        request: Request,
        events: list[object],
        remote: str,
        on_established: Callable[[], None],
    ) -> WebSocketTransport | None:
        answer = await self._hook(request_for_hook(request, remote))
        if isinstance(answer, HttpResponse):
            await _send_quietly(stream, serialize_response(answer))
            return None
        if answer is not ACCEPT_WEBSOCKET:
            raise TypeError(f"request hook returned {answer!r}")
        response = protocol.accept(request)
        drop_header(response, "Server")
        protocol.send_response(response)
        for data in protocol.data_to_send():
            if data:
                await stream.send_all(data)
        # The protocol's parser keeps the request for the connection's life: not its headers.
        request.headers.clear()
        if response.status_code != 101:
            return None
        transport = WebSocketTransport(
            stream, protocol, remote, self.limits, on_established,
            web_challenge(request.path.encode("latin-1", "replace")),
        )
        self.keepalive.add(transport)  # until the connection ends (_serve_socket)
        transport._events.extend(events)
        return transport



async def _send_quietly(stream: trio.abc.Stream, data: bytes) -> None:
    try:
        await stream.send_all(data)
    except _GONE_OR_TLS_FAILED:
        pass


def _peer(stream: trio.SocketStream) -> tuple[str, str]:
    """The remote host (what the per-address cap counts) and "host:port"."""
    try:
        address = stream.socket.getpeername()
    except OSError:
        return "?", "?"
    host, port = address[0], address[1]
    return host, f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_edge(
    handler: ConnectionHandler,
    host: str,
    port: int,
    *,
    hook: RequestHook = accept_every_upgrade,
    limits: EdgeLimits = DEFAULT_LIMITS,
    tls: ssl.SSLContext | None = None,
    identity_tls: SSL.Context | None = None,
    listening: socket.socket | None = None,
    shared_admission: SharedCaps | None = None,
    task_status: trio.TaskStatus[EdgeListener] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on `host:port` (0: a free port) until cancelled; reports the `EdgeListener`
    (its `port`, `suspend()`, `resume()`) through `task_status`. With `identity_tls`
    the port serves native SMP over TLS too (native_tls.py). A `listening` socket
    bound already (a worker's, shared with the other workers) is served instead, with
    the router's caps kept by the `shared_admission` of its supervisor."""
    listener = await bind_listening_socket(host, port) if listening is None else listening
    listener.setblocking(False)
    edge = EdgeListener(listener, handler, hook, limits, tls, identity_tls, shared_admission)
    with listener:
        task_status.started(edge)
        await edge.serve()


async def bind_listening_socket(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (the first address the host resolves to)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    for extra in listeners[1:]:
        await extra.aclose()
    # The accept loop takes connections without a checkpoint between them, which
    # Trio's own accept always makes: it gets the plain socket.
    return socket.socket(fileno=listeners[0].socket.detach())
